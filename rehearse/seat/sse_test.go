package seat

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type sseGot struct {
	Type, Data string
	TooLong    bool
}

// readAllSSE reads r's events, bounded by max (0: MaxLine).
func readAllSSE(r io.Reader, max int) ([]sseGot, error) {
	if max <= 0 {
		max = MaxLine
	}
	sr := newBodyReader(r, max)
	defer sr.release()
	var out []sseGot
	for {
		typ, data, ok := sr.event()
		if !ok {
			if errors.Is(sr.Err(), bufio.ErrTooLong) {
				return append(out, sseGot{TooLong: true}), nil
			}
			return out, sr.Err()
		}
		out = append(out, sseGot{Type: typ, Data: string(data)})
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want []sseGot
	}{
		{"one event", "data: hi\n\n", 0, []sseGot{{Data: "hi"}}},
		{"named, multi-line data", "event: delta\ndata: a\ndata: b\n\n", 0, []sseGot{{Type: "delta", Data: "a\nb"}}},
		{"CRLF and lone CR", "data: a\r\n\r\ndata: b\r\rdata:c\n\n", 0, []sseGot{{Data: "a"}, {Data: "b"}, {Data: "c"}}},
		{"comments and unknown fields dropped", ": ping\nid: 7\nretry: 100\nfoo: bar\ndata: x\n\n", 0, []sseGot{{Data: "x"}}},
		{"only one leading space stripped", "data:  two\n\n", 0, []sseGot{{Data: " two"}}},
		{"field without colon", "data\n\n", 0, []sseGot{{Data: ""}}},
		{"event without data is not dispatched", "event: ping\n\ndata: y\n\n", 0, []sseGot{{Data: "y"}}},
		{"type does not leak to the next event", "event: a\ndata: 1\n\ndata: 2\n\n", 0, []sseGot{{Type: "a", Data: "1"}, {Data: "2"}}},
		{"leading BOM", "\xef\xbb\xbfdata: z\n\n", 0, []sseGot{{Data: "z"}}},
		{"last event without blank line", "data: a\n\ndata: [DONE]", 0, []sseGot{{Data: "a"}, {Data: "[DONE]"}}},
		// An over-long line or event ends the read (the answer is a
		// server_error); the events before it were read.
		{"over-long line ends the stream", "data: a\n\ndata: " + strings.Repeat("x", 100) + "\n\ndata: ok\n\n", 32,
			[]sseGot{{Data: "a"}, {TooLong: true}}},
		{"a line at the limit passes", "data: " + strings.Repeat("x", 26) + "\r\n\r\n", 32, []sseGot{{Data: strings.Repeat("x", 26)}}},
		{"over-long event data over many lines", "data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\ndata: ok\n\n", 30,
			[]sseGot{{TooLong: true}}},
		{"over-long line ended by CR", "data: " + strings.Repeat("x", 100) + "\r\ndata: ok\n\n", 32,
			[]sseGot{{TooLong: true}}},
		{"over-long line at EOF", "data: ok\n\ndata: " + strings.Repeat("x", 100), 32,
			[]sseGot{{Data: "ok"}, {TooLong: true}}},
		{"invalid UTF-8 passes through", "event: \xc3\x28\ndata: \xff\n\n", 0, []sseGot{{Type: "\xc3\x28", Data: "\xff"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAllSSE(strings.NewReader(tt.in), tt.max)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			// Byte-at-a-time delivery reads the same.
			got, err = readAllSSE(iotest.OneByteReader(strings.NewReader(tt.in)), tt.max)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSSEReaderPassesReadErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := readAllSSE(io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(boom)), MaxLine)
	assert.ErrorIs(t, err, boom)
}

func TestNDJSONReader(t *testing.T) {
	in := "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n" + strings.Repeat("x", 100) + "\n{\"c\":3}"
	r := newBodyReader(iotest.HalfReader(strings.NewReader(in)), 32)
	defer r.release()
	var got []string
	for line, ok := r.line(); ok; line, ok = r.line() {
		got = append(got, string(line))
	}
	assert.Equal(t, []string{`{"a":1}`, `{"b":2}`}, got)
	assert.ErrorIs(t, r.Err(), bufio.ErrTooLong)
}

// A last line without its newline is a line only when the body ended
// cleanly: one cut off by a read error is not read as whole.
func TestNDJSONLastLineNeedsCleanEnd(t *testing.T) {
	boom := errors.New("boom")
	r := newBodyReader(io.MultiReader(strings.NewReader("{\"a\":1}\n{\"done\":true}"), iotest.ErrReader(boom)), MaxLine)
	defer r.release()
	line, ok := r.line()
	assert.True(t, ok)
	assert.Equal(t, `{"a":1}`, string(line))
	_, ok = r.line()
	assert.False(t, ok)
	assert.ErrorIs(t, r.Err(), boom)
	r2 := newBodyReader(strings.NewReader("{\"done\":true}"), MaxLine)
	defer r2.release()
	line, ok = r2.line()
	assert.True(t, ok)
	assert.Equal(t, `{"done":true}`, string(line))
}

// fuzzBound is the line limit fuzzing uses: small, so over-long paths run.
const fuzzBound = 64

func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: hi\n\n", "event: x\r\ndata: a\rdata: b\n\n", ": c\n\n", "data", "\xef\xbb\xbfdata:\n\n",
		"data: " + strings.Repeat("y", 200) + "\n\ndata: z\n\n", "\r\r\n\n\r", "data: [DONE]",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\"}}\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		sr := newBodyReader(bytes.NewReader(in), fuzzBound)
		defer sr.release()
		// Every call consumes input or ends, so this many calls must end it.
		for i := 0; i <= len(in)+1; i++ {
			typ, data, ok := sr.event()
			if !ok {
				if err := sr.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(data) > fuzzBound {
				t.Fatalf("event data %d bytes over the %d bound", len(data), fuzzBound)
			}
			// The wire formats must take whatever the reader yields.
			st := &stream{onContent: func() {}}
			openaiWire{}.event(typ, data, st)
			anthropicWire{}.event(typ, data, st)
		}
		t.Fatal("reader did not end")
	})
}

func FuzzNDJSON(f *testing.F) {
	for _, s := range []string{
		"{\"done\":true}\n", "{\"message\":{\"content\":\"hi\"}}\r\n\n", "\n\n", "[1,2]\n{", strings.Repeat("z", 200) + "\n{}",
		"{\"error\":\"x\"}", "{\"prompt_eval_count\":1e400,\"eval_count\":-1,\"done\":true}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// The whole answer is read once (a non-streamed answer), then line
		// by line: reading it again per line made long inputs quadratic,
		// slow enough to overrun the fuzz run's deadline in CI.
		ollamaWire{}.whole(in, &stream{onContent: func() {}})
		r := newBodyReader(bytes.NewReader(in), fuzzBound)
		defer r.release()
		for i := 0; i <= len(in)+1; i++ {
			line, ok := r.line()
			if !ok {
				if err := r.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(line) > fuzzBound {
				t.Fatalf("line %d bytes over the %d bound", len(line), fuzzBound)
			}
			st := &stream{onContent: func() {}}
			ollamaWire{}.event("", line, st)
		}
		t.Fatal("reader did not end")
	})
}

// FuzzLineEnd: the line search finds what bytes.IndexAny finds.
func FuzzLineEnd(f *testing.F) {
	for _, s := range []string{"", "a", "\n", "\r", "a\r\nb", "ab\nc\rd", "abc\rd\ne", "\n\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := lineEnd(b), bytes.IndexAny(b, "\r\n"); got != want {
			t.Fatalf("lineEnd(%q) = %d, want %d", b, got, want)
		}
	})
}
