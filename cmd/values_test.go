package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrygate/retrygate/ledgerfile"
)

// cost --fail-rate, simulate --model's shares and a policy's
// breaker.failure_rate read a rate the same way: a spelling one takes, all
// take; one refused is refused by all.
func TestOneRateRule(t *testing.T) {
	for _, tc := range []struct {
		rate string
		ok   bool
	}{
		{"0.0625", true}, {"6.25%", true}, {"6.25e-2", true}, {".5", true}, {"0", true},
		{"0x1p-4", false}, {"0X1P-4", false}, {"1_0%", false}, {"NaN", false}, {"Inf", false},
		{"5%%", false}, {"-0.1", false}, {"5s", false},
	} {
		t.Run(tc.rate, func(t *testing.T) {
			dir := t.TempDir()
			code, _, errOut := cfgRun(t, dir, nil, "cost", "--fail-rate", tc.rate, "--retries", "3")
			assert.Equal(t, tc.ok, code == ExitOK, "cost: %s", errOut)
			code, _, errOut = cfgRun(t, dir, nil, "simulate", "--jobs", "1", "--model", "fixed elapsed=1s 5xx="+tc.rate)
			assert.Equal(t, tc.ok, code == ExitOK, "simulate: %s", errOut)
			writeFile(t, dir, "p.yaml", fmt.Sprintf("breaker: {failure_rate: %q}\n", tc.rate))
			code, _, errOut = cfgRun(t, dir, nil, "simulate", "--jobs", "1", "--config", "p.yaml", "--model", "fixed elapsed=1s")
			assert.Equal(t, tc.ok, code == ExitOK, "breaker.failure_rate: %s", errOut)
			if !tc.ok {
				assert.Contains(t, errOut, "p.yaml:1: breaker.failure_rate: ")
			}
		})
	}
}

// A count a flag takes is a count the log reader takes back, and the
// other way round: one cap (admit.MaxTokens), one message.
func TestOneCountRule(t *testing.T) {
	for _, tc := range []struct {
		n    string
		ok   bool
		want string
	}{
		{"8000", true, ""}, {"2199023255552", true, ""}, {"9007199254740991", true, ""},
		{"9007199254740992", false, "count over 9007199254740991"}, {"-3", false, `negative count "-3"`},
		{"1.5", false, `not a whole number "1.5"`}, {"0x10", false, `not a whole number "0x10"`},
	} {
		t.Run(tc.n, func(t *testing.T) {
			code, _, errOut := cfgRun(t, t.TempDir(), nil, append(admitArgs[:len(admitArgs):len(admitArgs)], "--spent-tokens", tc.n)...)
			_, _, rerr := ledgerfile.ReadAll(strings.NewReader("wait_s=1 elapsed_s=1 tokens="+tc.n+"\n"), "r.log")
			if tc.ok {
				assert.Contains(t, []int{ExitOK, ExitRefuse}, code, errOut)
				assert.NoError(t, rerr)
				return
			}
			assert.Equal(t, ExitBad, code)
			assert.Contains(t, errOut, "--spent-tokens: "+tc.want)
			assert.ErrorContains(t, rerr, "tokens: "+tc.want)
		})
	}
}

func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
