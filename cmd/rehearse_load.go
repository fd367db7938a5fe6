package cmd

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
)

// loadShape is how jobs arrive: open-loop at a rate or through a ramp of
// rates, and bounded by a duration; shared by rehearse and simulate.
type loadShape struct {
	Rate     float64         // Poisson arrivals per second (0: closed loop)
	Ramp     []rehearse.Step // rates stepped through instead of Rate
	Duration time.Duration   // bound by time (0: by --jobs alone)
}

// open reports whether jobs arrive open-loop.
func (s loadShape) open() bool { return s.Rate > 0 || len(s.Ramp) > 0 }

// timed reports whether the run is bounded by time.
func (s loadShape) timed() bool { return s.Duration > 0 || len(s.Ramp) > 0 }

const defaultRampStep = 30 * time.Second

// addLoadFlags adds --duration, --ramp and --ramp-step (and --rate when
// rate is true: simulate has its own).
func addLoadFlags(fl *pflag.FlagSet, rate bool) {
	if rate {
		fl.String("rate", "", "open-loop Poisson arrivals, jobs per `second` (seeded; jobs do not wait for earlier ones)")
	}
	fl.String("duration", "", "bound the run by `time` (e.g. 30s): no job starts after it, attempts in flight are cut as Ctrl-C cuts them")
	fl.String("ramp", "", "step through Poisson `rates` (jobs per second, e.g. 1,2,4,8/s), each for --ramp-step")
	fl.String("ramp-step", "", "how long each --ramp rate lasts (default 30s)")
}

// parseLoadFlags reads the arrival flags. jobsSet says whether --jobs
// was given: a run bounded by time runs without a job count unless it was.
func parseLoadFlags(c *cobra.Command) (loadShape, error) {
	var s loadShape
	fl := c.Flags()
	if v, set, err := flagValue(c, "rate", admit.ParseAmount); err != nil {
		return s, err
	} else if set {
		if err := rehearse.CheckRate(v); err != nil || v == 0 {
			return s, badInput("--rate: must be a positive number of jobs per second, got %g", v)
		}
		s.Rate = v
	}
	d, set, err := flagValue(c, "duration", admit.ParseDuration)
	if err != nil {
		return s, err
	}
	if set {
		if d <= 0 {
			return s, badInput("--duration: must be a positive time, got %s", fl.Lookup("duration").Value)
		}
		if d > admit.MaxDuration {
			return s, badInput("--duration: %s is longer than any run (at most %v)", fl.Lookup("duration").Value, admit.MaxDuration)
		}
		s.Duration = d
	}
	step, stepSet, err := flagValue(c, "ramp-step", admit.ParseDuration)
	if err != nil {
		return s, err
	}
	if !fl.Changed("ramp") {
		if stepSet {
			return s, badInput("--ramp-step: only with --ramp")
		}
		return s, nil
	}
	if s.Rate > 0 {
		return s, badInput("--rate and --ramp: give one or the other")
	}
	if !stepSet {
		step = defaultRampStep
	}
	if step <= 0 || step > admit.MaxDuration {
		return s, badInput("--ramp-step: must be a positive time, got %s", fl.Lookup("ramp-step").Value)
	}
	s.Ramp, err = rehearse.ParseRamp(fl.Lookup("ramp").Value.String(), step)
	if err != nil {
		return s, badInput("--ramp: %v", err)
	}
	return s, nil
}

// describe is the shape for the log's "# run" line.
func (s loadShape) describe() string {
	var out string
	if s.Rate > 0 {
		out += " rate=" + strconv.FormatFloat(s.Rate, 'g', -1, 64)
	}
	if len(s.Ramp) > 0 {
		out += " ramp=" + s.rates() + " ramp_step=" + ledgerfile.FormatSeconds(s.Ramp[0].For) + "s"
	}
	if s.Duration > 0 {
		out += " duration=" + ledgerfile.FormatSeconds(s.Duration) + "s"
	}
	return out
}

// human is the ramp and duration for a sentence: ", ramp 1,2,4 jobs/s
// 30s each, for 60s".
func (s loadShape) human() string {
	var out string
	if len(s.Ramp) > 0 {
		out += ", ramp " + s.rates() + " jobs/s " + s.Ramp[0].For.String() + " each"
	}
	if s.Duration > 0 {
		out += ", for " + s.Duration.String()
	}
	return out
}

