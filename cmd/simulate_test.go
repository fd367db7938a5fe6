package cmd

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse/model"
)

const (
	simTwo   = "../testdata/models/two-attempts.yaml"
	simThree = "../testdata/models/three-attempts.yaml"
	simSeed2 = "lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100 prompt=1500"
)

// simTable reads the piped table into metric → cells.
func simTable(t *testing.T, out string) (header []string, rows map[string][]string) {
	t.Helper()
	rows = map[string][]string{}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		cells := strings.Split(line, "\t")
		if i == 0 {
			header = cells
			continue
		}
		if line == "" || strings.HasPrefix(line, "provider calls") {
			break
		}
		rows[cells[0]] = cells[1:]
	}
	return header, rows
}

func TestSimulateOptions(t *testing.T) {
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	var got *SimulateOptions
	root := NewRootCmd(f)
	for _, c := range root.Commands() {
		if c.Name() == "simulate" {
			root.RemoveCommand(c)
		}
	}
	root.AddCommand(newSimulateCmd(f, func(o *SimulateOptions) error { got = o; return nil }))
	root.SetArgs([]string{"simulate", "--policy", simTwo, "--vs", simThree, "--model", simSeed2,
		"--jobs", "5000", "--rate", "2.5", "--seed", "42", "--layers", "sdk=2,app=3", "--json"})
	require.NoError(t, root.Execute())
	require.NotNil(t, got)
	require.Len(t, got.Policies, 2)
	assert.Equal(t, "two-attempts.yaml", got.Policies[0].Label)
	assert.Equal(t, "three-attempts.yaml", got.Policies[1].Label)
	assert.Equal(t, 2, got.Policies[0].Policy.Budget.MaxAttempts)
	assert.Equal(t, 3, got.Policies[1].Policy.Budget.MaxAttempts)
	assert.Equal(t, 12*time.Second, got.Policies[1].Policy.Timeouts.Hard)
	assert.Equal(t, []string{"scratch", "cheap"}, got.Policies[0].Policy.Fallback)
	assert.Equal(t, 0.15, got.Policies[0].Chain[0].PriceIn)
	assert.Equal(t, "lognormal p50=2.1s p99=14s tokens=2100 prompt=1500 hang=0.3% 429=1% 5xx=2%", got.Model.String())
	assert.Equal(t, 5000, got.Jobs)
	assert.Equal(t, 2.5, got.Rate)
	assert.Equal(t, uint64(42), got.Seed)

	// Two files of one name are told apart by their paths.
	dir := t.TempDir()
	same := []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b", "a.yaml")}
	require.NoError(t, os.MkdirAll(filepath.Dir(same[1]), 0o755))
	for _, p := range same {
		require.NoError(t, os.WriteFile(p, []byte("budget: {max_attempts: 2}\n"), 0o644))
	}
	root.SetArgs([]string{"simulate", "--policy", same[0], "--vs", same[1], "--model", simSeed2})
	require.NoError(t, root.Execute())
	require.Len(t, got.Policies, 2)
	assert.Equal(t, same, []string{got.Policies[0].Label, got.Policies[1].Label})
	assert.Equal(t, []admit.Layer{{Name: "sdk", Attempts: 2}, {Name: "app", Attempts: 3}}, got.Layers)
	assert.True(t, got.JSON)
	assert.False(t, got.Progress, "not a terminal")
}

func TestSimulateSeatsPlayTheModel(t *testing.T) {
	code, out, errOut := costRun(t, "simulate", "--policy", simTwo, "--model", simSeed2, "--jobs", "20000", "--rate", "5")
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, "simulated 20000 jobs per policy, 5 jobs/s, seed 1, model lognormal p50=2.1s p99=14s tokens=2100 prompt=1500 hang=0.3% 429=1% 5xx=2%\n", errOut)
	header, rows := simTable(t, out)
	assert.Equal(t, []string{"metric", "two-attempts.yaml"}, header)
	for _, m := range []string{"success rate", "failed rate", "unknown rate", "deadline-miss rate",
		"end to end p50", "end to end p95", "end to end p99", "attempts per job", "billed attempts per job",
		"attempts per success", "attempt failure rate", "tokens per job", "tokens per success",
		"cost per job", "cost per success", "retry tax (tokens)", "retry tax (USD)", "wasted calls per job",
		"breaker open", "virtual time"} {
		assert.Contains(t, rows, m)
	}
	// Seed 002's shape: the median job is the median call.
	assert.Equal(t, "2.1", rows["end to end p50"][0][:3])
	assert.True(t, strings.HasPrefix(rows["success rate"][0], "99.8"), rows["success rate"])
	// 1500 prompt at $0.15/M + 600 completion at $0.60/M = $0.000585 an
	// answer on scratch; the few answered by the cheaper fallback seat
	// (a job's second attempt goes there) pull the mean a little below.
	assert.Equal(t, "$0.00057", rows["cost per success"][0][:8])
}

