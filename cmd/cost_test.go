package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// costRun runs one command line against test streams.
func costRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ios, _, out, errOut := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	code = Run(f, args)
	return code, out.String(), errOut.String()
}

// The seed's numbers, as printed.
func TestCostSeedNumbers(t *testing.T) {
	tests := []struct {
		args []string
		want []string // lines of stdout, tab-separated when piped
	}{
		{[]string{"--fail-rate", "0.05", "--retries", "3"}, []string{
			"expected attempts\t(1 − f^(n+1)) / (1 − f)\tf=0.05 n=3\t1.0526\t+5.26%\tattempts per logical request",
			"ceiling (n → ∞)\t1 / (1 − f)\tf=0.05\t1.0526\t+5.26%\thowever many retries",
		}},
		{[]string{"--fail-rate", "20%"}, []string{
			"ceiling (n → ∞)\t1 / (1 − f)\tf=0.2\t1.25\t+25%\thowever many retries",
		}},
		{[]string{"--cost", "0.004", "--fallback-cost", "$0.011", "--fail-rate", "0.03", "--timeout-rate", "0.03"}, []string{
			"ceiling (n → ∞)\t1 / (1 − f)\tf=0.03\t1.0309\t+3.09%\thowever many retries",
			"timeout surcharge\tC·(1 + t)\tC=$0.004 t=0.03\t$0.00412\t+3%\tper logical request",
			"failover, pre-generation\tC1 + f·C2\tC1=$0.004 C2=$0.011 f=0.03\t$0.00433\t+8.25%\tleg 1 failed before generation",
			"failover, after timeout\tC1 + t·(C1 + C2)\tC1=$0.004 C2=$0.011 t=0.03\t$0.00445\t+11.25%\tleg 1 timed out, billed in full",
		}},
		{[]string{"--cost", "0.02", "--attempts-per-success", "1.4"}, []string{
			"cost per success\tC × attempts per success\tC=$0.02 a=1.4\t$0.028\t+40%\tthe retry tax",
		}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := costRun(t, append([]string{"cost"}, tt.args...)...)
			require.Equal(t, ExitOK, code, errOut)
			assert.Empty(t, errOut)
			want := "quantity\tformula\twith\tvalue\tvs one attempt\tnote\n" + strings.Join(tt.want, "\n") + "\n"
			assert.Equal(t, want, out)
		})
	}
}

func TestCostJSON(t *testing.T) {
	code, out, _ := costRun(t, "cost", "--cost", "0.004", "--fallback-cost", "0.011", "--fail-rate", "0.03", "--retries", "3", "--json")
	require.Equal(t, ExitOK, code)
	var got costJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	byName := map[string]costResult{}
	for _, r := range got.Results {
		byName[r.Name] = r
	}
	assert.InDelta(t, 0.00433, byName["failover_pre_generation"].Value, 1e-12)
	assert.Equal(t, "C1 + f·C2", byName["failover_pre_generation"].Formula)
	assert.InDelta(t, admit.ExpectedAttempts(0.03, 3), byName["expected_attempts"].Value, 1e-15)
	assert.Equal(t, "attempts", byName["expected_attempts"].Unit)
	assert.Nil(t, got.Layers)
}

func TestCostLayers(t *testing.T) {
	code, out, errOut := costRun(t, "cost", "--layers", "sdk=3,app=3,queue=3", "--fail-rate", "1%")
	require.Equal(t, ExitOK, code)
	assert.Contains(t, out, "worst case\tsdk=3 × app=3 × queue=3\t27\n")
	assert.Contains(t, out, "expected\tf=1% (--fail-rate)\t1.0101\n")
	assert.Equal(t, "retrygate: warning: 3 layers retry (sdk, app, queue): one user action can make 27 provider calls; give one layer the retry budget and set the others to 1 attempt\n", errOut)

	code, out, errOut = costRun(t, "cost", "--layers", "sdk=1,app=3,queue=1", "--json")
	require.Equal(t, ExitOK, code)
	assert.Empty(t, errOut, "one owner: no warning")
	var got costJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.NotNil(t, got.Layers)
	assert.Equal(t, int64(3), got.Layers.WorstCase)
	assert.Equal(t, []string{"app"}, got.Layers.Owners)
	assert.Empty(t, got.Layers.Expected, "no failure rate, no expectation")
}

func TestCostBadInputNamesTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--fail-rate", "1"}, "--fail-rate: must be below 1"},
		{[]string{"--fail-rate", "100%"}, "--fail-rate: must be below 1"},
		{[]string{"--fail-rate", "-0.1"}, "--fail-rate: must be between 0 and 1, got -0.1"},
		{[]string{"--fail-rate", "NaN"}, `--fail-rate: not a rate "NaN"`},
		{[]string{"--fail-rate", "five"}, `--fail-rate: not a rate "five"`},
		{[]string{"--timeout-rate", "Inf", "--cost", "1"}, `--timeout-rate: not a rate "Inf"`},
		{[]string{"--cost", "-1", "--attempts-per-success", "2"}, `--cost: negative number "-1"`},
		{[]string{"--cost", "NaN", "--attempts-per-success", "2"}, `--cost: not a number "NaN"`},
		{[]string{"--fallback-cost", "0.1", "--fail-rate", "0.1"}, "--fallback-cost: needs --cost"},
		{[]string{"--cost", "1", "--attempts-per-success", "0.5"}, "--attempts-per-success: must be at least 1"},
		{[]string{"--retries", "3"}, "--retries: needs --fail-rate"},
		{[]string{"--retries", "-1", "--fail-rate", "0.1"}, `--retries: negative count "-1"`},
		{[]string{"--retries", "1001", "--fail-rate", "0.1"}, "--retries: 1001 is past any sane cap"},
		{[]string{"--layers", "sdk=0"}, `--layers: "sdk=0": attempts must be a whole number from 1 to 1000`},
		{[]string{"--layers", "sdk"}, `--layers: "sdk": want name=attempts`},
		{[]string{"--layers", "sdk=2,sdk=3"}, `--layers: layer "sdk" given twice`},
		{[]string{"--prices", "in=3,out", "--usage", "prompt=1,completion=1"}, `--prices: "out": want key=value (e.g. in=3,out=15,cached_in=0.3,cache_write=3.75)`},
		{[]string{"--prices", "in=3,in=4", "--usage", "prompt=1,completion=1"}, `--prices: "in" given twice`},
		{[]string{"--prices", "in=3,out=x", "--usage", "prompt=1,completion=1"}, `--prices: out: not a number "x"`},
		{[]string{"--prices", "in=3,cached=1", "--usage", "prompt=1,completion=1"}, `--prices: unknown key "cached" (e.g. in=3,out=15,cached_in=0.3,cache_write=3.75)`},
		{[]string{"--prices", "in=3", "--usage", "prompt=1,completion=1.5"}, `--usage: completion: not a whole number "1.5"`},
		{[]string{"--prices", "in=3", "--usage", "prompt=1,cached_in=1"}, `--usage: unknown key "cached_in" (e.g. prompt=4000,completion=400,cached=3979,cache_write=0)`},
		{[]string{"--prices", "in=3", "--usage", "prompt=10,cached=6,cache_write=5"}, "--usage: cached + cache_write (11) is more than prompt (10): they are parts of it"},
		{[]string{"--cost", "1"}, "cost needs the inputs of at least one formula"},
		{nil, "cost needs the inputs of at least one formula"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := costRun(t, append([]string{"cost"}, tt.args...)...)
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "retrygate: "+tt.want)
		})
	}
}

// argv → options: what the seam sees.
func TestCostOptions(t *testing.T) {
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv}
	var got *CostOptions
	c := newCostCmd(f, func(o *CostOptions) error { got = o; return nil })
	c.SetArgs([]string{"--fail-rate", "5%", "--retries", "2", "--cost", "$0.004", "--json"})
	require.NoError(t, c.Execute())
	require.NotNil(t, got)
	assert.InDelta(t, 0.05, *got.FailRate, 1e-15)
	assert.Equal(t, 2, *got.Retries)
	assert.Equal(t, 0.004, *got.Cost)
	assert.Nil(t, got.TimeoutRate)
	assert.Nil(t, got.FallbackCost)
	assert.True(t, got.JSON)
}

func TestCostFormatting(t *testing.T) {
	assert.Equal(t, "$0.00433", fmtUSDSig(0.004+0.03*0.011, 6))
	assert.Equal(t, "$0.028", fmtUSDSig(0.02*1.4, 6))
	assert.Equal(t, "-$0.5", fmtUSDSig(-0.5, 6))
	assert.Equal(t, "$0", fmtUSDSig(0, 6))
	assert.Equal(t, "1.0526", fmtAttempts(admit.ExpectedAttempts(0.05, 3)))
	assert.Equal(t, "1.25", fmtAttempts(1.25))
	assert.Equal(t, "2", fmtAttempts(2))
	assert.Equal(t, "+40%", fmtIncrease(0.4000000000000001))
	assert.Equal(t, "+0%", fmtIncrease(-1e-9))
	assert.Equal(t, "-12.5%", fmtIncrease(-0.125))
}

// TestCostScripts runs this command's end-to-end scripts on their own
// (TestScript runs them with every other).
func TestCostScripts(t *testing.T) { runScriptsMatching(t, "cost_*.txtar") }

// runScriptsMatching runs some of testdata/script the way TestScript does.
func runScriptsMatching(t *testing.T, pattern string) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "script", pattern))
	require.NoError(t, err)
	require.NotEmpty(t, files, pattern)
	testscript.Run(t, testscript.Params{
		Files: files,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", repoRoot(t))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"exits": cmdExits},
	})
}
