package seat

import (
	"os"
	"runtime"
	"testing"
)

// TestMain builds the tokenizer vocabularies the tests use before any
// stopwatch starts: building one allocates hundreds of megabytes, and the
// garbage collector's work on that would otherwise land inside whichever
// parallel test was timing an attempt at that moment. (Production builds
// every seat at startup, before any attempt, for the same reason.)
func TestMain(m *testing.M) {
	for _, model := range []string{"gpt-4o-mini", ""} {
		if _, err := codecFor(model, ""); err != nil {
			panic(err)
		}
	}
	runtime.GC()
	os.Exit(m.Run())
}
