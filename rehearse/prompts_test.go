package rehearse

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

func TestLoadPromptsMixed(t *testing.T) {
	set, err := LoadPrompts(filepath.Join("..", "testdata", "prompts", "mixed.jsonl"), 1<<20)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(set), 20)
	require.LessOrEqual(t, len(set), 40)
	var system, tagged, withMax int
	shortest, longest := 1<<30, 0
	for _, p := range set {
		words := len(strings.Fields(seat.RequestText(p.Prompt, p.Messages)))
		shortest, longest = min(shortest, words), max(longest, words)
		if len(p.Messages) > 0 && p.Messages[0].Role == "system" {
			system++
		}
		if len(p.Tags) > 0 {
			tagged++
		}
		if p.MaxTokens > 0 {
			withMax++
		}
	}
	assert.Less(t, shortest, 10, "a few words")
	assert.Greater(t, longest, 2000, "a few thousand words")
	assert.Positive(t, system)
	assert.Positive(t, tagged)
	assert.Positive(t, withMax)
}

func TestReadPromptsLines(t *testing.T) {
	in := `{"prompt": "hello there", "tags": ["a", "b-2"]}

{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 64}
`
	set, err := ReadPrompts(strings.NewReader(in), "set.jsonl", 1000)
	require.NoError(t, err)
	require.Len(t, set, 2, "a blank line is skipped")
	assert.Equal(t, Prompt{Prompt: "hello there", Tags: []string{"a", "b-2"}}, set[0])
	assert.Equal(t, Prompt{Messages: []seat.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}, MaxTokens: 64}, set[1])
}

