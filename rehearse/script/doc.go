// Package script reads script seats: YAML files of deterministic steps
// that a rehearsal plays on the virtual clock, or `seat serve` over HTTP.
//
// A script is a seat.Planner: call n (0-based, counted across every job
// that uses the seat) gets step n's plan, with repeats expanded. The
// grammar, its limits and its errors are docs/seats.md's "Script seats".
package script
