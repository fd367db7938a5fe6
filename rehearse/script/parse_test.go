package script

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// parseErrorCases are malformed scripts and the exact error each gives.
// The fuzz target seeds its corpus with them too.
var parseErrorCases = []struct {
	name string
	src  string
	want string
}{
	{"negative duration", "steps:\n  - wait: 1s\n  - wait: -1s\n", `t.yaml:3: steps[1].wait: negative duration "-1s"`},
	{"negative seconds", "steps:\n  - elapsed: -0.5\n", `t.yaml:2: steps[0].elapsed: negative duration "-0.5"`},
	{"nan duration", "steps:\n  - wait: .nan\n", `t.yaml:2: steps[0].wait: not a duration ".nan" (want e.g. 45s, 1500ms or 45)`},
	{"infinite duration", "steps:\n  - {wait: 1s, elapsed: .inf}\n", `t.yaml:2: steps[0].elapsed: not a duration ".inf" (want e.g. 45s, 1500ms or 45)`},
	{"NaN word", "steps:\n  - retry_after: NaN\n", `t.yaml:2: steps[0].retry_after: not a duration "NaN" (want e.g. 45s, 1500ms or 45)`},
	{"not a duration", "steps:\n  - wait: 1.2x\n", `t.yaml:2: steps[0].wait: not a duration "1.2x" (want e.g. 45s, 1500ms or 45)`},
	{"duration too long", "steps:\n  - wait: 25h\n", `t.yaml:2: steps[0].wait: duration "25h" out of range (a scripted step lasts at most 24h0m0s)`},
	{"seconds too long", "steps:\n  - wait: 1e9\n", `t.yaml:2: steps[0].wait: duration "1e9" out of range (a scripted step lasts at most 24h0m0s)`},
	{"duration as list", "steps:\n  - wait: [1]\n", `t.yaml:2: steps[0].wait: want a duration such as 1.5s, 1500ms or 1.5, got a list`},
	{"duration as bool", "steps:\n  - wait: true\n", `t.yaml:2: steps[0].wait: want a duration such as 1.5s, 1500ms or 1.5, got "true"`},
	{"missing value", "steps:\n  - wait:\n", `t.yaml:2: steps[0].wait: missing value (want a duration such as 1.5s, 1500ms or 1.5)`},
	{"custom tag", "steps:\n  - wait: !secs 1\n", `t.yaml:2: steps[0].wait: unsupported tag !secs (want a duration such as 1.5s, 1500ms or 1.5)`},
	{"unknown step key", "steps:\n  - wiat: 1s\n", `t.yaml:2: steps[0].wiat: unknown key "wiat" (did you mean wait?)`},
	{"unknown step key far", "steps:\n  - latency: 1s\n", `t.yaml:2: steps[0].latency: unknown key "latency" (want one of wait, ttfb, elapsed, rate, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, usage, status, retry_after, ratelimit_remaining_requests, ratelimit_remaining_tokens, ratelimit_reset, error, incomplete, hang, reset_after, conn_error, repeat)`},
	{"cached over prompt", "steps:\n  - {prompt_tokens: 10, cached_tokens: 11}\n", `t.yaml:2: steps[0].cached_tokens: 11 is more than prompt_tokens (10): it is a part of it`},
	{"written over the rest", "steps:\n  - {prompt_tokens: 10, cached_tokens: 6, cache_write_tokens: 5}\n", `t.yaml:2: steps[0].cache_write_tokens: 5 is more than prompt_tokens less cached_tokens (4): it is a part of it`},
	{"reasoning over completion", "steps:\n  - {completion_tokens: 3, reasoning_tokens: 4}\n", `t.yaml:2: steps[0].reasoning_tokens: 4 is more than completion_tokens (3): it is a part of it`},
	{"unknown top key", "stepz:\n  - wait: 1s\n", `t.yaml:1: stepz: unknown key "stepz" (did you mean steps?)`},
	{"duplicate key", "steps:\n  - wait: 1s\n    ttfb: 0.5s\n    wait: 2s\n", `t.yaml:4: steps[0].wait: duplicate key (first given on line 2)`},
	{"merge key", "base: &b {wait: 1s}\nsteps:\n  - <<: *b\n", `t.yaml:1: base: unknown key "base" (want one of name, model, then, steps)`},
	{"merge key in step", "steps:\n  - <<: {wait: 1s}\n", `t.yaml:2: steps[0].<<: merge keys are not supported (write the keys out, or use repeat)`},
	{"elapsed before wait", "steps:\n  - wait: 2s\n    elapsed: 1s\n", `t.yaml:3: steps[0].elapsed: 1s is before wait 2s (elapsed runs from submit to the last byte)`},
	{"rate and elapsed", "steps:\n  - elapsed: 3s\n    rate: 50\n    completion_tokens: 100\n", `t.yaml:3: steps[0].rate: give elapsed or rate, not both`},
	{"rate zero", "steps:\n  - {rate: 0, completion_tokens: 10}\n", `t.yaml:2: steps[0].rate: must be positive (tokens per second), got 0`},
	{"rate negative", "steps:\n  - {rate: -3, completion_tokens: 10}\n", `t.yaml:2: steps[0].rate: must not be negative, got -3`},
	{"rate nan", "steps:\n  - {rate: .nan}\n", `t.yaml:2: steps[0].rate: not a number ".nan" (want completion tokens per second)`},
	{"rate words", "steps:\n  - {rate: fast}\n", `t.yaml:2: steps[0].rate: not a number "fast" (want completion tokens per second)`},
	{"repeat zero", "steps:\n  - {wait: 1s, repeat: 0}\n", `t.yaml:2: steps[0].repeat: must be at least 1, got 0`},
	{"repeat negative", "steps:\n  - {wait: 1s, repeat: -2}\n", `t.yaml:2: steps[0].repeat: negative count "-2"`},
	{"repeat fraction", "steps:\n  - {wait: 1s, repeat: 1.5}\n", `t.yaml:2: steps[0].repeat: not a whole number "1.5"`},
	{"repeat too many", "steps:\n  - {repeat: 2000000000}\n  - {repeat: 2000000000}\n", `t.yaml:3: steps[1].repeat: the script expands to more than 2147483647 calls`},
	{"tokens negative", "steps:\n  - prompt_tokens: -5\n", `t.yaml:2: steps[0].prompt_tokens: negative count "-5"`},
	{"tokens float", "steps:\n  - completion_tokens: 1e3\n", `t.yaml:2: steps[0].completion_tokens: not a whole number "1e3"`},
	{"tokens huge", "steps:\n  - completion_tokens: 99999999999999999999\n", `t.yaml:2: steps[0].completion_tokens: count over 9007199254740991 "99999999999999999999"`},
	{"tokens over the cap", "steps:\n  - completion_tokens: 2000000000\n", `t.yaml:2: steps[0].completion_tokens: 2000000000 out of range (at most 1000000000)`},
	{"tokens infinite", "steps:\n  - completion_tokens: .inf\n", `t.yaml:2: steps[0].completion_tokens: not a whole number ".inf"`},
	{"status redirect", "steps:\n  - status: 302\n", `t.yaml:2: steps[0].status: want 200 or an error status 400-599, got 302`},
	{"status range", "steps:\n  - status: 700\n", `t.yaml:2: steps[0].status: 700 out of range (at most 599)`},
	{"status word", "steps:\n  - status: teapot\n", `t.yaml:2: steps[0].status: not a whole number "teapot"`},
	{"bool word", "steps:\n  - hang: \"yes\"\n", `t.yaml:2: steps[0].hang: want true or false, got "yes"`},
	{"error code spaces", "steps:\n  - {status: 400, error: context length}\n", `t.yaml:2: steps[0].error: want a provider error code such as context_length_exceeded (letters, digits, _ . -), got "context length"`},
	{"incomplete with status", "steps:\n  - {status: 500, incomplete: max_output_tokens}\n", `t.yaml:2: steps[0].incomplete: not allowed with status (an incomplete answer is a 200 that streams to its end)`},
	{"incomplete words", "steps:\n  - {incomplete: too long}\n", `t.yaml:2: steps[0].incomplete: want the reason the answer ended short, such as max_output_tokens or content_filter, got "too long"`},
	{"incomplete with hang", "steps:\n  - {hang: true, incomplete: content_filter}\n", `t.yaml:2: steps[0].incomplete: not allowed with hang: true (a hang never ends; use reset_after to drop the connection)`},
	{"ttfb after wait", "steps:\n  - {ttfb: 2s, wait: 1s}\n", `t.yaml:2: steps[0].ttfb: 2s is after wait 1s (headers come before the first content)`},
	{"reset after end", "steps:\n  - {wait: 1s, elapsed: 5s, reset_after: 6s}\n", `t.yaml:2: steps[0].reset_after: 6s is after elapsed 5s (the answer would be complete before the reset)`},
	{"reset at zero", "steps:\n  - {reset_after: 0}\n", `t.yaml:2: steps[0].reset_after: must be positive (a connection that never opens is conn_error: true)`},
	{"hang with elapsed", "steps:\n  - hang: true\n    elapsed: 3s\n", `t.yaml:3: steps[0].elapsed: not allowed with hang: true (a hang never ends; use reset_after to drop the connection)`},
	{"hang with status", "steps:\n  - {hang: true, status: 503}\n", `t.yaml:2: steps[0].status: not allowed with hang: true (a hang never ends; use reset_after to drop the connection)`},
	{"conn error with wait", "steps:\n  - conn_error: true\n    wait: 1s\n", `t.yaml:3: steps[0].wait: not allowed with conn_error: true (a refused connection has no timing or answer)`},
	{"then unknown", "then: forever\nsteps:\n  - wait: 1s\n", `t.yaml:1: then: unknown value "forever" (want loop or last)`},
	{"name list", "name: [a]\nsteps:\n  - wait: 1s\n", `t.yaml:1: name: want a string, got a list`},
	{"model control char", "model: \"a\\tb\"\nsteps:\n  - wait: 1s\n", `t.yaml:1: model: contains a control character or invalid UTF-8`},
	{"steps missing", "name: x\n", `t.yaml:1: steps: missing (a script needs at least one step)`},
	{"steps empty", "name: x\nsteps: []\n", `t.yaml:2: steps: empty (a script needs at least one step)`},
	{"steps null", "name: x\nsteps:\n", `t.yaml:2: steps: want a list of steps, got nothing`},
	{"steps mapping", "steps:\n  wait: 1s\n", `t.yaml:2: steps: want a list of steps, got a mapping`},
	{"step scalar", "steps:\n  - wait: 1s\n  - 3\n", `t.yaml:3: steps[1]: want a mapping of wait, ttfb, elapsed, rate, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, usage, status, retry_after, ratelimit_remaining_requests, ratelimit_remaining_tokens, ratelimit_reset, error, incomplete, hang, reset_after, conn_error, repeat, got "3"`},
	{"key not a word", "steps:\n  - {[a]: 1}\n", `t.yaml:2: steps[0]: a key must be a plain word, got a list`},
	{"top level list", "- wait: 1s\n", `t.yaml:1: want a mapping with a steps list, got a list`},
	{"top level scalar", "hello\n", `t.yaml:1: want a mapping with a steps list, got "hello"`},
	{"empty file", "", `t.yaml:1: empty script (want a mapping with a steps list)`},
	{"only comments", "# nothing yet\n", `t.yaml:1: empty script (want a mapping with a steps list)`},
	{"two documents", "steps: [{wait: 1s}]\n---\nsteps: []\n", `t.yaml:2: more than one YAML document (a script is one document)`},
	{"bad yaml", "steps:\n  - {wait: 1s\n  - wait: 2s\n", `t.yaml:2: not valid YAML: did not find expected ',' or '}'`},
	{"bad yaml later", "name: x\nmodel: y\nsteps:\n  - {wait: 1s}\n  - {wait: 1s\n  - wait: 2s\n", `t.yaml:5: not valid YAML: did not find expected ',' or '}'`},
	{"bad yaml first line", "steps: [\n", `t.yaml:2: not valid YAML: did not find expected node content`},
	{"bad yaml indent", "name: x\n model: y\n", `t.yaml:2: not valid YAML: mapping values are not allowed in this context`},
	{"bad yaml unterminated", "name: x\nmodel: \"abc\n", `t.yaml:2: not valid YAML: found unexpected end of stream`},
	{"bad yaml tab", "steps:\n\t- wait: 1s\n", `t.yaml:2: not valid YAML: found character that cannot start any token`},
	{"unknown anchor", "steps:\n  - *nope\n", `t.yaml:2: not valid YAML: unknown anchor 'nope' referenced`},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range parseErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse([]byte(tc.src), "t.yaml")
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Equal(t, tc.want, err.Error())
			var e *Error
			require.True(t, errors.As(err, &e))
			assert.Equal(t, "t.yaml", e.File)
			assert.Positive(t, e.Line)
		})
	}
}