func TestSimulateSameSeedSameOutput(t *testing.T) {
	args := []string{"simulate", "--policy", simTwo, "--model", simSeed2, "--jobs", "3000", "--rate", "3"}
	_, a, _ := costRun(t, args...)
	_, b, _ := costRun(t, args...)
	_, c, _ := costRun(t, append(args, "--seed", "2")...)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
}

func TestSimulateVsJSON(t *testing.T) {
	code, out, errOut := costRun(t, "simulate", "--policy", simTwo, "--vs", simThree, "--model", simSeed2,
		"--jobs", "4000", "--rate", "4", "--json", "--layers", "sdk=2,app=3,queue=3")
	require.Equal(t, ExitOK, code, errOut)
	var got simJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.Policies, 2)
	a, b := got.Policies[0], got.Policies[1]
	assert.Equal(t, "two-attempts.yaml", a.Name)
	assert.Equal(t, 4000, a.Jobs)
	assert.InDelta(t, float64(b.AttemptsPerJob-a.AttemptsPerJob), float64(got.Difference["attempts_per_job"]), 1e-12)
	assert.InDelta(t, float64(b.SuccessRate-a.SuccessRate), float64(got.Difference["success_rate"]), 1e-12)
	assert.InDelta(t, float64(b.CostPerJob-a.CostPerJob), float64(got.Difference["cost_per_job_usd"]), 1e-15)
	require.NotNil(t, got.Layers)
	assert.Equal(t, int64(18), got.Layers.WorstCase)
	require.Len(t, got.Layers.Expected, 2)
	assert.Equal(t, float64(a.AttemptFailureRate), got.Layers.Expected[0].F)
	assert.InDelta(t, admit.LayersExpectedCalls([]admit.Layer{{Name: "sdk", Attempts: 2}, {Name: "app", Attempts: 3}, {Name: "queue", Attempts: 3}}, float64(a.AttemptFailureRate)),
		got.Layers.Expected[0].Calls, 1e-12)
	assert.Contains(t, errOut, "retrygate: warning: 3 layers retry (sdk, app, queue): one user action can make 18 provider calls")
	assert.Equal(t, simSeed2[:len("lognormal")], got.Model[:len("lognormal")])
}

func TestSimulateVsTable(t *testing.T) {
	code, out, _ := costRun(t, "simulate", "--policy", simTwo, "--vs", simThree, "--model", "fixed elapsed=1s 5xx=10% tokens=100", "--jobs", "2000")
	require.Equal(t, ExitOK, code)
	header, rows := simTable(t, out)
	assert.Equal(t, []string{"metric", "two-attempts.yaml", "three-attempts.yaml", "difference"}, header)
	// A third attempt rescues the jobs whose two attempts both failed.
	assert.Equal(t, "98.80%", rows["success rate"][0])
	assert.Equal(t, "99.90%", rows["success rate"][1])
	assert.Equal(t, "+1.10 pp", rows["success rate"][2])
	assert.Equal(t, "+0.000s", rows["end to end p50"][2], "every answer takes 1s either way")
}

// Script seats with no --model: each plays its own script, as rehearse
// would (testdata/seats/bad-day.yaml's header tells each job's story).
func TestSimulateScriptSeats(t *testing.T) {
	code, out, errOut := costRun(t, "simulate", "--policy", "../testdata/models/bad-day.yaml", "--jobs", "6")
	require.Equal(t, ExitOK, code, errOut)
	_, rows := simTable(t, out)
	assert.Equal(t, "66.67%", rows["success rate"][0], "jobs 2 (permanent error) and 6 (deadline) fail")
	assert.Equal(t, "33.33%", rows["failed rate"][0])
	assert.Equal(t, "16.67%", rows["deadline-miss rate"][0], "job 6: Retry-After 60s would end past the deadline")
	assert.Equal(t, "1.8333", rows["attempts per job"][0], "11 attempts for 6 jobs")
	assert.Equal(t, "2.7500", rows["attempts per success"][0])
	assert.Contains(t, errOut, "model scripts")
}

