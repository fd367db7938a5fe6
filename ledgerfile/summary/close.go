// Close: every figure computed once, from the accumulators.

package summary

import (
	"cmp"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/retrygate/retrygate/admit"
)

func (c *cacheAcc) figures(costRows int64) CacheFigures {
	f := CacheFigures{
		Retries: c.retries, Rewritten: c.rewritten, WriteRateOnRetries: ratio(float64(c.rewritten), float64(c.retries)),
		CachedTokens: c.cached, CachedShare: ratio(float64(c.cached), float64(c.cachedOf)),
		CacheWriteTokens: c.written,
		ReasoningTokens:  c.reasoning, ReasoningShare: ratio(float64(c.reasoning), float64(c.reasoningOf)),
		SavedUSD: Figure(math.NaN()), RetryTaxUncachedUSD: Figure(math.NaN()),
		cachedOf: c.cachedOf, reasoningOf: c.reasoningOf, saturated: c.saturated,
	}
	if c.savedRows > 0 {
		saved := new(big.Rat).Sub(c.savedUncached.Rat(), c.savedCost.Rat()) // negative when writes cost more than reads saved
		f.SavedUSD = Figure(ratFloat(saved))
	}
	if costRows > 0 {
		f.RetryTaxUncachedUSD = Figure(c.taxUncached.Float64())
	}
	return f
}

// Close finishes the jobs still open and computes every figure, once,
// after the last Add: every view (tables, JSON, thresholds, tune, the
// simulator's figures) reads the one result.
func (s *Summarizer) Close() *Summary {
	if s.done {
		panic("summary: Close called twice")
	}
	s.done = true
	// The last log's jobs end here (a job with no job_end row ends as its
	// writer would have ended it).
	s.EndLog()
	s.ids = nil
	jf := JobFigures{
		Jobs: s.jobs1, Time: s.jobTime.sorted(secExp), TimeToSuccess: s.jobTTS.sorted(secExp),
		Tokens: s.jobTokens.sorted(countExp), USD: s.jobUSD.sorted(0),
		AttemptsPerSuccess: s.jobAPS.sorted(countExp), EndToEnd: s.jobE2E.sorted(secExp),
		DeadlineMisses: s.misses, DeadlineMissRate: ratio(float64(s.misses), float64(s.jobs1)),
	}
	jf.AttemptsSE = stdErr(s.jobs1, s.sumAttempts, s.sqAttempts)
	jf.BilledSE = stdErr(s.jobs1, s.sumBilled, s.sqBilled)
	jf.USDSE = stdErr(s.jobs1, s.sumUSD, s.sqUSD)
	out := &Summary{By: s.opts.By, Rows: s.rows, Before: s.before, Jobs: jf,
		RefusedRows: s.refusedRows, RefusedRate: ratio(float64(s.refusedRows), float64(s.rows)), BudgetRefused: s.budgetRefused}
	if s.steps != nil {
		out.Steps = s.steps.close()
	}
	var wait, ttfb, elapsed, tokens, itl, gen []Sorted
	for _, g := range s.groups {
		out.Groups = append(out.Groups, g.finish())
		wait, ttfb = append(wait, g.sWait), append(ttfb, g.sTTFB)
		itl, gen = append(itl, g.sITL), append(gen, g.sGen)
		elapsed, tokens = append(elapsed, g.sElapsed), append(tokens, g.sTokens)
	}
	if !s.opts.KeepOrder {
		slices.SortFunc(out.Groups[s.listed:], func(a, b *Group) int { return strings.Compare(a.Key, b.Key) })
	}
	s.all.sWait, s.all.sTTFB = merge(wait...), merge(ttfb...)
	s.all.sElapsed, s.all.sTokens = merge(elapsed...), merge(tokens...)
	s.all.sITL, s.all.sGen = merge(itl...), merge(gen...)
	out.All = s.all.finish()
	all, n := out.All, float64(s.jobs1)
	jf = out.Jobs
	jf.AttemptsPerJob, jf.BilledPerJob = ratio(float64(all.Attempts), n), ratio(float64(all.Billed), n)
	jf.TokensPerJob, jf.WastedPerJob = ratio(float64(all.TokensTotal), n), ratio(float64(all.WastedCalls), n)
	jf.USDPerJob, jf.USDPerSuccess = Figure(math.NaN()), Figure(math.NaN())
	if all.RetryTax.CostRows > 0 {
		usd := s.all.usdAll.Rat()
		jf.USDPerJob = Figure(ratFloat(quo(usd, big.NewRat(s.jobs1, 1))))
		jf.USDPerSuccess = Figure(ratFloat(quo(usd, big.NewRat(all.Succeeded, 1))))
	}
	jf.TokensPerSuccess = ratio(float64(all.TokensTotal), float64(all.Succeeded))
	out.Jobs = jf
	for _, k := range s.wasteKeys {
		w := s.wasted[k]
		usd := Figure(w.usd.Float64())
		if !w.paid {
			usd = Figure(math.NaN()) // no row of it had a cost: unknown, not free
		}
		out.Wasted = append(out.Wasted, Wasted{Seat: k.seat, Outcome: string(admit.Outcomes[k.outcome]), Calls: w.calls, Tokens: w.tokens, USD: usd})
	}
	slices.SortStableFunc(out.Wasted, func(a, b Wasted) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), strings.Compare(a.Seat, b.Seat), strings.Compare(a.Outcome, b.Outcome))
	})
	out.OK = OKFigures{Elapsed: s.okElapsed.sorted(secExp), Wait: s.okWait.sorted(secExp),
		RateTokens: s.rateTokens, RateSeconds: s.rateSeconds.Float64(), RateRows: s.rateRows}
	out.Content.Wait = s.contentWait.sorted(secExp)
	out.Stream = StreamFigures{TPOT: newDist(s.tpot.sorted(tpotExp)), OutputTPS: newDist(s.outTPS.sorted(tpsExp)), ITL: newDist(s.itl.sorted(secExp))}
	for i := range s.asideWait {
		out.Content.Aside[i] = s.asideWait[i].sorted(secExp)
	}
	out.Breaker = s.brk.result(s.opts.Since)
	if s.draw != nil {
		out.Drawing = s.draw.close()
	}
	if s.good != nil {
		gp := s.good.close()
		out.Goodput = &gp
	}
	return out
}

