package realtime

import (
	"testing"
	"time"
)

func TestSlackWidensEveryBound(t *testing.T) {
	t.Setenv(Env, "")
	base := By(time.Second)
	if base != time.Second+hang {
		t.Fatalf("By(1s) unset = %s, want %s", base, time.Second+hang)
	}
	t.Setenv(Env, "300ms")
	if got := By(time.Second); got != base+300*time.Millisecond {
		t.Fatalf("By(1s) with 300ms slack = %s, want %s", got, base+300*time.Millisecond)
	}
	if got := Hang(); got != hang+300*time.Millisecond {
		t.Fatalf("Hang with 300ms slack = %s", got)
	}
	for _, bad := range []string{"-1s", "soon"} {
		t.Setenv(Env, bad)
		if got := Slack(); got != 0 {
			t.Fatalf("Slack(%q) = %s, want 0", bad, got)
		}
	}
}
