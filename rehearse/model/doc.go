// Package model holds the latency models `retrygate simulate` plays its
// seats with: what a provider does on each call, as a seat.Planner.
//
// A model is written as one string (the --model flag). Three forms:
//
//	lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100
//	fixed elapsed=2s 5xx=5%
//	log:FILE[:SEAT]
//	script:FILE
//
// # Parametric models
//
// A parametric model is a kind followed by key=value terms separated by
// spaces, in any order, each at most once. Durations take Go syntax (2.1s,
// 1500ms) or bare seconds; shares take a percentage (0.3%) or a fraction
// (0.003).
//
// Kinds:
//
//	lognormal   elapsed (submit → last byte) of an answered call is
//	            lognormal through p50 and one tail quantile: p90, p95,
//	            p99 or p999 (exactly one). Seed 002's shape is
//	            p50=2.1s p99=14s hang=0.3%.
//	fixed       every answered call takes elapsed=D.
//
// Timing and size of an answered call:
//
//	p50= p90= p95= p99= p999=   the lognormal's quantiles (lognormal only)
//	elapsed=D     the constant elapsed (fixed only)
//	ttft=D|P%     first content (wait): a duration is the median, scaled by
//	              the same draw as elapsed (a slow call is slow throughout)
//	              and never past it; a share is that part of elapsed.
//	              Default 25%.
//	tokens=N      prompt + completion tokens of an answer (default 0)
//	prompt=N      how many of them are prompt tokens (default 0)
//	rate=R        completion tokens per second of streaming: completion =
//	              R·(elapsed − wait), so the slow calls are the long,
//	              expensive ones (seed 001). Instead of tokens.
//
// Failures, each a share of calls; they exclude each other and add up to
// at most 100%; the rest are answered:
//
//	hang=P        never returns: no headers, no content (seed 002's 0.3%)
//	conn=P        connection refused (conn_error, free)
//	429=P         rate limited, answered after fast=
//	5xx=P         a fast 503, answered after fast= (free)
//	slow5xx=P     a 500 after slow= (ambiguous once past the policy's
//	              retry.slow_5xx_after)
//	4xx=P         a 400: a permanent error, never retried
//	reset=P       the connection drops halfway through the stream (billable
//	              for the partial)
//
// Failure details:
//
//	retry_after=D the Retry-After a 429 carries (default: none)
//	fast=D        how long a 429, fast 5xx or 4xx takes (default 200ms)
//	slow=D        how long a slow 5xx takes (default 30s)
//
// Load:
//
//	slots=N       the seat serves N calls at once at full speed; a call
//	              answered while more than N are in flight (itself
//	              included) takes its share of the seat: its wait and
//	              elapsed stretch by busy/N, fixed when it is sent. Past
//	              the slots, latency rises with load, timeouts fire, and
//	              retries add load: a retry storm. Fast failures, refused
//	              connections and hangs are not slowed. Only the virtual
//	              clock plays it (the real-time seat is `seat serve --slots`).
//
// Timeouts and wait-cap breaches are not in the model: they happen when
// the policy's hard timeout or wait cap cuts a slow call or a hang, as in
// a real rehearsal.
//
// # Observed and scripted models
//
// log:FILE[:SEAT] bootstraps from a rehearsal.log: every call replays one
// attempt drawn at random from the log's sent attempts (of SEAT only, when
// given), with its wait, elapsed, tokens, outcome and Retry-After. A row
// that timed out or hit the wait cap plays as a hang, since the log says
// only that it took longer than the limit then in force; cancelled rows
// are left out.
//
// script:FILE plays a script seat's steps (rehearse/script) in order,
// exactly as `retrygate rehearse` does.
//
// Every model is deterministic: for a seed, the n-th call on a seat is
// always the same, and a Planner is random-access in n without allocating.
package model
