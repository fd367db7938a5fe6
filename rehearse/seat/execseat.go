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
	"unicode"

	"github.com/buger/jsonparser"

	"github.com/retrygate/retrygate/admit"
)

// execWaitDelay bounds how long an attempt waits, after its command has
// exited, for stdout to close (a background child may hold it open).
const execWaitDelay = 100 * time.Millisecond

// maxUsageLine bounds a final usage line; the output's last maxTail
// bytes are kept to find it in, with room for blank lines after it.
const (
	maxUsageLine = 4 << 10
	maxTail      = 2 * maxUsageLine
)

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
// output's tail (for the usage line).
type execOut struct {
	start   time.Time
	g       *guard
	st      *stream
	n       int64
	wait    time.Duration
	hasWait bool
	tail    []byte // the output's last maxTail bytes
}

func (o *execOut) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	now := time.Since(o.start)
	if o.n == 0 && o.g.answer() {
		o.wait, o.hasWait = now, true
	}
	o.g.touch(now)
	o.st.itl.chunk(now) // a read of stdout is a chunk for ITL
	o.n += int64(len(p))
	o.st.counter.add(string(p))
	o.tail = append(o.tail, p[max(0, len(p)-maxTail):]...)
	if cut := len(o.tail) - maxTail; cut > 0 {
		o.tail = append(o.tail[:0], o.tail[cut:]...)
	}
	return len(p), nil
}

// usage reads a final {"usage":{"prompt_tokens":N,"completion_tokens":M}}
// line (the last non-blank one), with Chat Completions'
// prompt_tokens_details and completion_tokens_details when the command
// passes them on.
func (o *execOut) usage(st *stream) {
	end := bytes.TrimRightFunc(o.tail, unicode.IsSpace)
	i := bytes.LastIndexByte(end, '\n')
	line := end[i+1:]
	if len(line) > maxUsageLine || i < 0 && int64(len(o.tail)) < o.n {
		return // longer than a usage line, or begun before the kept tail
	}
	if obj, ok := jsonObject(line, nil); ok {
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
	g.init(start, ctx, req, cancel)
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
		if o, why := g.cancelled(parent, ctx); o != "" {
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
	cut := false
	switch o, why := g.cancelled(parent, ctx); {
	case o != "":
		obs.Outcome, obs.Detail, cut = o, why, true
		if obs.HasWait {
			obs.Detail = why + " mid-output"
		}
		if at, ok := g.cutInstant(); ok {
			obs.Elapsed = max(at, obs.Wait)
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
		execTokens(&obs, st, s.codec, req.Text(), cut)
	}
	obs.Billing = admit.BillingOf(obs.Outcome, obs.Elapsed, req.Slow5xxAfter)
	return obs
}

// execTokens fills an exec attempt's counts: its usage line's, else the
// local tokenizer's; a cut attempt's counts without usage are what was
// seen, marked estimate (a command's output has no rate to go on).
func execTokens(obs *Observation, st *stream, codec *lazyCodec, prompt string, cut bool) {
	from := FromTokenizer
	if cut {
		from = FromEstimate
	}
	p, hasP := st.usage.prompt()
	pFrom := FromUsage
	if !hasP {
		p, pFrom = countText(codec, []byte(prompt), st.counter.stop), from
	}
	c, hasC := st.usage.completion()
	cFrom := FromUsage
	if !hasC {
		c, cFrom = st.counter.total(), from
	}
	obs.PromptTokens, obs.CompletionTokens = p, c
	setSources(obs, pFrom, cFrom)
	st.usage.parts(obs, hasP, hasC)
}