func TestParseDurations(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want time.Duration
	}{
		{"1.2s", 1200 * time.Millisecond},
		{"1500ms", 1500 * time.Millisecond},
		{"1m30s", 90 * time.Second},
		{"1.2", 1200 * time.Millisecond},
		{"2", 2 * time.Second},
		{"0", 0},
		{"0.0005", 500 * time.Microsecond},
		{".5", 500 * time.Millisecond},
		{"+3", 3 * time.Second},
		{"1e1", 10 * time.Second},
		{`"1.5s"`, 1500 * time.Millisecond},
		{`'250ms'`, 250 * time.Millisecond},
		{"24h", 24 * time.Hour},
	} {
		t.Run(tc.src, func(t *testing.T) {
			s, err := Parse([]byte("steps:\n  - wait: "+tc.src+"\n"), "t.yaml")
			require.NoError(t, err)
			assert.Equal(t, tc.want, s.PlanFor(0).Wait)
		})
	}
}

func TestParseStepDefaults(t *testing.T) {
	s, err := Parse([]byte(`
steps:
  - {}
  - {wait: 1s}
  - {wait: 0.5s, rate: 200, completion_tokens: 300}
  - {wait: 1s, reset_after: 3s, completion_tokens: 90}
  - {hang: true}
  - {hang: true, ttfb: 0.3s, wait: 0.9s, prompt_tokens: 10}
  - {conn_error: true, repeat: 2}
  - {status: 429, retry_after: 0, usage: false, error: rate_limit_exceeded}
  - {status: 200, error: overloaded_error, elapsed: 2s}
`), "dir/defaults.yaml")
	require.NoError(t, err)
	assert.Equal(t, "defaults", s.Name(), "the name defaults to the file's base name")
	assert.Equal(t, "", s.Model())
	assert.Equal(t, Loop, s.Then())
	assert.Equal(t, 9, s.Steps())
	assert.Equal(t, 10, s.Len())

	plans := make([]seat.Plan, s.Len())
	for i := range plans {
		plans[i] = s.PlanFor(i)
	}
	sec := time.Second
	ms := time.Millisecond
	assert.Equal(t, seat.Plan{Status: 200}, plans[0])
	assert.Equal(t, seat.Plan{TTFB: sec, Wait: sec, Elapsed: sec, Status: 200}, plans[1], "ttfb and elapsed default to wait")
	assert.Equal(t, seat.Plan{TTFB: 500 * ms, Wait: 500 * ms, Elapsed: 2 * sec, Status: 200, CompletionTokens: 300}, plans[2], "elapsed = wait + tokens/rate")
	assert.Equal(t, seat.Plan{TTFB: sec, Wait: sec, Elapsed: 3 * sec, ResetAfter: 3 * sec, Status: 200, CompletionTokens: 90}, plans[3], "a reset step with no end ends at the reset")
	assert.Equal(t, seat.Plan{TTFB: Never, Wait: Never, Hang: true, Status: 200}, plans[4], "a hang with no wait never sends anything")
	assert.Equal(t, seat.Plan{TTFB: 300 * ms, Wait: 900 * ms, Hang: true, Status: 200, PromptTokens: 10}, plans[5])
	assert.Equal(t, seat.Plan{ConnError: true}, plans[6])
	assert.Equal(t, plans[6], plans[7])
	assert.Equal(t, seat.Plan{Status: 429, HasRetryAfter: true, NoUsage: true, ErrorCode: "rate_limit_exceeded"}, plans[8])
	assert.Equal(t, seat.Plan{Elapsed: 2 * sec, Status: 200, ErrorCode: "overloaded_error"}, plans[9])
}

