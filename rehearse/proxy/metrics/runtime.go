// The Go runtime's and the process's families, read at each scrape under
// the names, HELP texts and types client_golang's Go and process
// collectors gave them (testdata/runtime_families.golden).

package metrics

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/rehearse"
)

var summaryQuantiles = []float64{0, 0.25, 0.5, 0.75, 1}

// runtimeFamilies are the Go runtime's and the process's figures now.
func runtimeFamilies() []*family {
	var out []*family
	gauge := func(name, help string, v float64) {
		f := newFamily(gaugeKind, name, help, nil)
		f.with().set(v)
		out = append(out, f)
	}
	counter := func(name, help string, v float64) {
		f := newFamily(counterKind, name, help, nil)
		f.with().add(v)
		out = append(out, f)
	}

	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, len(summaryQuantiles))}
	debug.ReadGCStats(&gc)
	pauses := newFamily(summaryKind, "go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", nil)
	s := pauses.with()
	s.n, s.f = uint64(gc.NumGC), gc.PauseTotal.Seconds()
	for _, q := range gc.PauseQuantiles {
		s.quants = append(s.quants, q.Seconds())
	}
	out = append(out, pauses)
	gauge("go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.",
		float64(rehearse.GCPercent(os.Getenv)))
	gauge("go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.",
		float64(debug.SetMemoryLimit(-1)))
	gauge("go_goroutines", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))
	info := newFamily(gaugeKind, "go_info", "Information about the Go environment.", nil, "version")
	info.with(runtime.Version()).set(1)
	out = append(out, info)

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for _, g := range []struct {
		name, help string
		v          uint64
		counter    bool
	}{
		{"alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", ms.Alloc, false},
		{"alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", ms.TotalAlloc, true},
		{"buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", ms.BuckHashSys, false},
		{"frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", ms.Frees, true},
		{"gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", ms.GCSys, false},
		{"heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", ms.HeapAlloc, false},
		{"heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", ms.HeapIdle, false},
		{"heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", ms.HeapInuse, false},
		{"heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", ms.HeapObjects, false},
		{"heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", ms.HeapReleased, false},
		{"heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", ms.HeapSys, false},
		{"mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", ms.Mallocs, true},
		{"mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", ms.MCacheInuse, false},
		{"mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", ms.MCacheSys, false},
		{"mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", ms.MSpanInuse, false},
		{"mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", ms.MSpanSys, false},
		{"next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", ms.NextGC, false},
		{"other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", ms.OtherSys, false},
		{"stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", ms.StackInuse, false},
		{"stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", ms.StackSys, false},
		{"sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", ms.Sys, false},
	} {
		if g.counter {
			counter("go_memstats_"+g.name, g.help, float64(g.v))
		} else {
			gauge("go_memstats_"+g.name, g.help, float64(g.v))
		}
	}
	gauge("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", float64(ms.LastGC)/1e9)
	gauge("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.",
		float64(runtime.GOMAXPROCS(0)))
	threads, _ := runtime.ThreadCreateProfile(nil)
	gauge("go_threads", "Number of OS threads created.", float64(threads))

	p, ok := readProc()
	if !ok {
		return out // not Linux, or /proc unreadable: the process's figures are left out, as client_golang leaves them
	}
	counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", p.cpu)
	gauge("process_max_fds", "Maximum number of open file descriptors.", p.maxFDs)
	if p.hasNet {
		counter("process_network_receive_bytes_total", "Number of bytes received by the process over the network.", p.rx)
		counter("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.", p.tx)
	}
	gauge("process_open_fds", "Number of open file descriptors.", p.openFDs)
	gauge("process_resident_memory_bytes", "Resident memory size in bytes.", p.rss)
	gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", p.start)
	gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", p.vsize)
	gauge("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", p.maxVM)
	return out
}

// procStat is what /proc says of this process.
type procStat struct {
	cpu, maxFDs, openFDs, rss, start, vsize, maxVM float64
	rx, tx                                         float64
	hasNet                                         bool
}

// userHZ is the kernel's clock ticks a second in /proc/*/stat, as procfs
// assumes it.
const userHZ = 100

func readProc() (procStat, bool) {
	var p procStat
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return p, false
	}
	// Past the command's closing parenthesis: state is field 3.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return p, false
	}
	f := strings.Fields(string(stat[i+1:]))
	field := func(n int) float64 { // n: the field's number in proc(5)
		if n-3 >= len(f) {
			return 0
		}
		v, _ := strconv.ParseFloat(f[n-3], 64)
		return v
	}
	p.cpu = (field(14) + field(15)) / userHZ
	p.vsize = field(23)
	p.rss = field(24) * float64(os.Getpagesize())
	p.start = field(22)/userHZ + bootTime()
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		p.openFDs = float64(len(fds))
	}
	p.maxFDs, p.maxVM = limit("Max open files"), limit("Max address space")
	p.rx, p.tx, p.hasNet = netOctets()
	return p, true
}

// bootTime is btime of /proc/stat.
func bootTime() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
}

// limit is the soft limit of /proc/self/limits' row name ("unlimited":
// the largest uint64, as procfs reads it).
func limit(name string) float64 {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			if f[0] == "unlimited" {
				return float64(^uint64(0))
			}
			n, _ := strconv.ParseFloat(f[0], 64)
			return n
		}
	}
	return 0
}

// netOctets are IpExt's InOctets and OutOctets of /proc/self/net/netstat.
func netOctets() (rx, tx float64, ok bool) {
	b, err := os.ReadFile("/proc/self/net/netstat")
	if err != nil {
		return 0, 0, false
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		rest, found := strings.CutPrefix(line, "IpExt:")
		if !found {
			continue
		}
		if names == nil {
			names = strings.Fields(rest)
			continue
		}
		for i, v := range strings.Fields(rest) {
			if i >= len(names) {
				break
			}
			n, _ := strconv.ParseFloat(v, 64)
			switch names[i] {
			case "InOctets":
				rx = n
			case "OutOctets":
				tx = n
			}
		}
		return rx, tx, true
	}
	return 0, 0, false
}