func TestReadPromptsBadLines(t *testing.T) {
	good := `{"prompt": "fine"}` + "\n"
	for _, tc := range []struct{ line, want string }{
		{`not json`, "set.jsonl:2: not a JSON object"},
		{`[1,2]`, "set.jsonl:2: not a JSON object"},
		{`{}`, "set.jsonl:2: no prompt or messages"},
		{`{"prompt": 5}`, "set.jsonl:2: prompt: want a string"},
		{`{"prompt": "  "}`, "set.jsonl:2: prompt: empty"},
		{`{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}`, "set.jsonl:2: prompt and messages"},
		{`{"prompt": "a", "text": "b"}`, `set.jsonl:2: unknown field "text"`},
		{`{"prompt": "a"} {"prompt": "b"}`, "set.jsonl:2: more than one JSON value"},
		{`{"messages": []}`, "set.jsonl:2: messages: want 1 to"},
		{`{"messages": "hi"}`, "set.jsonl:2: messages: want an array"},
		{`{"messages": [{"role": "robot", "content": "x"}]}`, "set.jsonl:2: messages[0].role"},
		{`{"messages": [{"role": "user", "content": ""}]}`, "set.jsonl:2: messages[0].content: empty"},
		{`{"messages": [{"role": "system", "content": "x"}]}`, "set.jsonl:2: messages: no user message"},
		{`{"prompt": "a", "max_tokens": 0}`, "set.jsonl:2: max_tokens: want a whole number from 1 to 1000"},
		{`{"prompt": "a", "max_tokens": 1001}`, "set.jsonl:2: max_tokens"},
		{`{"prompt": "a", "max_tokens": 1.5}`, "set.jsonl:2: max_tokens"},
		{`{"prompt": "a", "max_tokens": "64"}`, "set.jsonl:2: max_tokens"},
		{`{"prompt": "a", "tags": "x"}`, "set.jsonl:2: tags: want an array of strings"},
		{`{"prompt": "a", "tags": ["x,y"]}`, "set.jsonl:2: tags[0]"},
		{`{"prompt": "a", "tags": ["ok", ""]}`, "set.jsonl:2: tags[1]"},
		{`{"prompt": "a", "tags": ["` + strings.Repeat("t", 65) + `"]}`, "set.jsonl:2: tags[0]"},
	} {
		_, err := ReadPrompts(strings.NewReader(good+tc.line+"\n"), "set.jsonl", 1000)
		require.Error(t, err, tc.line)
		assert.Contains(t, err.Error(), tc.want, tc.line)
	}
	// A long value is echoed cut at a whole character.
	_, err := ReadPrompts(strings.NewReader(`{"messages": [{"role": "`+strings.Repeat("r", 39)+`éé", "content": "x"}]}`), "set.jsonl", 1000)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"`+strings.Repeat("r", 39)+`…"`)
	_, err = ReadPrompts(strings.NewReader("\n\n"), "empty.jsonl", 1000)
	assert.ErrorContains(t, err, "empty.jsonl: no prompts")
	_, err = ReadPrompts(strings.NewReader(`{"prompt": "`+strings.Repeat("x", MaxPromptSetLine)+`"}`), "big.jsonl", 1000)
	assert.ErrorContains(t, err, "big.jsonl: line 1")
}

// fivePrompts are distinct prompts, each with a tag naming it.
func fivePrompts() []Prompt {
	var set []Prompt
	for _, w := range []string{"alpha", "bravo", "charlie", "delta", "echo"} {
		set = append(set, Prompt{Prompt: "say " + w, Tags: []string{w}})
	}
	return set
}

func promptRun(t *testing.T, order string, seed uint64, jobs int) rows {
	t.Helper()
	var out rows
	l, err := New(Config{
		Policy: quiet(), Seats: []SeatSpec{spec("s", plans{okPlan})}, Rand: seeded(seed), Sink: out.sink,
		Run: 1, Jobs: jobs, MaxTokens: 256, Prompts: fivePrompts(), PromptOrder: order, PromptSeed: seed,
	})
	require.NoError(t, err)
	_, err = l.RunVirtual(VirtualOptions{Jobs: jobs, Start: t0})
	require.NoError(t, err)
	return out
}

func tagsOf(r rows) []string {
	var out []string
	for _, row := range r {
		out = append(out, row.Tags)
	}
	return out
}

func TestPromptOrder(t *testing.T) {
	a := promptRun(t, OrderRandom, 7, 40)
	b := promptRun(t, OrderRandom, 7, 40)
	c := promptRun(t, OrderRandom, 8, 40)
	assert.Equal(t, tagsOf(a), tagsOf(b), "same seed: same prompts")
	assert.NotEqual(t, tagsOf(a), tagsOf(c), "another seed: other prompts")
	seen := map[string]bool{}
	for _, tag := range tagsOf(a) {
		seen[tag] = true
	}
	assert.Len(t, seen, 5, "40 draws reach all five prompts")

	seq := promptRun(t, OrderSeq, 7, 7)
	assert.Equal(t, []string{"alpha", "bravo", "charlie", "delta", "echo", "alpha", "bravo"}, tagsOf(seq))
	for i, p := range fivePrompts()[:2] {
		assert.Equal(t, seat.PromptSHA(p.Prompt, nil), seq[i].PromptSHA)
		assert.Equal(t, seq[i].PromptSHA, seq[i+5].PromptSHA)
	}
	log := seq.log()
	assert.Contains(t, log, " tags=alpha")
	assert.Contains(t, log, " prompt_sha=")
	for _, w := range []string{"say", "alpha bravo"} {
		assert.NotContains(t, log, w, "the text is never logged")
	}
}

// TestPromptPerJob: every attempt of a job sends that job's prompt, as
// text or messages, with its own max_tokens or the run's.
func TestPromptPerJob(t *testing.T) {
	clock := NewVirtualClock(t0)
	rec := &recordingSeat{inner: NewPlanSeat("rec", plans{fast503, okPlan, fast503, okPlan}, clock)}
	msgs := []seat.Message{{Role: "system", Content: "brief"}, {Role: "user", Content: "hi"}}
	var out rows
	l, err := New(Config{
		Policy: quiet(), Seats: []SeatSpec{{Config: seat.Config{Name: "rec"}, Seat: rec}},
		Rand: seeded(1), Sink: out.sink, Run: 1, Jobs: 2, MaxTokens: 99, PromptOrder: OrderSeq,
		Prompts: []Prompt{{Prompt: "first"}, {Messages: msgs, MaxTokens: 7, Tags: []string{"chat", "x"}}},
	})
	require.NoError(t, err)
	_, err = l.RunReal(context.Background(), RealOptions{Jobs: 2, Clock: clock})
	require.NoError(t, err)
	require.Len(t, rec.reqs, 4)
	for i, want := range []seat.Request{{Prompt: "first", MaxTokens: 99}, {Prompt: "first", MaxTokens: 99}, {Messages: msgs, MaxTokens: 7}, {Messages: msgs, MaxTokens: 7}} {
		got := rec.reqs[i]
		assert.Equal(t, want.Prompt, got.Prompt, i)
		assert.Equal(t, want.Messages, got.Messages, i)
		assert.Equal(t, want.MaxTokens, got.MaxTokens, i)
	}
	require.Len(t, out, 4)
	assert.Equal(t, "chat,x", out[3].Tags)
	assert.Equal(t, seat.PromptSHA("", msgs), out[3].PromptSHA)
	assert.Empty(t, out[0].Tags)
}

// TestTokenCeilingRefusesLongPrompts: against a 127.0.0.1 seat that
// drops the stream after a chunk, without usage, the tokenizer counts each job's own prompt:
// a short prompt's job retries, a long one's retry would pass the token
// ceiling and is refused.
func TestTokenCeilingRefusesLongPrompts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { // 127.0.0.1
		// One chunk of content, then the connection drops: a sent,
		// billed attempt without usage, retried.
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(`{"message":{"role":"assistant","content":"par"},"done":false}` + "\n"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(srv.Close)
	s, err := seat.New(seat.Config{Name: "http", Kind: "ollama", BaseURL: srv.URL, Model: "llama3"}, func(string) string { return "" })
	require.NoError(t, err)

	p := quiet()
	p.Budget.MaxAttempts = 3
	p.Budget.TokenCeiling = 3000
	p.Retry.BaseDelay, p.Retry.MaxDelay = 1_000_000, 2_000_000 // 1–2 ms of real backoff
	long := strings.Repeat("retry budget wait deadline ", 500)
	var out rows
	l, err := New(Config{
		Policy: p, Seats: []SeatSpec{{Config: seat.Config{Name: "http", Model: "llama3"}, Seat: s}},
		Rand: seeded(1), Sink: out.sink, Run: 1, Jobs: 2, MaxTokens: 16, PromptOrder: OrderSeq,
		Prompts: []Prompt{{Prompt: "short one", Tags: []string{"short"}}, {Prompt: long, Tags: []string{"long"}}},
	})
	require.NoError(t, err)
	_, err = l.RunReal(context.Background(), RealOptions{Jobs: 2})
	require.NoError(t, err)
	shortRows, longRows := out.byJob("r1-1"), out.byJob("r1-2")
	require.Len(t, shortRows, 4, out.log())
	for _, r := range shortRows[:3] {
		assert.False(t, r.Unsent, "short prompt: retried to the attempt cap\n%s", out.log())
	}
	assert.Equal(t, "refuse: "+string(admit.ReasonAttemptCap), shortRows[3].Decision)
	require.Len(t, longRows, 2, out.log())
	assert.Greater(t, longRows[0].PromptTokens, int64(1500), "the long prompt was counted")
	assert.True(t, longRows[1].Unsent)
	assert.Equal(t, "refuse: "+string(admit.ReasonTokenCeiling), longRows[1].Decision)
}

// TestPromptReservation: a first attempt's spend reservation is its own
// prompt's tokens and max_tokens, not the run's.
func TestPromptReservation(t *testing.T) {
	p := quiet()
	p.Budget.MaxSpendUSD = 1
	s := spec("priced", plans{okPlan})
	s.Config.PriceIn, s.Config.PriceOut = 4, 8
	long := strings.Repeat("retry budget wait deadline ", 1000)
	var out rows
	l, err := New(Config{
		Policy: p, Seats: []SeatSpec{s}, Rand: seeded(1), Sink: out.sink, Run: 1, Jobs: 2,
		MaxTokens: 256, PromptOrder: OrderSeq,
		Prompts: []Prompt{{Prompt: "hi", MaxTokens: 10}, {Prompt: long}},
	})
	require.NoError(t, err)
	_, err = l.RunVirtual(VirtualOptions{Jobs: 2, Start: t0})
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.InDelta(t, admit.Reservation(s.Config.Prices(), seat.PromptTokens(s.Config, "hi"), 10), out[0].ReserveUSD, 1e-12)
	assert.InDelta(t, admit.Reservation(s.Config.Prices(), seat.PromptTokens(s.Config, long), 256), out[1].ReserveUSD, 1e-12)
	assert.Greater(t, out[1].ReserveUSD, 10*out[0].ReserveUSD)
}

// FuzzReadPrompts: any input is a set or an error naming the file, never
// a panic; a set's lines are valid and their tags join back apart.
func FuzzReadPrompts(f *testing.F) {
	f.Add(`{"prompt": "hi", "tags": ["a"]}`)
	f.Add(`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "max_tokens": 9}`)
	f.Add("{\"prompt\": \"x\"}\n\n{}")
	f.Fuzz(func(t *testing.T, in string) {
		set, err := ReadPrompts(strings.NewReader(in), "f.jsonl", 1000)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.jsonl") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for _, p := range set {
			if (p.Prompt == "") == (len(p.Messages) == 0) || p.MaxTokens < 0 || p.MaxTokens > 1000 {
				t.Fatalf("bad prompt accepted: %+v", p)
			}
			if len(p.Tags) > 0 && len(strings.Split(strings.Join(p.Tags, ","), ",")) != len(p.Tags) {
				t.Fatalf("tags do not split back: %q", p.Tags)
			}
		}
	})
}
