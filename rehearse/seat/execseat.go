package seat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/buger/jsonparser"

	"retrygate/admit"
)

// execWaitDelay bounds how long an attempt waits, after its command has
// exited, for stdout to close (a background child may hold it open).
const execWaitDelay = 100 * time.Millisecond

// maxUsageLine bounds the line kept to look for a final usage line.
const maxUsageLine = 4 << 10

// markEnv names the variable that marks every process of one exec
// attempt, so the attempt's end finds its descendants wherever they went.
const markEnv = "RETRYGATE_ATTEMPT"

var markSeq atomic.Uint64

// attemptMark is unique per attempt and per process.
func attemptMark() string {
	return strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(markSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// execSeat runs a local command with the prompt on stdin: wait is its
// first stdout byte, elapsed its exit.
type execSeat struct {
	cfg   Config
	codec *lazyCodec
}

func (s *execSeat) Name() string     { return s.cfg.Name }
func (s *execSeat) String() string   { return fmt.Sprintf("seat %s (exec)", s.cfg.Name) }
func (s *execSeat) GoString() string { return s.String() }

// execOut receives the command's stdout on exec's copying goroutine; Wait
// returns only after that goroutine has finished, so Do reads it safely.
// It keeps no completion text beyond the token counter's hold and the
// last line (for the usage line).
type execOut struct {
	start   time.Time
	g       *guard
	st      *stream
	n       int64
	wait    time.Duration
	hasWait bool
	cur     []byte // the line being written, up to maxUsageLine
	curOver bool
	last    []byte // the last complete non-blank line
	lastOK  bool
}

func (o *execOut) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	now := time.Since(o.start)
	if o.n == 0 && o.g.answer() {
		o.wait, o.hasWait = now, true
	}
	o.st.itl.chunk(now) // a read of stdout is a chunk for ITL
	o.n += int64(len(p))
	o.st.counter.add(string(p))
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		seg := rest
		if i >= 0 {
			seg = rest[:i]
		}
		if !o.curOver && len(o.cur)+len(seg) <= maxUsageLine {
			o.cur = append(o.cur, seg...)
		} else {
			o.curOver, o.cur = true, o.cur[:0]
		}
		if i < 0 {
			break
		}
		o.endLine()
		rest = rest[i+1:]
	}
	return len(p), nil
}

// endLine closes the current line, remembering it if it is not blank.
func (o *execOut) endLine() {
	if o.curOver {
		o.last, o.lastOK = o.last[:0], false
	} else if len(bytes.TrimSpace(o.cur)) > 0 {
		o.last, o.lastOK = append(o.last[:0], o.cur...), true
	}
	o.cur, o.curOver = o.cur[:0], false
}

// usage reads a final {"usage":{"prompt_tokens":N,"completion_tokens":M}}
// line, with Chat Completions' prompt_tokens_details and
// completion_tokens_details when the command passes them on.
func (o *execOut) usage(st *stream) {
	if o.curOver || len(bytes.TrimSpace(o.cur)) > 0 {
		o.endLine()
	}
	if !o.lastOK {
		return
	}
	if obj, ok := jsonObject(o.last, nil); ok {
		if u, ok, _ := member(obj, jsonparser.Object, "usage"); ok {
			chatUsage.read(u, st)
		}
	}
}

// Do runs the command once. Its output and stderr never reach the
// observation: only counts, times and the exit status.
func (s *execSeat) Do(parent context.Context, req Request) Observation {
	start := time.Now()
	obs := Observation{Seat: s.cfg.Name, Model: s.cfg.Model}
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	g := new(guard)
	g.init(start, req, cancel)
	defer g.stop()

	st := &stream{counter: streamCounter{codec: s.codec, stop: stopCounting(ctx)}}
	out := &execOut{start: start, g: g, st: st}
	cmd := exec.CommandContext(ctx, s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Stdin = strings.NewReader(req.Prompt)
	cmd.Stdout = out
	cmd.WaitDelay = execWaitDelay
	mark := attemptMark()
	cmd.Env = append(os.Environ(), markEnv+"="+mark)
	inGroup(cmd, mark)

	if err := cmd.Start(); err != nil {
		obs.Elapsed = time.Since(start)
		if o, why := cancelled(parent, ctx); o != "" {
			obs.Outcome, obs.Detail = o, why+" before the command started"
		} else {
			obs.Outcome, obs.Detail = admit.ConnError, "command could not start"
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				obs.Detail = "command not found"
			}
		}
		obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, req.Slow5xxAfter)
		return obs
	}
	err := cmd.Wait()
	obs.Elapsed = time.Since(start)
	killGroup(cmd)   // whatever it left behind in its group
	killMarked(mark) // and whatever left the group
	obs.Bytes = out.n
	obs.Wait, obs.HasWait = out.wait, out.hasWait
	obs.ITLMean, obs.ITLMax, obs.HasITL = st.itl.figures()
	st.content = out.n > 0

	var exitErr *exec.ExitError
	switch o, why := cancelled(parent, ctx); {
	case o != "":
		obs.Outcome, obs.Detail = o, why
		if obs.HasWait {
			obs.Detail = why + " mid-output"
		}
	case err == nil, errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success():
		obs.Outcome = admit.OK
	case errors.As(err, &exitErr):
		obs.Outcome, obs.Detail = admit.ServerError, exitErr.ProcessState.String() // "exit status 3", "signal: killed"
	default:
		obs.Outcome, obs.Detail = admit.ServerError, "command failed"
	}
	if obs.Outcome != admit.ServerError || st.content {
		out.usage(st)
		fillTokens(&obs, st, s.codec, req.Text())
	}
	obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, req.Slow5xxAfter)
	return obs
}