func TestSimulateDefaultsWithNoPolicy(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errOut := costRun(t, "simulate", "--model", "fixed elapsed=2s", "--jobs", "10")
	require.Equal(t, ExitOK, code, errOut)
	header, rows := simTable(t, out)
	assert.Equal(t, []string{"metric", "defaults"}, header)
	assert.Equal(t, "100.00%", rows["success rate"][0])
	assert.Equal(t, "2.000s", rows["end to end p99"][0])
	assert.Equal(t, "20.000s", rows["virtual time"][0], "ten 2s jobs one after another")
	assert.Contains(t, errOut, "hint: no seat has prices")
}

func TestSimulateBadInputNamesIt(t *testing.T) {
	dir := t.TempDir()
	openaiOnly := filepath.Join(dir, "openai.yaml")
	require.NoError(t, os.WriteFile(openaiOnly, []byte("seats:\n  scratch: {kind: openai, base_url: http://127.0.0.1:1/v1}\nfallback: [scratch]\n"), 0o644))
	badKey := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(badKey, []byte("budget:\n  deadline: 45s\n  max_attemps: 3\n"), 0o644))
	noChain := filepath.Join(dir, "nochain.yaml")
	require.NoError(t, os.WriteFile(noChain, []byte("seats:\n  a: {kind: script, script: builtin:seed003}\n  b: {kind: script, script: builtin:seed003}\n"), 0o644))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--model", "lognormal p50=2.1s p99=14s foo=1"}, `--model: term "foo=1": unknown key "foo"`},
		{[]string{"--model", "lognormal p50=2.1s p99=14s 5xx=120%"}, `--model: term "5xx=120%": must be between 0% and 100%, got 120%`},
		{[]string{"--model", "gamma k=2"}, `--model: term "gamma": unknown model kind`},
		{[]string{"--model", ""}, "--model: empty"},
		{[]string{"--model", "log:/nonexistent.log"}, `--model: log "/nonexistent.log": no such file or directory`},
		{[]string{"--model", "fixed elapsed=1s", "--jobs", "0"}, "--jobs: must be between 1 and 100000000, got 0"},
		{[]string{"--model", "fixed elapsed=1s", "--jobs", "many"}, `--jobs: not a whole number "many"`},
		{[]string{"--model", "fixed elapsed=1s", "--rate", "-2"}, `--rate: negative number "-2"`},
		{[]string{"--model", "fixed elapsed=1s", "--rate", "0"}, "--rate: must be a positive number of jobs per second"},
		{[]string{"--model", "fixed elapsed=1s", "--seed", "-1"}, `--seed: not a whole number "-1"`},
		{[]string{"--model", "fixed elapsed=1s", "--layers", "sdk=two"}, `--layers: "sdk=two"`},
		{[]string{"--model", "fixed elapsed=1s", "--policy", "/nonexistent.yaml"}, `config "/nonexistent.yaml": no such file or directory`},
		{[]string{"--model", "fixed elapsed=1s", "--policy", badKey}, badKey + ":3: budget.max_attemps: unknown key"},
		{[]string{"--model", "fixed elapsed=1s", "--policy", noChain}, "nochain.yaml: no fallback chain to simulate (seats: a, b)"},
		{[]string{"--policy", openaiOnly}, `openai.yaml: seat "scratch" is a openai seat: a simulation plays a model, not the network`},
		{[]string{"--model", "fixed elapsed=1s", "--vs", ""}, "--vs: empty path"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := costRun(t, append([]string{"simulate"}, tt.args...)...)
			assert.Equal(t, ExitBad, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "retrygate: ")
			assert.Contains(t, errOut, tt.want)
		})
	}
}

// The breaker with jobs back to back: a warning says why the numbers look
// the way they do.
func TestSimulateWarnsBreakerWithoutRate(t *testing.T) {
	t.Chdir(t.TempDir())
	code, _, errOut := costRun(t, "simulate", "--model", "fixed elapsed=1s 5xx=60%", "--jobs", "200")
	require.Equal(t, ExitOK, code)
	assert.Contains(t, errOut, "jobs refused by an open breaker; with jobs one after another a refusal takes no time, so the cooldown never passes: give --rate")
	code, _, errOut = costRun(t, "simulate", "--model", "fixed elapsed=1s 5xx=60%", "--jobs", "200", "--rate", "1")
	require.Equal(t, ExitOK, code)
	assert.NotContains(t, errOut, "open breaker")
}