// rates is the ramp's rates, comma-separated: 1,2,4.
func (s loadShape) rates() string {
	rates := make([]string, len(s.Ramp))
	for i, st := range s.Ramp {
		rates[i] = strconv.FormatFloat(st.Rate, 'g', -1, 64)
	}
	return strings.Join(rates, ",")
}

// idWidthJobs is the job count job ids are padded for: --jobs, or what a
// run bounded by time is expected to start.
func (s loadShape) idWidthJobs(jobs int) int {
	if jobs > 0 {
		return jobs
	}
	var n float64
	for _, st := range s.Ramp {
		n += st.Rate * st.For.Seconds()
	}
	if s.Rate > 0 && s.Duration > 0 {
		n = s.Rate * s.Duration.Seconds()
	}
	return int(min(math.Ceil(n*1.2), 1e9))
}

// printArrivals reports how an open-loop run held its rate, as vegeta
// does, with a warning when the client could not keep up.
func printArrivals(w io.Writer, a rehearse.ArrivalStats, clock string) {
	if a.Started == 0 {
		return
	}
	fmt.Fprintf(w, "retrygate: arrivals: target %.2f/s, achieved %.2f/s (the seeded schedule: %.2f/s), %d jobs over %ss",
		a.Target, a.Achieved, a.Scheduled, a.Started, ledgerfile.FormatSeconds(a.Window))
	if clock == "real" {
		fmt.Fprintf(w, "; start lag mean %s, max %s", lagString(a.MeanLag), lagString(a.MaxLag))
	}
	fmt.Fprintln(w)
	if a.Behind() {
		fmt.Fprintf(w, "retrygate: warning: the client could not keep up: it started %.2f jobs/s of the %.2f/s scheduled; the figures understate the load asked for\n",
			a.Achieved, a.Scheduled)
	}
}

func lagString(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// rampTable is, per step of a ramp, the one summary (ledgerfile/summary)
// of the jobs that arrived in it: the row where the wait cap starts
// cutting is the load the seat no longer serves within budget.max_wait.
// A job is in the step its first row's ts falls in, every row of it.
type rampTable struct {
	start time.Time
	ramp  []rehearse.Step
	step  map[string]int // job → its step
	sums  []*summary.Summarizer
	file  string
}

func newRampTable(start time.Time, ramp []rehearse.Step, opts summary.Options, file string) *rampTable {
	t := &rampTable{start: start, ramp: ramp, step: map[string]int{}, file: file}
	for range ramp {
		t.sums = append(t.sums, summary.New(opts))
	}
	return t
}

// add counts a row (the sink's; it is not kept).
func (t *rampTable) add(r *ledgerfile.Row) {
	i, ok := t.step[r.Job]
	if !ok {
		off := r.TS.Sub(t.start)
		for i = 0; i < len(t.ramp)-1 && off >= t.ramp[i].For; i++ {
			off -= t.ramp[i].For
		}
		if r.Job != "" {
			t.step[r.Job] = i
		}
	}
	t.sums[i].Add(r, t.file)
}

func (t *rampTable) print(s *IOStreams) error {
	header := []string{"step", "rate_per_s", "jobs", "achieved_per_s", "succeeded", "failed", "unknown", "cancelled", "wait_p95_s", "wait_cap_cuts"}
	var rows [][]string
	for i, sum := range t.sums {
		x, st := sum.Close(), t.ramp[i]
		all := x.All
		p95 := "-"
		if x.OK.Wait.Len() > 0 {
			p95 = strconv.FormatFloat(x.OK.Wait.Percentile(95), 'f', 3, 64)
		}
		i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
		rows = append(rows, []string{
			strconv.Itoa(i + 1), strconv.FormatFloat(st.Rate, 'g', -1, 64), i64(all.Jobs),
			strconv.FormatFloat(float64(all.Jobs)/st.For.Seconds(), 'f', 2, 64),
			i64(all.Succeeded), i64(all.Failed), i64(all.Unknown), i64(all.Cancelled),
			p95, i64(all.Outcomes[string(admit.WaitCap)]),
		})
	}
	fmt.Fprintln(s.Out)
	return printTable(s, header, rows)
}
