package cmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkStartup runs the commands a shell retry loop calls many times a
// second as whole processes, beside a hello-world Go binary built the same
// way, and reports each one's wall and CPU time per run and its ratio to
// hello-world (issue 11's goal is 1.5×; docs/dev/speed.md says what stands
// between).
//
//	go test ./cmd -run '^$' -bench Startup -benchtime 200x
func BenchmarkStartup(b *testing.B) {
	bin := realBinary(b)
	dir := b.TempDir()
	hello := buildHello(b, dir)
	log := filepath.Join(dir, "rehearsal.log")
	state := filepath.Join(dir, "claims.json")
	cases := []struct {
		name  string
		args  []string
		reset func()
	}{
		{"version", []string{"--version"}, nil},
		{"admit", []string{"admit", "--deadline", "45s", "--token-ceiling", "8000", "--max-attempts", "2", "--max-wait", "5s",
			"--spent", "7.2", "--spent-tokens", "2100", "--used", "1", "--next-wait", "1.2", "--next-elapsed", "7.2", "--next-tokens", "2100"}, nil},
		{"record", []string{"record", "--job", "j", "--seat", "s", "--wait", "0.5", "--elapsed", "1.5", "--tokens", "10", "--log", log},
			func() { os.Remove(log) }},
		{"claim", []string{"claim", "--job", "j", "--deadline", "45s", "--state", state},
			func() { os.Remove(state) }},
	}
	base := runMany(b, hello, nil, nil, 100)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := runMany(b, bin, c.args, c.reset, b.N)
			b.ReportMetric(float64(r.wall.Microseconds())/1000, "wall-ms/run")
			b.ReportMetric(float64(r.cpu.Microseconds())/1000, "cpu-ms/run")
			b.ReportMetric(float64(r.wall)/float64(base.wall), "x-hello-wall")
			b.ReportMetric(float64(r.cpu)/float64(base.cpu), "x-hello-cpu")
		})
	}
}

type perRun struct{ wall, cpu time.Duration }

// runMany runs bin n times in the benchmark's directory and returns the mean
// wall and user+system CPU time per run.
func runMany(b *testing.B, bin string, args []string, reset func(), n int) (r perRun) {
	b.Helper()
	b.ResetTimer()
	for i := 0; i < n; i++ {
		if reset != nil {
			b.StopTimer()
			reset()
			b.StartTimer()
		}
		c := exec.Command(bin, args...)
		start := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", bin, args, err, out)
		}
		r.wall += time.Since(start)
		r.cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	r.wall /= time.Duration(n)
	r.cpu /= time.Duration(n)
	return r
}

// buildHello builds the floor every Go CLI stands on: a hello-world binary,
// static like retrygate's install build.
func buildHello(b *testing.B, dir string) string {
	b.Helper()
	src := filepath.Join(dir, "hello")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	files := map[string]string{
		"go.mod":  "module hello\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(" + strconv.Quote("hello") + ") }\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	out := filepath.Join(dir, "hello-bin")
	c := exec.Command("go", "build", "-o", out, ".")
	c.Dir = src
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if msg, err := c.CombinedOutput(); err != nil {
		b.Fatalf("building hello-world: %v\n%s", err, msg)
	}
	return out
}
