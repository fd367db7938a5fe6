package proxy

import (
	"runtime"
	"runtime/debug"
)

// SidecarProcs runs the proxy on half the CPUs Go would use (at least
// one) unless getenv("GOMAXPROCS") is set, and returns what puts Go's
// default back.
//
// The proxy runs beside the application it fronts, on the same machine,
// as a sidecar does (Istio's and Consul's Envoy sidecars default to one
// or two worker threads, not one a core). Its requests wait on the
// network, not on a CPU: one P forwards about 10,000 short requests a
// second. With a P a core it contends with its own application for the
// cores: on the 2-core machine of docs/proxy.md one P cut the proxy's
// CPU a request by about a tenth and its added p50 at concurrency 64
// by about 0.2 ms.
func SidecarProcs(getenv func(string) string) (restore func()) {
	if getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)/2))
	return runtime.SetDefaultGOMAXPROCS
}

// otherMemory is what a proxy's soft memory limit allows beside its
// request bodies: connections' buffers, goroutines, rows, answers on
// their way through.
const otherMemory = 64 << 20

// MemoryLimit sets the collector's soft memory limit for a proxy whose
// request bodies may hold bodies bytes at once (Options.MaxBodyTotal),
// unless getenv("GOMEMLIMIT") is set, and returns what puts the old
// limit back. The limit is twice the bodies (a body the proxy rewrites
// is held twice for its attempt) plus otherMemory. Without it the
// collector's GOGC=400 (rehearse.RealTimeGC) lets the heap grow to five
// times what is live before it runs: bodies that are done with would
// pile up to five times the budget, past the address space of a
// process under `ulimit -v` (docs/proxy.md).
func MemoryLimit(getenv func(string) string, bodies int64) (restore func()) {
	if getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	old := debug.SetMemoryLimit(2*bodies + otherMemory)
	return func() { debug.SetMemoryLimit(old) }
}
