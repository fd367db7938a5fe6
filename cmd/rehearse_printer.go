// How a rehearsal prints its attempts: rows when piped, a table on a
// terminal, and a progress bar on stderr that never mixes with rows.

package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/retrygate/retrygate/ledgerfile"
)

var attemptHeader = []string{"seat", "job", "attempt", "wait_s", "elapsed_s", "tokens", "outcome", "decision", "job_end"}

// attemptNarrow is what a narrow terminal leaves out of the attempts,
// first to last: the decision, its reason and the times stay.
var attemptNarrow = []string{"tokens", "job_end", "seat"}

// attemptPrinter shows each attempt as it is written: a tab-separated
// line when stdout is piped, a table row on a terminal's virtual run, the
// progress bar's count and description in a real-time run on a terminal.
type attemptPrinter struct {
	io     *IOStreams
	lines  bool
	table  bool
	bar    *progressbar.ProgressBar
	mu     sync.Mutex
	header bool
	rows   [][]string

	jobs, done int           // jobs in the run, jobs ended
	finished   bool          // finish has run
	stopTick   chan struct{} // stops the bar's redraws
	ticked     chan struct{} // closed when they have stopped
}

// attemptCells is one attempt's line. An attempt never sent has no
// measurements: its wait, elapsed and tokens are the estimates the gate
// judged, which a terminal's table marks ~ (piped rows keep the log's
// plain numbers, and outcome says "not sent").
func attemptCells(r *ledgerfile.Row, table bool) []string {
	outcome, est := string(r.Outcome), ""
	if r.Unsent {
		outcome = "not sent"
		if table {
			est = "~"
		}
	}
	return []string{
		r.Seat, r.Job, strconv.Itoa(r.Attempt), est + ledgerfile.FormatSeconds(r.Wait), est + ledgerfile.FormatSeconds(r.Elapsed),
		est + strconv.FormatInt(r.Tokens, 10), outcome, r.Decision, orDash(r.JobEnd),
	}
}

func (p *attemptPrinter) row(r *ledgerfile.Row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.lines:
		if !p.header {
			fmt.Fprintln(p.io.Out, strings.Join(attemptHeader, "\t"))
			p.header = true
		}
		fmt.Fprintln(p.io.Out, strings.Join(attemptCells(r, false), "\t"))
	case p.table:
		p.rows = append(p.rows, attemptCells(r, true))
	}
	if r.JobEnd != "" {
		p.done++
	}
	if p.bar != nil {
		// Count first, then describe: each draw shows the jobs ended so
		// far. The last job's end draws the full bar, which stays.
		if p.done == p.jobs && r.JobEnd != "" {
			p.bar.Describe("rehearsed")
			_ = p.bar.Add(1)
			return
		}
		if r.JobEnd != "" {
			_ = p.bar.Add(1)
		}
		p.bar.Describe(fmt.Sprintf("%s attempt %d on %s: %s", r.Job, r.Attempt, r.Seat, lastWord(r)))
	}
}

func lastWord(r *ledgerfile.Row) string {
	if r.Unsent {
		return r.Decision
	}
	return string(r.Outcome) + " in " + ledgerfile.FormatSeconds(r.Elapsed) + "s"
}

// soft shows that an attempt passed timeouts.soft: in the bar's
// description when there is a bar, else as a note line on stderr, piped
// or not, as `time` writes it (only real-time runs call it).
func (p *attemptPrinter) soft(job, seatName string, el time.Duration, softAfter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	note := stillWaiting(job, seatName, el, softAfter)
	if p.bar != nil {
		p.bar.Describe(note)
		return
	}
	fmt.Fprintln(p.io.ErrOut, "retrygate: "+note)
}

// stillWaiting is the one "still waiting" note, for rehearse and time: an
// attempt passed the soft timeout and is not cut (the hard timeout cuts).
func stillWaiting(job, seatName string, elapsed, softAfter time.Duration) string {
	return fmt.Sprintf("%s on %s: still waiting after %ss (timeouts.soft %s)", job, seatName, ledgerfile.FormatSeconds(elapsed), softAfter)
}

// finish ends the bar: at 100% on its own line when every job ran (the
// last job's end drew it), erased when the run stopped short, since the
// error says how far it got.
func (p *attemptPrinter) finish(stopped bool) {
	if p.bar == nil || p.finished {
		return
	}
	p.finished = true
	close(p.stopTick)
	<-p.ticked
	p.mu.Lock()
	defer p.mu.Unlock()
	if stopped || p.done < p.jobs {
		_ = p.bar.Clear()
		_ = p.bar.Exit()
		return
	}
	_ = p.bar.Finish() // already full: draws nothing more
}
