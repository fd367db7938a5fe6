// Command genlog writes a rehearsal.log that looks like production LLM
// traffic, and vegeta's JSON results holding the same latencies, for
// bench/compare.sh (docs/dev/speed.md says what the log looks like).
//
//	go run ./bench/genlog -rows 1000000 -log rehearsal.log -results results.json
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
)

type seat struct {
	name, model     string
	inUSD, outUSD   float64 // per token
	speed           float64 // latency scale
	gen, genSpreads float64 // output tokens: lognormal median and sigma
}

var seats = []seat{
	{"openai", "gpt-4o-mini", 0.15e-6, 0.60e-6, 0.9, 300, 0.7},
	{"anthropic", "claude-3-5-haiku", 0.80e-6, 4e-6, 1.0, 350, 0.7},
	{"azure", "gpt-4o", 2.5e-6, 10e-6, 1.2, 450, 0.8},
}

func main() {
	rows := flag.Int("rows", 1_000_000, "rows to write")
	logPath := flag.String("log", "rehearsal.log", "the log to write")
	results := flag.String("results", "", "also write vegeta's JSON results, one per row, with the same latencies")
	seed := flag.Uint64("seed", 1, "the random seed")
	flag.Parse()
	if err := run(*rows, *logPath, *results, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "genlog:", err)
		os.Exit(1)
	}
}

func run(rows int, logPath, results string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// lognormal draws the median times e^(sigma·z); p99 is the median
	// times e^(2.326·sigma): elapsed's p50 2 s and p99 14 s give sigma 0.837.
	lognormal := func(median, sigma float64) float64 { return median * math.Exp(sigma*rng.NormFloat64()) }
	ms := func(s float64) time.Duration { return time.Duration(math.Round(s*1000)) * time.Millisecond }

	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(out, 1<<20)
	var res *bufio.Writer
	if results != "" {
		f, err := os.Create(results)
		if err != nil {
			return err
		}
		defer f.Close()
		res = bufio.NewWriterSize(f, 1<<20)
	}
	fmt.Fprintln(w, ledgerfile.Header)
	ts := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var line []byte
	for job, n := 0, 0; n < rows; job++ {
		s := seats[rng.IntN(len(seats))]
		prompt := int64(lognormal(1200, 0.9)) + 20
		var spent admit.Spent
		for attempt := 1; attempt <= 4 && n < rows; attempt++ {
			el := lognormal(2*s.speed, 0.837)
			wait := min(el, lognormal(0.5, 0.9)) // first token; independent of the answer's length
			r := ledgerfile.Row{
				TS: ts, Job: fmt.Sprintf("j%07d", job), Attempt: attempt, Seat: s.name, Model: s.model,
				TokensFrom: ledgerfile.FromUsage, Decision: "admit", Billing: admit.Billable, HTTPStatus: 200, Outcome: admit.OK,
				SpentS: spent.Time, SpentTokens: spent.Tokens, Used: spent.Attempts, HasSpent: true,
				HasTTFB: true, HasSplit: true, HasCost: true, Fallback: attempt > 1,
			}
			switch u := rng.Float64(); {
			case u < 0.05: // 503 Service Unavailable, at once
				el = lognormal(0.3, 0.6)
				wait = el
				r.Outcome, r.HTTPStatus, r.Billing = admit.ServerError, 503, admit.Free
			case u < 0.08: // 429 Too Many Requests, with a Retry-After
				el = lognormal(0.15, 0.5)
				wait = el
				r.Outcome, r.HTTPStatus, r.Billing = admit.RateLimited, 429, admit.Free
				r.RetryAfter, r.HasRetryAfter = time.Duration(1+rng.IntN(20))*time.Second, true
			case u < 0.09: // the hard timeout
				el, wait = 30, 30
				r.Outcome, r.HTTPStatus, r.Billing = admit.Timeout, 0, admit.Ambiguous
			case wait > 0.9: // the wait cap cuts a slow first token
				el = 0.9
				wait = el
				r.Outcome, r.Billing, r.Decision = admit.WaitCap, admit.Ambiguous, "refuse: queue wait"
			}
			r.Elapsed, r.Wait = ms(el), ms(wait)
			r.TTFB = ms(wait * (0.6 + 0.3*rng.Float64()))
			r.PromptTokens = prompt
			if r.Outcome == admit.OK {
				r.CompletionTokens = int64(lognormal(s.gen, s.genSpreads)) + 1
			}
			r.Tokens = r.PromptTokens + r.CompletionTokens
			r.CostUSD = float64(r.PromptTokens)*s.inUSD + float64(r.CompletionTokens)*s.outUSD
			if r.Billing == admit.Free {
				r.CostUSD = 0
			}
			last := r.Outcome == admit.OK || attempt == 4 || n == rows-1
			if last {
				r.JobEnd = ledgerfile.JobSucceeded
				if r.Outcome != admit.OK {
					r.JobEnd = ledgerfile.JobFailed
				}
			}
			line = ledgerfile.AppendRow(line[:0], &r)
			w.Write(line)
			if res != nil {
				fmt.Fprintf(res, `{"attack":"","seq":%d,"code":%d,"timestamp":%q,"latency":%d,"bytes_out":144,"bytes_in":1050,"error":"","body":null,"method":"POST","url":"http://127.0.0.1:6556/v1/chat/completions","headers":null}`+"\n",
					n, r.HTTPStatus, ts.Format(time.RFC3339Nano), r.Elapsed.Nanoseconds())
			}
			n++
			spent.Time += r.Elapsed
			spent.Tokens += r.Tokens
			spent.Attempts++
			ts = ts.Add(time.Duration(1+rng.IntN(20)) * time.Millisecond)
			if last {
				break
			}
		}
	}
	if res != nil {
		if err := res.Flush(); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Close()
}
