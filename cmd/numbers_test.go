package cmd

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// Every number adds up, in every output form: report's TSV, CSV, --json
// and HTML page, check --json and rehearse --json, over every log in
// testdata, logs rehearse writes, and generated ones. No count or
// remaining is negative; refusals by reason sum to refused; rows are sent
// plus refused; outcomes sum to sent; jobs are the distinct job ids; and
// every figure two forms share is the same in both.

// numbersPolicy is a check policy with a threshold on each shared figure;
// whether they pass does not matter here.
const numbersPolicy = `budget: {deadline: 45s, token_ceiling: 8000, max_attempts: 3, max_wait: 5s}
retry: {base_delay: 500ms, max_delay: 8s, slow_5xx_after: 10s, honor_retry_after: true, timeouts_retried: 1}
thresholds:
  refused_rate: ["rate <= 100%"]
  unknown_rate: ["rate <= 100%"]
  attempts_per_success: ["< 1000000"]
  wait_s: ["p(95) < 1000s"]
  goodput: ["value >= 0"]
`

// figures is what one log's forms say.
type figures struct {
	report reportJSON
	check  checkJSON
	hasRun bool
	run    rehearseJSON
}

func TestNumbersAddUpInEveryForm(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(numbersPolicy), 0o644))
	var logs []string
	for _, g := range []string{"../testdata/logs/*.log", "../testdata/golden/*/*.log"} {
		m, err := filepath.Glob(g)
		require.NoError(t, err)
		logs = append(logs, m...)
	}
	require.NotEmpty(t, logs)
	for _, log := range logs {
		t.Run(filepath.Base(filepath.Dir(log))+"/"+filepath.Base(log), func(t *testing.T) {
			assertNumbersAddUp(t, log, policy, nil)
		})
	}

	// Logs rehearse writes, judged by the policy that wrote them (so the
	// replay changes nothing, and check's refused rate is report's).
	for _, run := range []struct {
		name string
		args []string
	}{
		{"demo", nil},
		{"bad-day", []string{"--config", repoPath(t, "testdata/policies/bad-day-gate.yaml"), "--jobs", "30", "--seed", "5"}},
	} {
		t.Run("rehearse/"+run.name, func(t *testing.T) {
			dir := t.TempDir()
			code, out, errOut := rehearseRun(t, dir, nil, append(run.args, "--json")...)
			require.Equal(t, ExitOK, code, errOut)
			var r rehearseJSON
			require.NoError(t, json.Unmarshal([]byte(out), &r))
			p := policy
			if run.name != "demo" {
				p = repoPath(t, "testdata/policies/bad-day-gate.yaml")
			} else {
				// The demo's own budget and retry rules.
				p = filepath.Join(dir, "demo-policy.yaml")
				require.NoError(t, os.WriteFile(p, []byte(strings.Replace(numbersPolicy, "max_attempts: 3", "max_attempts: 2", 1)), 0o644))
			}
			assertNumbersAddUp(t, filepath.Join(dir, "rehearsal.log"), p, &r)
		})
	}

	// Generated logs: jobs interleaving, rows after a job's job_end row,
	// jobs with no job_end (as record writes them), sent rows whose
	// decision is a refusal (a live wait-cap cut, a record past the cap),
	// rows the gate refused, rows without a job id.
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "numbers")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		log := filepath.Join(dir, "gen.log")
		if err := os.WriteFile(log, []byte(genLog(rt)), 0o644); err != nil {
			rt.Fatal(err)
		}
		assertNumbersAddUp(rapidT{rt}, log, policy, nil)
	})
}

// rapidT lets the assertions run inside rapid (a *rapid.T is no *testing.T).
type rapidT struct{ *rapid.T }

func (r rapidT) Helper() {}
func (r rapidT) TempDir() string {
	d, err := os.MkdirTemp("", "numbers")
	if err != nil {
		r.Fatal(err)
	}
	return d
}

type numbersT interface {
	require.TestingT
	Helper()
	TempDir() string
}

var outcomeChoices = []admit.Outcome{admit.OK, admit.OK, admit.ServerError, admit.Timeout, admit.WaitCap, admit.RateLimited, admit.ConnError}

