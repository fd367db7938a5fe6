package seatserver

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// Summary is a one-line, secret-free description of a plan, for
// /_retrygate/requests: "status=200 ttfb=0.100 wait=0.150 elapsed=0.400 tokens=120+40".
func Summary(p seat.Plan) string {
	if p.ConnError {
		return "conn_error"
	}
	status := cmp.Or(p.Status, http.StatusOK)
	parts := []string{"status=" + strconv.Itoa(status)}
	add := func(k string, d time.Duration) {
		switch {
		case d >= farFuture:
			parts = append(parts, k+"=never")
		case d > 0:
			parts = append(parts, k+"="+secs(d))
		}
	}
	add("ttfb", p.TTFB)
	add("wait", p.Wait)
	add("elapsed", p.Elapsed)
	if p.PromptTokens > 0 || p.CompletionTokens > 0 {
		parts = append(parts, "tokens="+strconv.FormatInt(p.PromptTokens, 10)+"+"+strconv.FormatInt(p.CompletionTokens, 10))
	}
	if p.NoUsage {
		parts = append(parts, "no_usage")
	}
	if p.ErrorCode != "" {
		parts = append(parts, "error="+p.ErrorCode)
	}
	if p.Incomplete != "" {
		parts = append(parts, "incomplete="+p.Incomplete)
	}
	if p.HasRetryAfter {
		parts = append(parts, "retry_after="+secs(p.RetryAfter))
	}
	if p.Hang {
		parts = append(parts, "hang")
	}
	add("reset_after", p.ResetAfter)
	return strings.Join(parts, " ")
}

func secs(d time.Duration) string {
	return strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', 3, 64)
}

// step is one write of the response at a point after the request arrived.
type step struct {
	at   time.Duration
	kind stepKind
	text string // content steps
}

type stepKind int

const (
	stepHeaders     stepKind = iota // 200 headers and the stream's preamble
	stepContent                     // one content chunk
	stepFinish                      // end of a 200 stream: finish reason, usage, [DONE]
	stepStreamError                 // an error inside a 200 stream
	stepError                       // a non-200 status with its error body
	stepWhole                       // a whole non-streamed 200 body
)

// beforeReset reports whether a step due at the very moment of a reset
// still makes it out: headers and content do, the stream's end does not.
func (s step) beforeReset() bool { return s.kind == stepHeaders || s.kind == stepContent }

// maxChunks bounds the writes of one response; chunks are also at least
// chunkGap apart, so a 40,000-token plan is not 40,000 syscalls.
const (
	maxChunks = 256
	chunkGap  = 5 * time.Millisecond
)

// timeline turns a plan into timed writes, with the same reading of the
// plan as seat.Resolve: headers at TTFB (0: with the first content),
// first content at Wait, the last byte at Elapsed; an error status sends
// headers and body together at Elapsed. It also returns when to drop the
// connection (0: never): reset_after, when it comes at or before the end.
func timeline(p seat.Plan, stream bool) (steps []step, resetAt time.Duration) {
	status := cmp.Or(p.Status, http.StatusOK)
	end := p.Elapsed
	if p.ResetAfter > 0 && (p.Hang || p.ResetAfter <= end) {
		// A reset at the last byte's moment still drops the connection:
		// the client never sees the stream's end (as seat.Resolve reads it).
		resetAt = p.ResetAfter
	}
	defer func() { steps = dropNever(steps) }()
	switch {
	case status != http.StatusOK, !stream && p.ErrorCode != "":
		return []step{{at: end, kind: stepError}}, resetAt
	case !stream && p.Hang:
		if p.TTFB > 0 {
			return []step{{at: p.TTFB, kind: stepHeaders}}, resetAt
		}
		return nil, resetAt
	case !stream:
		return []step{{at: end, kind: stepWhole, text: filler(0, wordsOf(p))}}, resetAt
	}
	headersAt := p.TTFB
	if headersAt <= 0 || (p.Wait > 0 && headersAt > p.Wait) {
		headersAt = p.Wait
	}
	if p.ErrorCode != "" {
		if p.TTFB <= 0 || p.TTFB > end {
			headersAt = end
		} else {
			headersAt = p.TTFB
		}
		return []step{{at: headersAt, kind: stepHeaders}, {at: end, kind: stepStreamError}}, resetAt
	}
	steps = []step{{at: headersAt, kind: stepHeaders}}
	if p.Hang {
		if p.Wait > 0 && p.Wait < farFuture {
			// A stream that started and then stalled.
			steps = append(steps, step{at: p.Wait, kind: stepContent, text: filler(0, 1)})
		}
		return steps, resetAt
	}
	if p.Wait <= end {
		words := wordsOf(p)
		span := end - p.Wait
		n := min(words, maxChunks, 1+int64(span/chunkGap))
		for i := int64(0); i < n; i++ {
			at := p.Wait
			if n > 1 {
				at += time.Duration(int64(span) * i / (n - 1))
			}
			steps = append(steps, step{at: at, kind: stepContent, text: filler(words*i/n, words*(i+1)/n)})
		}
	}
	return append(steps, step{at: end, kind: stepFinish}), resetAt
}

// farFuture and beyond is never: the script package writes a hang's
// missing wait (and ttfb) as the largest duration.
const farFuture = time.Duration(1 << 62)

func dropNever(steps []step) []step {
	out := steps[:0]
	for _, st := range steps {
		if st.at < farFuture {
			out = append(out, st)
		}
	}
	return out
}

// wordsOf is how many filler words a plan's completion gets: one per
// completion token, so a client that counts tokens itself (no usage)
// lands on about the plan's number; at least one, so there is content.
func wordsOf(p seat.Plan) int64 {
	return max(p.CompletionTokens, 1)
}

// fillerWords are short, common words that every BPE vocabulary holds as
// a single token each, leading space included.
var fillerWords = []string{" the", " and", " of", " to", " in", " a", " is", " that", " for", " it", " as", " was", " with", " on", " at", " by"}

// filler is words [from, to) of an endless synthetic completion; it never
// has anything to do with the prompt.
func filler(from, to int64) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(fillerWords[i%int64(len(fillerWords))])
	}
	return b.String()
}

// Filler is words [from, to) of the completion the server writes, so a
// client's test (rehearse/sdktest, a module of its own) can check it
// received every word.
func Filler(from, to int64) string { return filler(from, to) }

func usageOf(p seat.Plan) usage {
	return usage{Plan: p, ok: !p.NoUsage && (p.PromptTokens > 0 || p.CompletionTokens > 0)}
}