// TestSimulateScripts runs this command's end-to-end scripts on their own.
func TestSimulateScripts(t *testing.T) { runScriptsMatching(t, "simulate_*.txtar") }

func simCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSimulate1M: a million jobs of a two-attempt policy against
// seed 002's latency shape, through the command (policy file, model, the
// attempt loop on the virtual clock, the table). cpu-s/op is the process's
// CPU time, which a busy machine does not inflate as it does wall time.
//
//	go test -run=^$ -bench=Simulate1M -benchtime=1x -cpu=1 ./cmd/
func BenchmarkSimulate1M(b *testing.B) {
	ios, _, _, _ := TestStreams()
	ios.Out, ios.ErrOut = io.Discard, io.Discard
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	args := []string{"simulate", "--policy", simTwo, "--model", simSeed2, "--jobs", "1000000", "--rate", "50"}
	b.ResetTimer()
	for range b.N {
		c0 := simCPU()
		if code := Run(f, args); code != ExitOK {
			b.Fatalf("exit %d", code)
		}
		b.ReportMetric((simCPU() - c0).Seconds(), "cpu-s/op")
	}
}

// The simulator's output for script seats equals `rehearse` on those
// scripts: the rows rehearse writes (timestamps and prompt hash aside)
// are the rows the simulation counts, and the figures simulate prints are
// the figures of rehearse's log.
func TestSimulateScriptSeatEqualsRehearse(t *testing.T) {
	const policy, jobs, seed = "../testdata/models/bad-day.yaml", "12", "7"
	logPath := filepath.Join(t.TempDir(), "rehearsal.log")
	code, _, errOut := costRun(t, "rehearse", "--config", policy, "--jobs", jobs, "--seed", seed, "--log", logPath)
	require.Equal(t, ExitOK, code, errOut)
	logged, _, err := ledgerfile.ReadFile(logPath)
	require.NoError(t, err)
	require.NotEmpty(t, logged)

	// Row for row.
	ios, _, _, _ := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	sp, err := loadSimPolicy(f, newSimulateCmd(f, nil), policy, "")
	require.NoError(t, err)
	specs, err := model.Planners(sp.Chain, nil, 7)
	require.NoError(t, err)
	var simulated []string
	_, err = model.Run(model.Sim{Policy: sp.Policy, Seats: specs, Jobs: 12, Seed: 7,
		Rows: func(r *ledgerfile.Row) {
			c := *r
			c.TS, c.PromptSHA = time.Time{}, ""
			simulated = append(simulated, ledgerfile.FormatRow(&c))
		}})
	require.NoError(t, err)
	var rehearsed []string
	for i := range logged {
		c := logged[i]
		c.TS, c.PromptSHA, c.Line = time.Time{}, "", 0
		rehearsed = append(rehearsed, ledgerfile.FormatRow(&c))
	}
	require.Equal(t, rehearsed, simulated)

	// Figure for figure.
	code, out, errOut := costRun(t, "simulate", "--policy", policy, "--jobs", jobs, "--seed", seed, "--json")
	require.Equal(t, ExitOK, code, errOut)
	var got simJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	sum := summary.New(model.SummaryOptions(sp.Policy, specs))
	for i := range logged {
		sum.Add(&logged[i], logPath)
	}
	fromLog := model.View(sum.Close(), false, time.Duration(got.Policies[0].DurationS*float64(time.Second)), nil)
	// The summary counts durations at the log's milliseconds: the figures
	// simulate prints are the figures of rehearse's log, end to end
	// included. Compared as JSON, breakers aside (a log does not say).
	var raw struct{ Policies []map[string]any }
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	have := raw.Policies[0]
	delete(have, "name")
	delete(have, "file")
	fromLog.DurationS = have["virtual_duration_s"].(float64)
	b, err := json.Marshal(fromLog)
	require.NoError(t, err)
	var want map[string]any
	require.NoError(t, json.Unmarshal(b, &want))
	for _, m := range []map[string]any{have, want} {
		m["breaker_open_s"] = 0
		for _, st := range m["seats"].([]any) {
			st.(map[string]any)["breaker_open_s"] = 0
		}
	}
	assert.Equal(t, want, have)
}

