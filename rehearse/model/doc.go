// Package model holds the latency models `retrygate simulate` plays its
// seats with: what a provider does on each call, as a seat.Planner.
//
// A model is one string (the --model flag): a parametric `lognormal …` or
// `fixed …`, `log:FILE[:SEAT]` or `script:FILE`; docs/simulate.md's
// "Models" has the grammar. Every model is deterministic: for a seed, the
// n-th call on a seat is always the same, and a Planner is random-access
// in n without allocating.
package model