func TestParseNamesAndAliases(t *testing.T) {
	s, err := Parse([]byte(`
name: my-seat
model: gpt-4o-mini
then: last
ok: &ok {wait: 0.5s, elapsed: 2s}
`), "x.yaml")
	require.Error(t, err, "unknown top-level keys are refused, even as anchor holders")
	assert.Nil(t, s)

	s, err = Parse([]byte(`
name: my-seat
model: gpt-4o-mini
then: last
steps:
  - &ok {wait: 0.5s, elapsed: 2s}
  - {status: 503, elapsed: 0.1s}
  - *ok
`), "x.yaml")
	require.NoError(t, err)
	assert.Equal(t, "my-seat", s.Name())
	assert.Equal(t, "gpt-4o-mini", s.Model())
	assert.Equal(t, Last, s.Then())
	assert.Equal(t, "last", s.Then().String())
	assert.Equal(t, s.PlanFor(0), s.PlanFor(2), "an alias repeats a step")
}

func TestLoad(t *testing.T) {
	s, err := Load("../../testdata/seats/bad-day.yaml")
	require.NoError(t, err)
	assert.Equal(t, "bad-day", s.Name())
	assert.Equal(t, 12, s.Len())

	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err = Load(missing)
	require.Error(t, err)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Equal(t, missing+": cannot read script: no such file or directory", err.Error())
}

