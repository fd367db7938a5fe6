package rehearse

import (
	"runtime/debug"
	"strconv"
	"sync/atomic"
)

// RealGCPercent is the collector's GOGC while retrygate makes real calls
// (`rehearse` on the real clock, `proxy`) and GOGC is not set. Every
// attempt or proxied request leaves garbage many times a row's size
// (buffers, headers, the stream's reader) and keeps almost none of it,
// and the live heap is a few MiB: at Go's default of 100 the collector
// ran every few hundred attempts, a tenth or more of the CPU and a pause
// that can land in a timed window. At 400 it runs a quarter as often,
// for some MiB more heap (docs/seats.md, docs/proxy.md).
const RealGCPercent = 400

// gcSet is the GOGC RealTimeGC set, plus one (0: it set none).
var gcSet atomic.Int64

// RealTimeGC sets RealGCPercent unless getenv("GOGC") is set, and
// returns what puts the previous setting back.
func RealTimeGC(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(RealGCPercent)
	gcSet.Store(RealGCPercent + 1)
	return func() {
		debug.SetGCPercent(old)
		gcSet.Store(int64(old) + 1)
	}
}

// GCPercent is the collector's GOGC in this process, without reading
// runtime/metrics (whose package costs every command start-up time):
// what RealTimeGC set, or else GOGC as the runtime reads it (off: -1;
// unset or not a number: 100).
func GCPercent(getenv func(string) string) int {
	if n := gcSet.Load(); n != 0 {
		return int(n - 1)
	}
	switch v := getenv("GOGC"); v {
	case "off":
		return -1
	default:
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return 100
}
