package seat

import (
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

func readAllSSE(r io.Reader, max int) ([]sseGot, error) {
	sr := NewSSEReader(r, max)
	var out []sseGot
	for {
		ev, err := sr.Next()
		switch {
		case errors.Is(err, ErrTooLong):
			out = append(out, sseGot{TooLong: true})
			continue
		case err == io.EOF:
			return out, nil
		case err != nil:
			return out, err
		}
		out = append(out, sseGot{Type: ev.Type, Data: string(ev.Data)})
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
		{"over-long line skipped, stream goes on", "data: " + strings.Repeat("x", 100) + "\n\ndata: ok\n\n", 32,
			[]sseGot{{TooLong: true}, {Data: "ok"}}},
		{"over-long event data over many lines", "data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\ndata: ok\n\n", 30,
			[]sseGot{{TooLong: true}, {Data: "ok"}}},
		{"over-long line ended by CR", "data: " + strings.Repeat("x", 100) + "\r\ndata: ok\n\n", 32,
			[]sseGot{{TooLong: true}, {Data: "ok"}}},
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
	_, err := readAllSSE(io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(boom)), 0)
	assert.ErrorIs(t, err, boom)
}

func TestNDJSONReader(t *testing.T) {
	in := "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n" + strings.Repeat("x", 100) + "\n{\"c\":3}"
	r := NewNDJSONReader(iotest.HalfReader(strings.NewReader(in)), 32)
	var got []string
	for {
		line, err := r.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, ErrTooLong) {
			got = append(got, "TOO LONG")
			continue
		}
		require.NoError(t, err)
		got = append(got, string(line))
	}
	assert.Equal(t, []string{`{"a":1}`, `{"b":2}`, "TOO LONG", `{"c":3}`}, got)
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
		sr := NewSSEReader(bytes.NewReader(in), fuzzBound)
		// Every call consumes input or ends, so this many calls must end it.
		for i := 0; i <= len(in)+1; i++ {
			ev, err := sr.Next()
			if err == io.EOF {
				return
			}
			if err != nil && !errors.Is(err, ErrTooLong) {
				t.Fatalf("unexpected error %v", err)
			}
			if len(ev.Data) > fuzzBound {
				t.Fatalf("event data %d bytes over the %d bound", len(ev.Data), fuzzBound)
			}
			if cap(sr.lines.line) > fuzzBound*2 || cap(sr.data) > fuzzBound*2 {
				t.Fatalf("buffers grew past the bound: line %d data %d", cap(sr.lines.line), cap(sr.data))
			}
			// The wire formats must take whatever the reader yields.
			st := &stream{onContent: func() {}}
			openaiWire{}.event(ev.Type, ev.Data, st)
			anthropicWire{}.event(ev.Type, ev.Data, st)
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
		r := NewNDJSONReader(bytes.NewReader(in), fuzzBound)
		for i := 0; i <= len(in)+1; i++ {
			line, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil && !errors.Is(err, ErrTooLong) {
				t.Fatalf("unexpected error %v", err)
			}
			if len(line) > fuzzBound {
				t.Fatalf("line %d bytes over the %d bound", len(line), fuzzBound)
			}
			if cap(r.lines.line) > fuzzBound*2 {
				t.Fatalf("line buffer grew past the bound: %d", cap(r.lines.line))
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
