package model

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Log is a bootstrap model: each call replays one observed attempt drawn
// at random (with replacement) from a rehearsal.log.
type Log struct {
	Path  string
	Seat  string // "" for every seat's rows
	Plans []seat.Plan
}

// loadLog reads `FILE` or `FILE:SEAT`. A path that exists as written wins,
// so a file name with a colon in it still works.
func loadLog(arg string) (*Log, error) {
	if arg == "" {
		return nil, &Error{Msg: "log: needs a file (log:FILE or log:FILE:SEAT)"}
	}
	path, seatName := arg, ""
	if _, err := os.Stat(arg); err != nil {
		if i := strings.LastIndexByte(arg, ':'); i > 0 {
			path, seatName = arg[:i], arg[i+1:]
		}
	}
	if _, err := os.Stat(path); err != nil {
		if pe, ok := errors.AsType[*os.PathError](err); ok {
			err = pe.Err
		}
		return nil, &Error{Msg: fmt.Sprintf("log %q: %v", path, err), Err: err}
	}
	rows, _, err := ledgerfile.ReadFile(path)
	if err != nil {
		return nil, &Error{Msg: err.Error(), Err: err}
	}
	return FromRows(rows, path, seatName)
}

// FromRows builds a bootstrap model from rows already read (name is for
// messages). seatName picks one seat's rows; "" takes them all.
func FromRows(rows []ledgerfile.Row, name, seatName string) (*Log, error) {
	m := &Log{Path: name, Seat: seatName}
	var seats []string
	for i := range rows {
		r := &rows[i]
		if r.Seat != "" && !slices.Contains(seats, r.Seat) {
			seats = append(seats, r.Seat)
		}
		if seatName != "" && r.Seat != seatName {
			continue
		}
		if p, ok := planOfRow(r); ok {
			m.Plans = append(m.Plans, p)
		}
	}
	if len(m.Plans) == 0 {
		if seatName != "" {
			slices.Sort(seats)
			have := "none"
			if len(seats) > 0 {
				have = strings.Join(seats, ", ")
			}
			return nil, &Error{Msg: fmt.Sprintf("log %q: no sent attempts on seat %q (seats in the log: %s)", name, seatName, have)}
		}
		return nil, &Error{Msg: fmt.Sprintf("log %q: no sent attempts to replay", name)}
	}
	return m, nil
}

// planOfRow turns an observed attempt back into what the seat did, as far
// as the row tells. ok is false for rows that say nothing about the seat:
// refused before sending, or cancelled by the operator.
func planOfRow(r *ledgerfile.Row) (seat.Plan, bool) {
	if r.Unsent {
		return seat.Plan{}, false
	}
	prompt, completion := int64(0), r.Tokens
	if r.HasSplit {
		prompt, completion = r.PromptTokens, r.CompletionTokens
	}
	wait, elapsed := r.Wait, max(r.Elapsed, r.Wait)
	p := seat.Plan{PromptTokens: prompt}
	if r.HasTTFB && r.TTFB <= wait {
		p.TTFB = r.TTFB
	}
	switch r.Outcome {
	case admit.OK, "":
		if r.Outcome == "" && !r.Admitted() {
			return p, false // a hand-written refusal: never sent
		}
		p.Wait, p.Elapsed, p.CompletionTokens = wait, elapsed, completion
	case admit.Incomplete:
		// An answer that streamed to its end and ended short, for its reason.
		p.Wait, p.Elapsed, p.CompletionTokens = wait, elapsed, completion
		p.Incomplete = cmp.Or(r.ErrorCode, "max_output_tokens")
	case admit.ConnError:
		return seat.Plan{ConnError: true}, true
	case admit.RateLimited, admit.ServerError, admit.ClientError:
		def := map[admit.Outcome]int{admit.RateLimited: 429, admit.ServerError: 503, admit.ClientError: 400}[r.Outcome]
		p.Status, p.ErrorCode = cmp.Or(r.HTTPStatus, def), r.ErrorCode
		if p.Status == 200 && p.ErrorCode == "" {
			p.Status = def // a row that contradicts itself: trust the outcome
		}
		p.Wait, p.Elapsed, p.TTFB = elapsed, elapsed, 0
		p.RetryAfter, p.HasRetryAfter = r.RetryAfter, r.HasRetryAfter
		p.PromptTokens = 0
	case admit.Timeout, admit.WaitCap:
		// Censored: the log says only that the answer took longer than the
		// limit in force, so it plays as a call that never returns.
		p.Hang = true
		p.Wait, p.TTFB = script.Never, script.Never
		if r.Outcome == admit.Timeout && wait > 0 && wait < r.Elapsed {
			p.Wait = wait // content had started streaming
			if r.HasTTFB && r.TTFB <= wait {
				p.TTFB = r.TTFB
			} else {
				p.TTFB = wait
			}
		}
	case admit.Reset:
		// Replayed as a reset halfway through a stream twice as long, so
		// the partial completion comes out as observed.
		reset := max(elapsed, time.Millisecond)
		p.Wait = min(wait, reset)
		p.ResetAfter = reset
		p.Elapsed = 2*reset - p.Wait
		p.CompletionTokens = 2 * completion
	default: // cancelled, or an outcome this version does not know
		return p, false
	}
	return p, true
}

// Planner draws, for call n on a seat, one of the log's attempts.
func (m *Log) Planner(seed uint64, seatIndex int) seat.Planner {
	return &logPlanner{plans: m.Plans, s: newStream(seed, seatIndex)}
}

func (m *Log) String() string {
	if m.Seat == "" {
		return "log:" + m.Path
	}
	return "log:" + m.Path + ":" + m.Seat
}

type logPlanner struct {
	plans []seat.Plan
	s     stream
}

func (p *logPlanner) PlanFor(n int) seat.Plan {
	r := p.s.at(n)
	i, _ := bits.Mul64(r.Uint64(), uint64(len(p.plans))) // Lemire: unbiased enough for any real log
	return p.plans[i]
}