// Every script in testdata/seats parses.
func TestTestdataScriptsParse(t *testing.T) {
	files, err := filepath.Glob("../../testdata/seats/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, s.Len(), 1)
		})
	}
}

// A step's token parts are reported only when given (a given 0 is
// reported), and follow the counts they are part of through Resolve: an
// error answer bills no prompt and reports no part of it.
func TestParseTokenParts(t *testing.T) {
	s, err := Parse([]byte(`
steps:
  - {wait: 1s, elapsed: 2s, prompt_tokens: 4000, completion_tokens: 300, cached_tokens: 3968, cache_write_tokens: 0, reasoning_tokens: 256}
  - {wait: 1s, elapsed: 2s, prompt_tokens: 4000, completion_tokens: 300}
  - {status: 503, elapsed: 1s, prompt_tokens: 4000, cached_tokens: 10}
`), "parts.yaml")
	require.NoError(t, err)
	p := s.PlanFor(0)
	assert.Equal(t, [3]int64{3968, 0, 256}, [3]int64{p.CachedTokens, p.CacheWriteTokens, p.ReasoningTokens})
	assert.Equal(t, [3]bool{true, true, true}, [3]bool{p.HasCached, p.HasCacheWrite, p.HasReasoning})
	o := seat.Resolve(p, 0, 0, 0)
	assert.Equal(t, [3]int64{3968, 0, 256}, [3]int64{o.CachedTokens, o.CacheWriteTokens, o.ReasoningTokens})
	assert.Equal(t, [3]bool{true, true, true}, [3]bool{o.HasCached, o.HasCacheWrite, o.HasReasoning})

	o = seat.Resolve(s.PlanFor(1), 0, 0, 0)
	assert.Equal(t, [3]bool{}, [3]bool{o.HasCached, o.HasCacheWrite, o.HasReasoning}, "not given: not reported")

	o = seat.Resolve(s.PlanFor(2), 0, 0, 0)
	assert.Equal(t, int64(0), o.PromptTokens)
	assert.False(t, o.HasCached, "an error answer reports no part of a prompt it did not bill")
}

// An incomplete step streams to its end and ends short: the outcome
// incomplete, its reason the error code, billed for its tokens; cut
// before its end by a limit, it is that limit's outcome.
func TestParseIncomplete(t *testing.T) {
	s, err := Parse([]byte(`
steps:
  - {wait: 1s, elapsed: 3s, prompt_tokens: 400, completion_tokens: 256, incomplete: max_output_tokens}
`), "inc.yaml")
	require.NoError(t, err)
	p := s.PlanFor(0)
	assert.Equal(t, "max_output_tokens", p.Incomplete)
	o := seat.Resolve(p, 0, 0, 0)
	assert.Equal(t, admit.Incomplete, o.Outcome)
	assert.Equal(t, "max_output_tokens", o.ErrorCode)
	assert.Equal(t, admit.Billable, o.Billing)
	assert.Equal(t, [2]int64{400, 256}, [2]int64{o.PromptTokens, o.CompletionTokens})
	assert.Equal(t, time.Second, o.Wait)
	o = seat.Resolve(p, 2*time.Second, 0, 0)
	assert.Equal(t, admit.Timeout, o.Outcome, "the hard timeout cut it before its end")
}
