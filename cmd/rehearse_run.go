// A rehearsal's run: the chain of seats built from the options, the run
// numbered in its log with its # policy line, the loop driven, the rows
// written and summed.

package cmd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// buildChain turns the chain's configs into seats (openSeat), in
// o.Chain's order; a chain of script seats alone runs on the virtual clock.
func (o *RehearseOptions) buildChain() (specs []rehearse.SeatSpec, virtual bool, err error) {
	virtual = true
	for i := range o.Chain {
		spec, err := openSeat(&o.Chain[i], seat.Options{Getenv: o.Getenv, Now: o.Now}, o.Places)
		if err != nil {
			return nil, false, err
		}
		virtual = virtual && spec.Seat == nil
		specs = append(specs, spec)
	}
	return specs, virtual, nil
}

// openSeat makes a seat's config runnable, for rehearse and time: a script
// seat becomes a planner (played on the virtual clock, or in real time by
// the loop), and takes its script's model when it names none, in *sc too;
// any other seat a live one. An error names the key where it was written.
func openSeat(sc *seat.Config, opts seat.Options, places keyPlaces) (rehearse.SeatSpec, error) {
	if sc.Kind != "script" {
		s, err := seat.NewWithOptions(*sc, opts)
		if err != nil {
			return rehearse.SeatSpec{}, places.located(err)
		}
		return rehearse.SeatSpec{Config: *sc, Seat: s}, nil
	}
	s, err := script.Open(sc.Script)
	if err != nil {
		return rehearse.SeatSpec{}, badInput("seats.%s.script: %v", sc.Name, err)
	}
	if sc.Model == "" {
		sc.Model = s.Model()
	}
	return rehearse.SeatSpec{Config: *sc, Planner: s}, nil
}

func runRehearse(o *RehearseOptions) error {
	specs, virtual, err := o.buildChain()
	if err != nil {
		return err
	}
	seed := o.Seed
	if !o.SeedSet {
		seed = 1
		if !virtual {
			seed = rand.Uint64() // parallel live rehearsals must not jitter in lockstep
		}
	}
	if o.Demo {
		fmt.Fprintln(o.IO.ErrOut, "retrygate: built-in demo: the free-seat demo on a script seat, virtual clock, no key, no network; "+
			"your own seat goes in retrygate.yaml")
	}
	clock := "real"
	if virtual {
		clock = "virtual"
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Config.Name
	}

	w, err := openRunLog(o.Ctx, o.IO.ErrOut, o.LogPath)
	if err != nil {
		return err
	}
	defer w.Close()
	desc := fmt.Sprintf("seed=%d jobs=%d concurrency=%d seats=%s clock=%s", seed, o.Jobs, o.Concurrency, strings.Join(names, ","), clock) + o.Load.describe()
	if o.Holdout {
		desc += " holdout=true"
	}
	run, err := w.reserve(desc)
	if err != nil {
		return badInputErr(err)
	}
	if err := w.comment(rehearse.PolicyLine(run, o.Policy, o.Chain, o.RouteSeats, o.Thresholds)); err != nil {
		return badInputErr(err)
	}
	fmt.Fprintf(o.IO.ErrOut, "retrygate: run r%d, seed %d, %s clock, appending to %s\n", run, seed, clock, logDisplay(o.LogPath))

	ctx, stop := context.WithCancel(o.Ctx)
	defer stop()
	out := newAttemptPrinter(o.IO, o.JSON, virtual, o.Jobs)
	defer out.finish(true) // on an early return; the run's own finish comes first
	// The end-of-run tables are the one summary's, over this run's rows,
	// seats in chain order.
	sumOpts := summary.Options{By: summary.BySeat, SlowAfter: o.Policy.Retry.SlowServerAfter,
		Deadline: o.Policy.Budget.Deadline, Groups: names, KeepOrder: true, Live: true}
	sum := summary.New(sumOpts)
	var writeErr error
	var ramp *rampTable
	var tally seatTally
	start := o.Now()
	if len(o.Load.Ramp) > 0 {
		ramp = newRampTable(start, o.Load.Ramp, sumOpts, o.LogPath)
	}
	sink := func(r *ledgerfile.Row) {
		if writeErr != nil {
			return
		}
		if err := w.append(r); err != nil {
			writeErr = err
			stop() // no log, no rehearsal: stop sending
			return
		}
		sum.Add(r, o.LogPath)
		tally.addRow(r)
		if ramp != nil {
			ramp.add(r)
		}
		out.row(r)
	}
	events := func(e *ledgerfile.Event) {
		if writeErr != nil {
			return
		}
		if err := w.event(e); err != nil {
			writeErr = err
			stop()
		}
	}
	loop, err := rehearse.New(rehearse.Config{
		Policy: o.Policy, Seats: specs, Rand: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		Sink: sink, Events: events, Run: run, Jobs: o.Load.idWidthJobs(o.Jobs), Prompt: o.Prompt, MaxTokens: o.MaxTokens, Holdout: o.Holdout,
		Prompts: o.Prompts, PromptOrder: o.PromptOrder, PromptSeed: seed,
	})
	if err != nil {
		return badInputErr(err)
	}
	var res rehearse.Result
	if virtual {
		res, err = loop.RunVirtual(rehearse.VirtualOptions{Jobs: o.Jobs, Concurrency: o.Concurrency, Start: start, Ctx: ctx,
			Rate: o.Load.Rate, Ramp: o.Load.Ramp, Duration: o.Load.Duration})
	} else {
		if ramp != nil {
			ramp.start = time.Now() // the wall clock the arrivals are scheduled on
		}
		defer rehearse.RealTimeGC(o.Getenv)()
		res, err = loop.RunReal(ctx, rehearse.RealOptions{Jobs: o.Jobs, Concurrency: o.Concurrency, OnSoft: func(job, seatName string, el time.Duration) { out.soft(job, seatName, el, o.Policy.Timeouts.Soft) },
			Rate: o.Load.Rate, Ramp: o.Load.Ramp, Duration: o.Load.Duration})
	}
	if ferr := w.flush(); ferr != nil && writeErr == nil {
		writeErr = ferr
	}
	out.finish(res.Interrupted || err != nil)
	if err != nil {
		return err
	}
	if writeErr != nil {
		return writeErr
	}
	s := sum.Close()
	if err := o.printSummary(s, out, run, seed, clock, res); err != nil {
		return err
	}
	if ramp != nil && !o.JSON {
		if err := ramp.print(o.IO); err != nil {
			return err
		}
	}
	if o.Load.open() {
		printArrivals(o.IO.ErrOut, res.Arrivals, clock)
	}
	if res.Interrupted {
		if o.Jobs == 0 {
			return &exitError{Code: ExitRefuse, Err: fmt.Errorf("interrupted: %d jobs finished before the time was up; every row so far is in %s", res.Ends.Total(), logDisplay(o.LogPath))}
		}
		return &exitError{Code: ExitRefuse, Err: fmt.Errorf("interrupted: %d of %d jobs finished; every row so far is in %s", res.Ends.Total(), o.Jobs, logDisplay(o.LogPath))}
	}
	tally.warn(o.IO.ErrOut, o.Chain)
	return nil
}
