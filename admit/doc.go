// Package admit holds retrygate's pure decisions: the four-number gate,
// failure classes, retry rules and backoff, the circuit breaker, and the
// arithmetic CI gates on. Nothing here reads a clock, a file or the network.
package admit
