package cmd

import (
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
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
		if err := printTable(o.IO, attemptHeader, out.rows, attemptNarrow...); err != nil {
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
	if err := printTable(o.IO, header, rows, "wait_p50_s", "elapsed_p50_s", "tokens"); err != nil {
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
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// newAttemptPrinter decides how a run shows its attempts as they happen.
// Progress goes to stderr only when stderr is a terminal, and the bar is
// drawn only when nothing else can reach that terminal while it moves:
// stdout is the terminal itself (rows are not printed during a real-time
// run then), a regular file, or --json (printed after the bar ends). With
// stdout a pipe (rehearse | tee run.txt), the rows may come back to the
// same terminal through tee, so there is no bar: the rows are the progress.
func newAttemptPrinter(io *IOStreams, jsonOut, virtual bool, jobs int) *attemptPrinter {
	p := &attemptPrinter{io: io, lines: !jsonOut && !io.OutTTY, jobs: jobs}
	// A virtual run is over at once: on a terminal, show its attempts as a
	// table instead of a progress bar nobody would see move.
	p.table = !jsonOut && io.OutTTY && virtual
	if !virtual && io.ErrTTY && (jsonOut || io.OutTTY || isRegularFile(io.Out)) {
		total := jobs
		if total == 0 {
			total = -1 // a run bounded by time: a spinner
		}
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(io.ErrOut),
			progressbar.OptionSetDescription("rehearsing"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			// The bar stays at 100% when every job ran, on its own line.
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(io.ErrOut) }),
		)
		p.stopTick = make(chan struct{})
		p.ticked = make(chan struct{})
		go p.tick()
	}
	return p
}

// tick redraws the bar now and then: a throttled draw would otherwise
// wait for the next attempt, which may be many seconds away.
func (p *attemptPrinter) tick() {
	defer close(p.ticked)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stopTick:
			return
		case <-t.C:
			p.mu.Lock()
			if p.done < p.jobs {
				_ = p.bar.Add(0)
			}
			p.mu.Unlock()
		}
	}
}

func isRegularFile(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// seatTally counts, per seat, the attempts sent, those that never
// connected and those the seat refused as unauthorized (HTTP 401 or 403),
// for the warnings after a run (rehearse) or an attempt (time): a wrong
// port or a wrong key reads as a bad day in the rows. A run where nothing
// connected is still done (exit 0): a seat failing is data in the log, not
// a tool error, and the warning and its hint say where to look.
type seatTally struct {
	order []string
	seats map[string]*seatCount
}

type seatCount struct {
	sent, conn, auth int64
	statuses         []int // the 401 and 403 seen, in order
}

func (t *seatTally) add(seatName string, o admit.Outcome, status int) {
	if t.seats == nil {
		t.seats = map[string]*seatCount{}
	}
	c := t.seats[seatName]
	if c == nil {
		c = &seatCount{}
		t.seats[seatName] = c
		t.order = append(t.order, seatName)
	}
	c.sent++
	switch {
	case o == admit.ConnError:
		c.conn++
	case status == 401 || status == 403:
		c.auth++
		if !slices.Contains(c.statuses, status) {
			c.statuses = append(c.statuses, status)
		}
	}
}

// addRow counts a sent row; a refusal was never sent.
func (t *seatTally) addRow(r *ledgerfile.Row) {
	if !r.Unsent {
		t.add(r.Seat, r.Outcome, r.HTTPStatus)
	}
}

// warn writes the warnings, naming each seat with its base URL and, for
// a refused key, the variable it came from.
func (t *seatTally) warn(w io.Writer, chain []seat.Config) {
	configs := map[string]seat.Config{}
	for _, sc := range chain {
		configs[sc.Name] = sc
	}
	where := func(name string) string {
		if u := safeURL(configs[name].BaseURL); u != "" {
			return "seat " + name + " (" + u + ")"
		}
		return "seat " + name
	}
	var sent, conn int64
	var down []string
	for _, name := range t.order {
		c := t.seats[name]
		sent, conn = sent+c.sent, conn+c.conn
		if c.sent > 0 && c.conn == c.sent {
			down = append(down, name)
		}
	}
	if sent > 0 && conn == sent {
		wheres := make([]string, len(down))
		for i, name := range down {
			wheres[i] = where(name)
		}
		fmt.Fprintf(w, "retrygate: warning: every attempt failed to connect (%d of %d, conn_error): %s\n", conn, sent, strings.Join(wheres, ", "))
		fmt.Fprintf(w, "retrygate: hint: is the server up, and is the port right? the log's notes say what the connection got\n")
		return
	}
	for _, name := range down {
		c := t.seats[name]
		fmt.Fprintf(w, "retrygate: warning: %s: every attempt failed to connect (%d of %d, conn_error); the other seats answered\n",
			where(name), c.sent, c.sent)
	}
	for _, name := range t.order {
		c := t.seats[name]
		if c.sent == 0 || c.auth != c.sent {
			continue
		}
		codes := make([]string, len(c.statuses))
		for i, st := range c.statuses {
			codes[i] = strconv.Itoa(st)
		}
		fmt.Fprintf(w, "retrygate: warning: %s: every attempt was refused as unauthorized (HTTP %s, %d of %d, client_error)\n",
			where(name), strings.Join(codes, " and "), c.auth, c.sent)
		if env := configs[name].APIKeyEnv; env != "" {
			fmt.Fprintf(w, "retrygate: hint: is $%s the key for this endpoint, with access to model %s? (seats.%s.api_key_env)\n", env, orDash(configs[name].Model), name)
		} else {
			fmt.Fprintf(w, "retrygate: hint: seat %s sends no key: name the variable that holds it with seats.%s.api_key_env\n", name, name)
		}
	}
}

// safeURL is a base URL fit to print: scheme, host and path, never the
// query (an api-version may sit beside a key) nor credentials.
func safeURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
