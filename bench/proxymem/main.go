// Command proxymem drives `retrygate proxy` under an address-space limit
// (`ulimit -v`) with many connections each sending a large body at once,
// and prints what they got, the proxy's peak RSS and address space, and
// whether it stayed up (docs/proxy.md, Limits):
//
//	CGO_ENABLED=0 go build -o /tmp/retrygate . && go run ./bench/proxymem -bin /tmp/retrygate
//
// The upstream is in this process, on 127.0.0.1; the proxy's log and
// config are in a temporary directory, removed at the end.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

var vmPeak int

func rss(pid int) (cur, hwm int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			cur = n
		case "VmSize":
			vmPeak = max(vmPeak, n)
		case "VmHWM":
			hwm = n
		}
	}
	return
}

func main() {
	bin := flag.String("bin", "retrygate", "retrygate binary")
	conns := flag.Int("c", 300, "connections")
	size := flag.Int("size", 8<<20, "body bytes")
	vlimit := flag.Int("ulimit-v", 2500000, "ulimit -v (KiB)")
	extra := flag.String("flags", "", "extra proxy flags")
	flag.Parse()

	// The upstream: reads the request, answers a chat completion after 200 ms.
	up, _ := net.Listen("tcp", "127.0.0.1:0")
	go http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(200 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	dir, _ := os.MkdirTemp("", "pl_drive")
	cfg := fmt.Sprintf("budget: {deadline: 60s, token_ceiling: 100000000, max_attempts: 2, max_wait: 30s}\ntimeouts: {soft: 0s, hard: 50s}\nseats:\n  up: {kind: openai, base_url: \"http://%s/v1\", model: m}\nfallback: [up]\n", up.Addr())
	os.WriteFile(filepath.Join(dir, "retrygate.yaml"), []byte(cfg), 0o644)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -v %d; exec %s proxy --listen %s --log %s %s", *vlimit, *bin, addr, filepath.Join(dir, "r.log"), *extra))
	cmd.Dir = dir
	cmd.Stdout = io.Discard
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "proxymem: cannot start %s: %v\n", *bin, err)
		os.Exit(2)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	base, _ := rss(pid)
	fmt.Printf("proxy pid %d, RSS at start %d KiB, VmSize %d KiB\n", pid, base, vmPeak)

	head := `{"model":"m","messages":[{"role":"user","content":"`
	tail := `"}]}`
	body := []byte(head + strings.Repeat("x", *size-1-len(head)-len(tail)) + tail)
	var mu sync.Mutex
	codes := map[string]int{}
	stop := make(chan struct{})
	peak := 0
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if c, _ := rss(pid); c > peak {
				peak = c
			}
		}
	}()
	began := time.Now()
	var wg sync.WaitGroup
	for range *conns {
		wg.Go(func() {
			key := "conn error"
			defer func() { mu.Lock(); codes[key]++; mu.Unlock() }()
			c, err := net.DialTimeout("tcp", addr, 30*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(90 * time.Second))
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
			go c.Write(body) // the answer may come before the body is taken
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				key = "no answer: " + err.Error()
				if len(key) > 40 {
					key = key[:40]
				}
				return
			}
			io.Copy(io.Discard, resp.Body)
			key = strconv.Itoa(resp.StatusCode) + " " + resp.Header.Get("X-Retrygate-Refused")
		})
	}
	wg.Wait()
	close(stop)
	took := time.Since(began)
	_, hwm := rss(pid)
	alive := true
	select {
	case err := <-exited:
		alive = false
		fmt.Printf("proxy EXITED: %v\n", err)
	case <-time.After(500 * time.Millisecond):
	}
	fmt.Printf("%d connections x %d bytes in %s: %v\n", *conns, len(body), took.Round(time.Millisecond), codes)
	fmt.Printf("RSS peak sampled %d KiB (%.0f MB), VmHWM %d KiB (%.0f MB), VmSize peak %d KiB, alive=%t\n", peak, float64(peak)/1024, hwm, float64(hwm)/1024, vmPeak, alive)
	if alive {
		cmd.Process.Signal(os.Interrupt)
		<-exited
	}
	if lb, err := os.ReadFile(filepath.Join(dir, "r.log")); err == nil {
		seen := map[string]bool{}
		for _, l := range strings.Split(string(lb), "\n") {
			i := strings.Index(l, "outcome=")
			j := strings.Index(l, "refused=")
			k := l
			if i >= 0 {
				k = l[i:]
			} else if j >= 0 {
				k = l[j:]
			}
			if len(k) > 60 {
				k = k[:60]
			}
			if !seen[k] && l != "" && !strings.HasPrefix(l, "#") {
				seen[k] = true
				fmt.Println("row:", l)
			}
		}
	}
	os.RemoveAll(dir)
}
