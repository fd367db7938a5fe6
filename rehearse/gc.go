package rehearse

import "runtime/debug"

// RealGCPercent is the collector's GOGC while retrygate makes real calls
// (`rehearse` on the real clock, `proxy`) and GOGC is not set. Every
// attempt or proxied request leaves garbage many times a row's size
// (buffers, headers, the stream's reader) and keeps almost none of it,
// and the live heap is a few MiB: at Go's default of 100 the collector
// ran every few hundred attempts, a tenth or more of the CPU and a pause
// that can land in a timed window. At 400 it runs a quarter as often,
// for some MiB more heap (docs/seats.md, docs/proxy.md).
const RealGCPercent = 400

// RealTimeGC sets RealGCPercent unless getenv("GOGC") is set, and
// returns what puts the previous setting back.
func RealTimeGC(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(RealGCPercent)
	return func() { debug.SetGCPercent(old) }
}
