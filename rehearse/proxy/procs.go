package proxy

import "runtime"

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