func genLog(t *rapid.T) string {
	var b strings.Builder
	b.WriteString(ledgerfile.Header + "\n")
	ts := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	attempts := map[string]int{}
	n := rapid.IntRange(1, 40).Draw(t, "rows")
	for i := range n {
		job := fmt.Sprintf("j%d", rapid.IntRange(0, 6).Draw(t, "job"))
		if rapid.IntRange(0, 9).Draw(t, "nojob") == 0 {
			job = ""
		}
		attempts[job]++
		ms := func(name string) string {
			return strconv.FormatFloat(float64(rapid.IntRange(0, 30_000).Draw(t, name))/1000, 'f', 3, 64)
		}
		wait, elapsed := ms("wait"), ms("elapsed")
		if we, _ := strconv.ParseFloat(elapsed, 64); func() bool { w, _ := strconv.ParseFloat(wait, 64); return w > we }() {
			wait, elapsed = elapsed, wait
		}
		fmt.Fprintf(&b, "ts=%s ", ts.Add(time.Duration(i)*time.Second).Format(time.RFC3339))
		if job != "" {
			fmt.Fprintf(&b, "job=%s attempt=%d ", job, attempts[job])
		}
		fmt.Fprintf(&b, "seat=s%d wait_s=%s elapsed_s=%s tokens=%d", rapid.IntRange(0, 1).Draw(t, "seat"), wait, elapsed, rapid.IntRange(0, 3000).Draw(t, "tokens"))
		switch rapid.IntRange(0, 5).Draw(t, "kind") {
		case 0: // refused before sending
			reason := admit.Reasons[rapid.IntRange(0, len(admit.Reasons)-1).Draw(t, "reason")]
			fmt.Fprintf(&b, ` decision="refuse: %s" sent=false`, reason)
		case 1: // a live wait-cap cut
			b.WriteString(` outcome=wait_cap billing=ambiguous decision="refuse: queue wait"`)
		case 2: // a record past the cap
			b.WriteString(` outcome=ok billing=billable decision="refuse: attempt cap"`)
		default:
			o := outcomeChoices[rapid.IntRange(0, len(outcomeChoices)-1).Draw(t, "outcome")]
			fmt.Fprintf(&b, " outcome=%s decision=admit", o)
		}
		if rapid.IntRange(0, 3).Draw(t, "ends") == 0 {
			ends := []string{ledgerfile.JobSucceeded, ledgerfile.JobFailed, ledgerfile.JobUnknown}
			fmt.Fprintf(&b, " job_end=%s", ends[rapid.IntRange(0, len(ends)-1).Draw(t, "end")])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// assertNumbersAddUp runs every form over one log and checks what they say.
func assertNumbersAddUp(t numbersT, log, policy string, run *rehearseJSON) {
	t.Helper()
	var f figures
	exec := func(args ...string) (int, string, string) {
		ios, _, out, errOut := TestStreams()
		fac := &Factory{IO: ios, Now: func() time.Time { return rehearseNow }, Getenv: func(string) string { return "" }, Ctx: context.Background()}
		return Run(fac, args), out.String(), errOut.String()
	}
	code, out, errOut := exec("report", "--skip-bad", "--json", log)
	require.Equal(t, ExitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &f.report))
	rep := f.report

	lf, err := os.Open(log)
	require.NoError(t, err)
	defer lf.Close()
	ids, single, nrows := map[string]bool{}, int64(0), int64(0)
	_, _, err = summary.Scan(lf, log, true, func(r *ledgerfile.Row) {
		nrows++
		if r.Job == "" {
			single++
		}
		ids[r.Job] = true
	})
	require.NoError(t, err)
	delete(ids, "")
	require.Equal(t, nrows, rep.Rows, "%s: rows", log)
	assert.Equal(t, int64(len(ids))+single, rep.All.Jobs, "%s: jobs are the distinct job ids", log)

	for _, g := range append(rep.Groups, rep.All) {
		where := log + ": group " + g.Key
		for name, n := range map[string]int64{"rows": g.Rows, "attempts": g.Attempts, "refused": g.Refused, "jobs": g.Jobs,
			"succeeded": g.Succeeded, "failed": g.Failed, "unknown": g.Unknown, "cancelled": g.Cancelled,
			"retry tax tokens": g.RetryTax.Tokens, "wasted calls": g.WastedCalls, "failed attempts": g.FailedAttempts,
			"billed failures": g.BilledFailures, "fallback jobs": g.FallbackJobs} {
			assert.GreaterOrEqual(t, n, int64(0), "%s: %s", where, name)
		}
		var byReason, outcomes int64
		for k, n := range g.Refusals {
			assert.GreaterOrEqual(t, n, int64(0), "%s: refusals %s", where, k)
			byReason += n
		}
		for k, n := range g.Outcomes {
			assert.GreaterOrEqual(t, n, int64(0), "%s: outcome %s", where, k)
			outcomes += n
		}
		assert.Equal(t, g.Refused, byReason, "%s: refusals by reason sum to refused", where)
		assert.Equal(t, g.Rows, g.Attempts+g.Refused, "%s: rows = sent + refused", where)
		assert.Equal(t, g.Attempts, outcomes, "%s: outcomes sum to sent", where)
	}
	all := rep.All
	assert.Equal(t, all.Jobs, all.Succeeded+all.Failed+all.Unknown+all.Cancelled, "%s: every job ends one way", log)

	// TSV and CSV: one line per group, the same figures.
	byKey := map[string]*summary.Group{}
	for _, g := range rep.Groups {
		byKey[g.Key] = g
	}
	for _, form := range []string{"tsv", "csv"} {
		args := []string{"report", "--skip-bad", log}
		if form == "csv" {
			args = []string{"report", "--skip-bad", "--csv", log}
		}
		code, out, errOut := exec(args...)
		require.Equal(t, ExitOK, code, errOut)
		rd := csv.NewReader(strings.NewReader(out))
		if form == "tsv" {
			rd.Comma = '\t'
		}
		recs, err := rd.ReadAll()
		require.NoError(t, err, form)
		require.Equal(t, wideHeader(), recs[0], form)
		col := map[string]int{}
		for i, h := range recs[0] {
			col[h] = i
		}
		require.Len(t, recs, len(rep.Groups)+2, "%s: one line per group, and (all)", form)
		for _, rec := range recs[1:] {
			g := byKey[rec[0]]
			if rec[0] == summary.AllGroup {
				g = rep.All
			}
			require.NotNil(t, g, "%s: group %s", form, rec[0])
			where := fmt.Sprintf("%s %s: group %s", log, form, g.Key)
			num := func(name string) int64 {
				n, err := strconv.ParseInt(rec[col[name]], 10, 64)
				require.NoError(t, err, "%s: %s", where, name)
				return n
			}
			for name, want := range map[string]int64{"rows": g.Rows, "attempts": g.Attempts, "refused": g.Refused, "held_out": g.HeldOut,
				"jobs": g.Jobs, "succeeded": g.Succeeded, "failed": g.Failed, "unknown": g.Unknown, "cancelled": g.Cancelled,
				"retry_tax_tokens": g.RetryTax.Tokens, "wasted_calls": g.WastedCalls, "failed_attempts": g.FailedAttempts,
				"billed_failures": g.BilledFailures, "fallback_jobs": g.FallbackJobs, "wait_s_n": g.Wait.N} {
				assert.Equal(t, want, num(name), "%s: %s", where, name)
			}
			var refused, outcomes int64
			for _, r := range admit.Reasons {
				name := "refused_" + strings.ReplaceAll(string(r), " ", "_")
				assert.Equal(t, g.Refusals[string(r)], num(name), "%s: %s", where, name)
				refused += num(name)
			}
			other := num("refused_other")
			assert.GreaterOrEqual(t, other, int64(0), "%s: refused_other", where)
			assert.Equal(t, g.Refused, refused+other, "%s: refusals by reason sum to refused", where)
			for _, o := range admit.Outcomes {
				outcomes += num("outcome_" + string(o))
			}
			assert.Equal(t, g.Attempts, outcomes, "%s: outcomes sum to sent", where)
			for name, d := range map[string]summary.Dist{"wait_s": g.Wait, "elapsed_s": g.Elapsed} {
				p50, p95 := "", "" // JSON's null
				if d.N > 0 {
					p50, p95 = plainNum(d.P50, 3), plainNum(d.P95, 3)
				}
				assert.Equal(t, p50, rec[col[name+"_p50"]], "%s: %s p50", where, name)
				assert.Equal(t, p95, rec[col[name+"_p95"]], "%s: %s p95", where, name)
			}
		}
	}

	// The HTML page's figures are report --json's.
	page := filepath.Join(t.TempDir(), "r.html")
	code, _, errOut = exec("report", "--skip-bad", "--html", page, log)
	require.Equal(t, ExitOK, code, errOut)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal([]byte(out0(exec("report", "--skip-bad", "--json", log))), &doc))
	for _, m := range regexp.MustCompile(`data-fig="([^"]+)" data-value="([^"]*)"`).FindAllStringSubmatch(string(b), -1) {
		want, ok := jsonAt(doc, m[1])
		require.True(t, ok, "report --json has no %s", m[1])
		if want == nil {
			assert.Equal(t, "null", m[2], "%s: html %s", log, m[1])
			continue
		}
		got, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err, m[1])
		assert.Equal(t, want, got, "%s: html %s", log, m[1])
	}

	// check --json: the same rows and jobs, goodput over the same jobs,
	// and, when the replay changes no decision, report's refused rate.
	code, out, errOut = exec("check", "--skip-bad", "--json", "--policy", policy, log)
	require.Contains(t, []int{ExitOK, ExitRefuse}, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &f.check))
	ck := f.check
	assert.Equal(t, rep.Rows, ck.Rows+ck.HeldOutRows, "%s: check rows", log)
	if all.HeldOut == 0 {
		assert.Equal(t, all.Jobs, ck.Jobs, "%s: check jobs", log)
	}
	assert.Equal(t, ck.Jobs, ck.Goodput.Jobs, "%s: goodput's jobs are check's", log)
	assert.LessOrEqual(t, ck.Goodput.Good, ck.Goodput.Jobs, "%s: good jobs", log)
	for _, th := range ck.Thresholds {
		if th.Metric == "refused_rate" && ck.ChangesTotal == 0 && all.HeldOut == 0 {
			require.NotNil(t, th.Observed)
			assert.Equal(t, rate(all.Refused, rep.Rows), *th.Observed, "%s: check's refused rate is report's", log)
		}
		if th.Metric == "unknown_rate" && all.HeldOut == 0 {
			require.NotNil(t, th.Observed)
			assert.Equal(t, rate(all.Unknown, all.Jobs), *th.Observed, "%s: check's unknown rate is report's", log)
		}
	}

	// rehearse --json: the run's figures are its log's.
	if run != nil {
		j := run.Jobs
		assert.Equal(t, all.Jobs, int64(j.Total), "rehearse jobs")
		assert.Equal(t, []int64{all.Succeeded, all.Failed, all.Unknown, all.Cancelled},
			[]int64{int64(j.Succeeded), int64(j.Failed), int64(j.Unknown), int64(j.Cancelled)}, "rehearse job ends")
		assert.Equal(t, rate(all.Refused, rep.Rows), float64(j.RefusedRate), "rehearse refused rate is report's")
		for _, th := range ck.Thresholds {
			if th.Metric == "refused_rate" && ck.ChangesTotal == 0 {
				require.NotNil(t, th.Observed)
				assert.Equal(t, float64(j.RefusedRate), *th.Observed, "rehearse refused rate is check's")
			}
		}
		for _, s := range run.Seats {
			g := byKey[s.Seat]
			if g == nil {
				assert.Zero(t, s.Attempts, "seat %s", s.Seat)
				continue
			}
			assert.Equal(t, g.Attempts, s.Attempts, "seat %s attempts", s.Seat)
			var byReason int64
			for _, n := range s.Refusals {
				byReason += n
			}
			assert.Equal(t, g.Refused, byReason, "seat %s: refusals sum to refused", s.Seat)
		}
	}
}

func rate(num, den int64) float64 {
	if den == 0 {
		return 0
	}
	return float64(num) / float64(den)
}

func out0(_ int, out, _ string) string { return out }