// stdErr is the standard error of a mean over n values from their sum and
// sum of squares; 0 with fewer than two.
func stdErr(n int64, sum, sq float64) Figure {
	if n < 2 {
		return 0
	}
	k := float64(n)
	m := sum / k
	v := (sq - k*m*m) / (k - 1)
	return Figure(math.Sqrt(max(v, 0) / k))
}

func ratio(num, den float64) Figure {
	if den == 0 {
		return Figure(math.NaN())
	}
	return Figure(num / den)
}

func (a *groupAcc) finish() *Group {
	g := a.g
	if !a.merged {
		a.sWait, a.sTTFB, a.sElapsed, a.sTokens = a.wait.sorted(secExp), a.ttfb.sorted(secExp), a.elapsed.sorted(secExp), a.tokens.sorted(countExp)
		a.sITL, a.sGen = a.itl.sorted(secExp), a.gen.sorted(secExp)
	}
	g.Gen = newDist(a.sGen)
	g.Wait, g.TTFB, g.Elapsed, g.Tokens = newDist(a.sWait), newDist(a.sTTFB), newDist(a.sElapsed), newDist(a.sTokens)
	if a.sITL.Len() > 0 {
		itl := newDist(a.sITL)
		g.ITL = &itl
	}
	g.Outcomes = map[string]int64{}
	for i, n := range a.outcomes {
		if n > 0 {
			g.Outcomes[string(admit.Outcomes[i])] = n
		}
	}
	g.Refusals = a.refusals
	g.TokensTotal = a.tokensAll
	g.Saturated = a.saturated
	g.USDTotal = Figure(math.NaN())
	if a.costRows > 0 {
		g.USDTotal = Figure(a.usdAll.Float64())
	}
	switch {
	case g.Succeeded > 0:
		g.AttemptsPerSuccess = Figure(float64(g.Attempts) / float64(g.Succeeded))
	case g.Attempts > 0:
		g.AttemptsPerSuccess = Figure(math.Inf(1)) // attempts were made and none answered
	default:
		g.AttemptsPerSuccess = Figure(math.NaN())
	}
	g.SuccessRate = ratio(float64(g.Succeeded), float64(g.Jobs))
	g.FailedRate = ratio(float64(g.Failed), float64(g.Jobs))
	g.AttemptFailureRate = ratio(float64(g.FailedAttempts), float64(g.Attempts))
	g.RetryRatio = ratio(float64(g.Attempts), float64(g.Jobs))
	// The tax is the sum of what the attempts that did not produce their
	// job's kept answer cost, each as its row wrote it: never a total
	// less the kept part (a large total swallows a small tax), and never
	// negative. A token sum that saturated leaves its share unknown.
	g.RetryTax = Tax{
		Tokens:      a.taxTokens,
		TokensShare: ratio(float64(a.taxTokens), float64(a.tokensAll)),
		USD:         Figure(math.NaN()),
		USDShare:    Figure(math.NaN()),
		CostRows:    a.costRows,
	}
	if a.saturated {
		g.RetryTax.TokensShare = Figure(math.NaN())
	}
	if a.costRows > 0 {
		g.RetryTax.USD = Figure(a.taxUSD.Float64())
		g.RetryTax.USDShare = Figure(ratFloat(quo(a.taxUSD.Rat(), a.usdAll.Rat())))
	}
	g.BillableFailureRate = ratio(float64(g.BilledFailures), float64(g.FailedAttempts))
	g.UnknownRate = ratio(float64(g.Unknown), float64(g.Jobs))
	g.FallbackRate = ratio(float64(g.FallbackJobs), float64(g.Jobs))
	g.Cache = a.cache.figures(a.costRows)
	return &g
}
