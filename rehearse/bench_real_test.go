package rehearse

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

// benchServeEnv makes this test binary, started again by
// BenchmarkRealLoop64, serve an instant seat instead of running tests.
const benchServeEnv = "RETRYGATE_BENCH_SEAT_SERVE"

// TestBenchSeatServer is the benchmark's seat server when run as a child
// (benchServeEnv set): `seat serve`'s server with a plan that answers at
// once, on 127.0.0.1, its address on stdout, until stdin closes. Run
// normally it does nothing.
func TestBenchSeatServer(t *testing.T) {
	if os.Getenv(benchServeEnv) != "1" {
		return
	}
	srv, err := seatserver.New(seatserver.Options{Format: seatserver.OpenAI,
		Planner: plans{{PromptTokens: 20, CompletionTokens: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the benchmark ends
		cancel()
	}()
	if err := srv.Serve(ctx, ln); err != nil {
		t.Fatal(err)
	}
}

// childSeat starts this test binary as an instant seat server in its own
// process, so the server's CPU is not counted as the client's.
func childSeat(b *testing.B) net.Addr {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchSeatServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), benchServeEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal("seat server child: ", err)
	}
	addr, err := net.ResolveTCPAddr("tcp", strings.TrimSpace(line))
	if err != nil || !addr.IP.IsLoopback() {
		b.Fatalf("seat server child printed %q", line)
	}
	return addr
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRealLoop64 is `rehearse --concurrency 64` against an instant
// `seat serve` on 127.0.0.1 (in a child process): the real-time driver,
// the openai seat over kept-alive connections, and every row appended to
// a log file through ledgerfile.Writer, batched as the command does. One op is one
// attempt. It reports the client's CPU per attempt (this process's user +
// system time, the server's excluded) beside allocations per attempt.
//
//	go test -run '^$' -bench RealLoop64 -benchmem ./rehearse/
func BenchmarkRealLoop64(b *testing.B) {
	addr := childSeat(b)
	cfg := seat.Config{Name: "served", Kind: "openai", BaseURL: seatserver.OpenAI.BaseURL(addr), Model: "gpt-4o-mini"}
	st, err := seat.New(cfg, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	w := ledgerfile.NewWriter(filepath.Join(b.TempDir(), "rehearsal.log"), false)
	w.Batch(64<<10, 100*time.Millisecond) // as cmd's rehearse writes
	defer w.Close()
	var werr error
	l, err := New(Config{
		Policy: DefaultPolicy(), Seats: []SeatSpec{{Config: cfg, Seat: st}}, Rand: seeded(1),
		Run: 1, Jobs: 1_000_000, Prompt: "Say hi.", MaxTokens: 256,
		Sink: func(r *ledgerfile.Row) {
			if err := w.AppendOne(r); err != nil && werr == nil {
				werr = err
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	// Warm the connections up, as a long run has.
	warm, err := l.RunReal(context.Background(), RealOptions{Jobs: 256, Concurrency: 64})
	if err != nil {
		b.Fatal(err)
	}
	before := warm.Ends.Succeeded // a loop's Ends count every run it made
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	res, err := l.RunReal(context.Background(), RealOptions{Jobs: b.N, Concurrency: 64})
	if err == nil {
		err = w.Flush()
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if err != nil || werr != nil {
		b.Fatal(err, werr)
	}
	if ok := res.Ends.Succeeded - before; ok != b.N {
		b.Fatalf("%d of %d jobs succeeded: %+v", ok, b.N, res.Ends)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/attempt")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attempts/s")
}
