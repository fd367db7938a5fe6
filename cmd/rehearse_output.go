package cmd

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"retrygate/ledgerfile"
	"retrygate/ledgerfile/summary"
	"retrygate/rehearse"
)

// rehearseJSON is the --json shape.
type rehearseJSON struct {
	Run         string     `json:"run"`
	Seed        uint64     `json:"seed"`
	Clock       string     `json:"clock"`
	Log         string     `json:"log"`
	Demo        bool       `json:"demo,omitempty"`
	Interrupted bool       `json:"interrupted,omitempty"`
	Jobs        jobsJSON   `json:"jobs"`
	Seats       []seatJSON `json:"seats"`
}

type jobsJSON struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
	Cancelled int `json:"cancelled"`
	// The figures check computes over the log, from the same summary.
	DeadlineMisses     int64          `json:"deadline_misses"`
	DeadlineMissRate   summary.Figure `json:"deadline_miss_rate"`
	UnknownRate        summary.Figure `json:"unknown_rate"`
	RefusedRate        summary.Figure `json:"refused_rate"`
	AttemptsPerSuccess summary.Figure `json:"attempts_per_success"`
}

// seatJSON is one line of the seats table.
type seatJSON struct {
	Seat       string           `json:"seat"`
	Attempts   int64            `json:"attempts"`
	Successes  int64            `json:"successes"`
	WaitP50    summary.Figure   `json:"wait_p50_s"`
	WaitP95    summary.Figure   `json:"wait_p95_s"`
	ElapsedP50 summary.Figure   `json:"elapsed_p50_s"`
	ElapsedP95 summary.Figure   `json:"elapsed_p95_s"`
	Tokens     int64            `json:"tokens"`
	Refusals   map[string]int64 `json:"refusals"`
}

func seatsOf(s *summary.Summary) []seatJSON {
	out := make([]seatJSON, 0, len(s.Groups))
	for _, g := range s.Groups {
		out = append(out, seatJSON{
			Seat: g.Key, Attempts: g.Attempts, Successes: g.Outcomes["ok"],
			WaitP50: g.Wait.P50, WaitP95: g.Wait.P95, ElapsedP50: g.Elapsed.P50, ElapsedP95: g.Elapsed.P95,
			Tokens: g.TokensTotal, Refusals: g.Refusals,
		})
	}
	return out
}

func jobsOf(s *summary.Summary) jobsJSON {
	all := s.All
	return jobsJSON{
		Total: int(all.Jobs), Succeeded: int(all.Succeeded), Failed: int(all.Failed), Unknown: int(all.Unknown), Cancelled: int(all.Cancelled),
		DeadlineMisses: s.Jobs.DeadlineMisses, DeadlineMissRate: s.Jobs.DeadlineMissRate, UnknownRate: all.UnknownRate,
		RefusedRate: s.RefusedRate, AttemptsPerSuccess: all.AttemptsPerSuccess,
	}
}

func (o *RehearseOptions) printSummary(s *summary.Summary, out *attemptPrinter, run int, seed uint64, clock string, res rehearse.Result) error {
	seats, ends := seatsOf(s), jobsOf(s)
	if o.JSON {
		return printJSON(o.IO.Out, rehearseJSON{
			Run: "r" + strconv.Itoa(run), Seed: seed, Clock: clock, Log: logDisplay(o.LogPath), Demo: o.Demo,
			Interrupted: res.Interrupted, Jobs: ends, Seats: seats,
		})
	}
	if out.table {
		if err := printTable(o.IO, attemptHeader, out.rows); err != nil {
			return err
		}
	}
	if out.lines || out.table {
		fmt.Fprintln(o.IO.Out)
	}
	header := []string{"seat", "attempts", "successes", "wait_p50_s", "wait_p95_s", "elapsed_p50_s", "elapsed_p95_s", "tokens", "refusals"}
	var rows [][]string
	for _, s := range seats {
		rows = append(rows, []string{
			s.Seat, strconv.FormatInt(s.Attempts, 10), strconv.FormatInt(s.Successes, 10),
			secs(s.WaitP50), secs(s.WaitP95), secs(s.ElapsedP50), secs(s.ElapsedP95),
			strconv.FormatInt(s.Tokens, 10), refusals(s.Refusals),
		})
	}
	if err := printTable(o.IO, header, rows); err != nil {
		return err
	}
	fmt.Fprintln(o.IO.Out)
	if err := printTable(o.IO, []string{"jobs", "succeeded", "failed", "unknown", "cancelled", "deadline_misses"}, [][]string{{
		strconv.Itoa(ends.Total), strconv.Itoa(ends.Succeeded), strconv.Itoa(ends.Failed),
		strconv.Itoa(ends.Unknown), strconv.Itoa(ends.Cancelled), strconv.FormatInt(ends.DeadlineMisses, 10),
	}}); err != nil {
		return err
	}
	if ends.Unknown > 0 {
		fmt.Fprintln(o.IO.ErrOut, "retrygate: hint: unknown jobs timed out or were cut off: the seat may have finished (and billed) them; reconcile before retrying")
	}
	return nil
}

// secs writes seconds as the log does; "-" when there is no value.
func secs(v summary.Figure) string {
	if !finite(float64(v)) {
		return "-"
	}
	return ledgerfile.FormatSeconds(time.Duration(float64(v) * float64(time.Second)))
}

func refusals(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