// On a terminal a long run draws a progress bar on stderr, never on stdout.
func TestSimulateProgressBarOnStderr(t *testing.T) {
	t.Chdir(t.TempDir())
	ios, _, out, errOut := TestStreams()
	ios.ErrTTY = true
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	code := Run(f, []string{"simulate", "--model", "fixed elapsed=1s", "--jobs", "60000", "--rate", "100"})
	require.Equal(t, ExitOK, code, errOut.String())
	assert.Contains(t, errOut.String(), "simulating")
	assert.NotContains(t, out.String(), "simulating")
}

// Ctrl-C: the jobs so far are summarised, with a warning.
func TestSimulateInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ios, _, out, errOut := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: ctx}
	t.Chdir(t.TempDir())
	code := Run(f, []string{"simulate", "--model", "fixed elapsed=1s", "--jobs", "100000", "--json"})
	require.Equal(t, ExitRefuse, code, errOut.String())
	assert.Contains(t, errOut.String(), "retrygate: warning: defaults: interrupted after ")
	var got simJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	assert.True(t, got.Policies[0].Interrupted)
	assert.Less(t, got.Policies[0].Jobs, 100000)
}

// Interrupted, the text report says so once: no "simulated N jobs" after
// "interrupted after n of N jobs".
func TestSimulateInterruptedSaysItOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ios, _, _, errOut := TestStreams()
	f := &Factory{IO: ios, Now: time.Now, Getenv: os.Getenv, Ctx: ctx}
	t.Chdir(t.TempDir())
	code := Run(f, []string{"simulate", "--model", "fixed elapsed=1s", "--jobs", "100000"})
	require.Equal(t, ExitRefuse, code, errOut.String())
	assert.Equal(t, 1, strings.Count(errOut.String(), "100000"), errOut.String())
	assert.Contains(t, errOut.String(), "retrygate: warning: defaults: interrupted after ")
	assert.NotContains(t, errOut.String(), "simulated 100000 jobs")
}

// One rounding for durations in output: every *_s figure of --json has
// at most 3 decimals (milliseconds, as the log writes them).
func TestJSONSecondsAreMilliseconds(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(rehearseRepo, "testdata", "policies")
	runs := [][]string{
		{"simulate", "--model", "lognormal p50=0.5s p99=2s 5xx=10%", "--jobs", "300", "--rate", "5", "--json",
			"--policy", filepath.Join(policy, "pass.yaml"), "--vs", filepath.Join(policy, "tight.yaml")},
		{"rehearse", "--jobs", "20", "--json", "--log", filepath.Join(dir, "r.log")},
		{"report", "--json", filepath.Join(rehearseRepo, "testdata", "logs", "mixed.log")},
	}
	for _, args := range runs {
		t.Run(args[0], func(t *testing.T) {
			ios, _, out, errOut := TestStreams()
			f := &Factory{IO: ios, Now: func() time.Time { return rehearseNow }, Getenv: func(string) string { return "" }, Ctx: context.Background()}
			t.Chdir(dir)
			require.Equal(t, ExitOK, Run(f, args), errOut.String())
			var v any
			require.NoError(t, json.Unmarshal(out.Bytes(), &v))
			n := 0
			var walk func(path string, v any)
			walk = func(path string, v any) {
				switch x := v.(type) {
				case map[string]any:
					for k, e := range x {
						walk(path+"."+k, e)
					}
				case []any:
					for _, e := range x {
						walk(path+"[]", e)
					}
				case float64:
					// TPOT is a quotient, seconds per token (docs/load.md): a
					// millisecond would be most of it, so it keeps its precision.
					if (strings.HasSuffix(path, "_s") || strings.Contains(path, "_s.")) && !strings.Contains(path, "tpot_s") { // wait_s.p95 too
						n++
						assert.InDelta(t, math.Round(x*1000)/1000, x, 1e-12, "%s = %v", path, x)
						assert.LessOrEqual(t, len(strconv.FormatFloat(x, 'f', -1, 64)), len(strconv.FormatFloat(x, 'f', 3, 64)), "%s = %v", path, x)
					}
				}
			}
			walk("", v)
			assert.NotZero(t, n, "some *_s figures")
		})
	}
}
