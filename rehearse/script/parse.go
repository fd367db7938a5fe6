package script

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Limits on a script's shape; a step's numbers are bounded by
// admit.MaxStep, MaxStepTokens and MaxTokenRate, as a latency model's are.
const (
	maxRepeat = math.MaxInt32
	maxTotal  = math.MaxInt32 // expanded steps, so Len fits an int everywhere
	maxText   = 200
)

// Error is a script error. Line is 1-based; 0 when the error is about the
// file as a whole (it could not be read). Key is the path to the value at
// fault, such as steps[3].wait (steps are counted from 0).
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
	Err  error // the underlying error, if any
}

func (e *Error) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		s += ": " + e.Key
	}
	return s + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

var (
	topKeys  = []string{"name", "model", "then", "steps"}
	stepKeys = []string{
		"wait", "ttfb", "elapsed", "rate", "prompt_tokens", "completion_tokens",
		"cached_tokens", "cache_write_tokens", "reasoning_tokens", "usage", "status", "retry_after",
		"ratelimit_remaining_requests", "ratelimit_remaining_tokens", "ratelimit_reset", "error", "incomplete", "hang", "reset_after",
		"conn_error", "repeat",
	}
	codeRE = lazyRegexp(`^[A-Za-z0-9_.\-]{1,64}$`)
)

// lazyRegexp compiles expr on first use, so a run that parses no script
// (most commands) pays nothing for it at start-up.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// Parse parses a script. name is the file name errors start with.
func Parse(data []byte, name string) (*Script, error) {
	root, err := decode(data, name)
	if err != nil {
		return nil, err
	}
	p := &parser{file: name}
	return p.script(root)
}

// decode reads exactly one YAML document into a node tree, turning the
// YAML library's errors (and, defensively, its panics) into file:line ones.
func decode(data []byte, name string) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, &Error{File: name, Line: 1, Msg: fmt.Sprintf("not valid YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Line: 1, Msg: "empty script (want a mapping with a steps list)"}
		}
		return nil, yamlError(name, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: name, Line: max(extra.Line, 1), Msg: "more than one YAML document (a script is one document)"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(name, data, err)
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, &Error{File: name, Line: 1, Msg: "empty script (want a mapping with a steps list)"}
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

var (
	yamlLineRE   = lazyRegexp(`^(?:yaml: )?line ([0-9]+): (.*)$`)
	yamlAnchorRE = lazyRegexp(`^(?:yaml: )?unknown anchor '(.*)' referenced$`)
	// The YAML parser (unlike its scanner) reports 0-based lines.
	yamlParserProblems = map[string]bool{
		"did not find expected <stream-start>":   true,
		"did not find expected <document start>": true,
		"did not find expected node content":     true,
		"did not find expected '-' indicator":    true,
		"did not find expected key":              true,
		"did not find expected ',' or ']'":       true,
		"did not find expected ',' or '}'":       true,
		"found undefined tag handle":             true,
		"found duplicate %YAML directive":        true,
		"found incompatible YAML document":       true,
		"found duplicate %TAG directive":         true,
	}
)

// yamlError rewrites "yaml: line 3: did not find…" as "file:N: not valid
// YAML: did not find…", with N the 1-based line. The library omits the
// line for problems on the first one, and names none for an unknown
// anchor, so that one is looked up in the text.
func yamlError(name string, data []byte, err error) error {
	msg := err.Error()
	if m := yamlLineRE().FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if yamlParserProblems[m[2]] {
			line++
		}
		return &Error{File: name, Line: max(line, 1), Msg: "not valid YAML: " + m[2], Err: err}
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 1
	if m := yamlAnchorRE().FindStringSubmatch(err.Error()); m != nil {
		line = lineOf(data, "*"+m[1])
	}
	return &Error{File: name, Line: line, Msg: "not valid YAML: " + msg, Err: err}
}

// lineOf is the 1-based line where needle first occurs, or 1.
func lineOf(data []byte, needle string) int {
	i := bytes.Index(data, []byte(needle))
	if i < 0 {
		return 1
	}
	return 1 + bytes.Count(data[:i], []byte("\n"))
}

type parser struct {
	file string
}

func (p *parser) errf(n *yaml.Node, key, format string, args ...any) error {
	line := 1
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	return &Error{File: p.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// pair is one key of a mapping, with its nodes for error positions.
type pair struct {
	key  string
	kn   *yaml.Node // the key, for unknown/duplicate-key errors
	node *yaml.Node // the value
}

// mapping checks n is a mapping of known, distinct plain keys.
func (p *parser) mapping(n *yaml.Node, where string, known []string) ([]pair, error) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, p.errf(n, where, "want a mapping of %s, got %s", strings.Join(known, ", "), describe(n))
	}
	pairs := make([]pair, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := deref(n.Content[i]), n.Content[i+1]
		if kn == nil || kn.Kind != yaml.ScalarNode {
			return nil, p.errf(kn, where, "a key must be a plain word, got %s", describe(kn))
		}
		key := kn.Value
		path := join(where, key)
		if key == "<<" {
			return nil, p.errf(kn, path, "merge keys are not supported (write the keys out, or use repeat)")
		}
		if !slices.Contains(known, key) {
			msg := fmt.Sprintf("unknown key %q", key)
			if s, ok := admit.Closest(key, known); ok {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			} else {
				msg += fmt.Sprintf(" (want one of %s)", strings.Join(known, ", "))
			}
			return nil, p.errf(kn, path, "%s", msg)
		}
		for _, q := range pairs {
			if q.key == key {
				return nil, p.errf(kn, path, "duplicate key (first given on line %d)", q.kn.Line)
			}
		}
		pairs = append(pairs, pair{key: key, kn: kn, node: deref(vn)})
	}
	return pairs, nil
}

func (p *parser) script(root *yaml.Node) (*Script, error) {
	root = deref(root)
	if root == nil || root.Kind != yaml.MappingNode {
		return nil, p.errf(root, "", "want a mapping with a steps list, got %s", describe(root))
	}
	pairs, err := p.mapping(root, "", topKeys)
	if err != nil {
		return nil, err
	}
	s := &Script{name: baseName(p.file)}
	var stepsNode *yaml.Node
	for _, kv := range pairs {
		switch kv.key {
		case "name":
			if s.name, err = p.text(kv.node, "name"); err != nil {
				return nil, err
			}
		case "model":
			if s.model, err = p.text(kv.node, "model"); err != nil {
				return nil, err
			}
		case "then":
			t, err := p.text(kv.node, "then")
			if err != nil {
				return nil, err
			}
			switch t {
			case "loop":
				s.then = Loop
			case "last":
				s.then = Last
			default:
				return nil, p.errf(kv.node, "then", "unknown value %q (want loop or last)", t)
			}
		case "steps":
			stepsNode = kv.node
			if stepsNode == nil {
				stepsNode = kv.kn
			}
		}
	}
	if stepsNode == nil {
		return nil, p.errf(root, "steps", "missing (a script needs at least one step)")
	}
	if stepsNode.Kind != yaml.SequenceNode {
		return nil, p.errf(stepsNode, "steps", "want a list of steps, got %s", describe(stepsNode))
	}
	if len(stepsNode.Content) == 0 {
		return nil, p.errf(stepsNode, "steps", "empty (a script needs at least one step)")
	}
	s.plans = make([]seat.Plan, 0, len(stepsNode.Content))
	s.ends = make([]int, 0, len(stepsNode.Content))
	for i, n := range stepsNode.Content {
		plan, repeat, err := p.step(n, fmt.Sprintf("steps[%d]", i))
		if err != nil {
			return nil, err
		}
		if repeat > maxTotal-s.total {
			return nil, p.errf(deref(n), fmt.Sprintf("steps[%d].repeat", i), "the script expands to more than %d calls", maxTotal)
		}
		s.total += repeat
		s.plans = append(s.plans, plan)
		s.ends = append(s.ends, s.total)
	}
	return s, nil
}

// fields reads one step's values, keeping the first error: once a read
// or a check failed, later reads give their defaults and later failures
// are dropped, so err is what a reader stopping at once would report.
type fields struct {
	p     *parser
	where string
	at    map[string]*yaml.Node
	err   error
}

func (f *fields) has(k string) bool   { return f.at[k] != nil }
func (f *fields) key(k string) string { return f.where + "." + k }

// fail records a failure of key k's value, unless one came first.
func (f *fields) fail(k, format string, args ...any) {
	if f.err == nil {
		f.err = f.p.errf(f.at[k], f.key(k), format, args...)
	}
}

// read runs get on key k when it is given and nothing failed yet.
func read[T any](f *fields, k string, def T, get func(*yaml.Node, string) (T, error)) T {
	if f.err != nil || !f.has(k) {
		return def
	}
	v, err := get(f.at[k], f.key(k))
	if err != nil {
		f.err = err
		return def
	}
	return v
}

func (f *fields) dur(k string, def time.Duration) time.Duration { return read(f, k, def, f.p.duration) }
func (f *fields) boolean(k string, def bool) bool               { return read(f, k, def, f.p.boolean) }
func (f *fields) text(k string) string                          { return read(f, k, "", f.p.text) }

func (f *fields) count(k string, def, lo, hi int64) int64 {
	return read(f, k, def, func(n *yaml.Node, key string) (int64, error) { return f.p.integer(n, key, lo, hi) })
}

// step parses one step into a plan and its repeat count.
func (p *parser) step(n *yaml.Node, where string) (seat.Plan, int, error) {
	var plan seat.Plan
	pairs, err := p.mapping(n, where, stepKeys)
	if err != nil {
		return plan, 0, err
	}
	f := &fields{p: p, where: where, at: make(map[string]*yaml.Node, len(pairs))}
	for _, kv := range pairs {
		f.at[kv.key] = kv.node
		if kv.node == nil {
			f.at[kv.key] = kv.kn
		}
	}
	repeat := f.count("repeat", 1, 1, maxRepeat)
	if plan.ConnError = f.boolean("conn_error", false); plan.ConnError {
		// Nothing reaches the provider: no timing, no answer.
		for _, kv := range pairs {
			if kv.key != "conn_error" && kv.key != "repeat" && f.err == nil {
				f.err = p.errf(kv.kn, f.key(kv.key), "not allowed with conn_error: true (a refused connection has no timing or answer)")
			}
		}
		return plan, int(repeat), f.err
	}
	if plan.Hang = f.boolean("hang", false); plan.Hang {
		for _, k := range []string{"elapsed", "rate", "status", "retry_after", "error", "incomplete"} {
			if f.has(k) {
				f.fail(k, "not allowed with hang: true (a hang never ends; use reset_after to drop the connection)")
			}
		}
	}

	// Timing.
	var wait time.Duration
	if plan.Hang {
		wait = Never
	}
	wait = f.dur("wait", wait)
	ttfb := f.dur("ttfb", wait)
	if ttfb > wait {
		f.fail("ttfb", "%s is after wait %s (headers come before the first content)", ttfb, wait)
	}
	plan.PromptTokens = f.count("prompt_tokens", 0, 0, admit.MaxStepTokens)
	plan.CompletionTokens = f.count("completion_tokens", 0, 0, admit.MaxStepTokens)
	// The parts a provider reports inside the counts (docs/log.md):
	// cached and cache-written input within prompt_tokens, reasoning
	// within completion_tokens.
	part := func(k string, n *int64, hasIt *bool, whole int64, inside string) {
		if *hasIt = f.has(k); *hasIt {
			if *n = f.count(k, 0, 0, admit.MaxStepTokens); *n > whole {
				f.fail(k, "%d is more than %s (%d): it is a part of it", *n, inside, whole)
			}
		}
	}
	part("cached_tokens", &plan.CachedTokens, &plan.HasCached, plan.PromptTokens, "prompt_tokens")
	part("cache_write_tokens", &plan.CacheWriteTokens, &plan.HasCacheWrite, plan.PromptTokens-plan.CachedTokens, "prompt_tokens less cached_tokens")
	part("reasoning_tokens", &plan.ReasoningTokens, &plan.HasReasoning, plan.CompletionTokens, "completion_tokens")
	if f.has("reset_after") {
		if plan.ResetAfter = f.dur("reset_after", 0); plan.ResetAfter == 0 {
			f.fail("reset_after", "must be positive (a connection that never opens is conn_error: true)")
		}
	}
	elapsed := wait
	switch {
	case plan.Hang:
		elapsed = 0
	case f.has("elapsed") && f.has("rate"):
		f.fail("rate", "give elapsed or rate, not both")
	case f.has("elapsed"):
		if elapsed = f.dur("elapsed", wait); elapsed < wait {
			f.fail("elapsed", "%s is before wait %s (elapsed runs from submit to the last byte)", elapsed, wait)
		}
	case f.has("rate"):
		if rate := read(f, "rate", 0, p.rate); rate > 0 {
			stream := float64(plan.CompletionTokens) / rate * float64(time.Second)
			if stream > float64(admit.MaxStep-wait) {
				f.fail("rate", "wait + completion_tokens/rate is longer than %s", admit.MaxStep)
			}
			elapsed = wait + time.Duration(math.Round(stream))
		}
	case plan.ResetAfter > wait:
		elapsed = plan.ResetAfter // a reset step with no end of its own
	}
	if !plan.Hang && plan.ResetAfter > elapsed {
		f.fail("reset_after", "%s is after elapsed %s (the answer would be complete before the reset)", plan.ResetAfter, elapsed)
	}
	plan.TTFB, plan.Wait, plan.Elapsed = ttfb, wait, elapsed

	// The answer.
	plan.NoUsage = !f.boolean("usage", true)
	plan.Status = 200
	if st := f.count("status", 200, 100, 599); st != 200 && st < 400 {
		f.fail("status", "want 200 or an error status 400-599, got %d", st)
	} else {
		plan.Status = int(st)
	}
	plan.HasRetryAfter = f.has("retry_after")
	plan.RetryAfter = f.dur("retry_after", 0)
	// The provider's rate-limit state on the answer (docs/log.md).
	rl := &plan.RateLimit
	rl.HasRequests, rl.RemainingRequests = f.has("ratelimit_remaining_requests"), f.count("ratelimit_remaining_requests", 0, 0, admit.MaxStepTokens)
	rl.HasTokens, rl.RemainingTokens = f.has("ratelimit_remaining_tokens"), f.count("ratelimit_remaining_tokens", 0, 0, admit.MaxStepTokens)
	rl.HasReset, rl.Reset = f.has("ratelimit_reset"), f.dur("ratelimit_reset", 0)
	if f.has("error") {
		if plan.ErrorCode = f.text("error"); !codeRE().MatchString(plan.ErrorCode) {
			f.fail("error", "want a provider error code such as context_length_exceeded (letters, digits, _ . -), got %q", plan.ErrorCode)
		}
	}
	if f.has("incomplete") {
		if plan.Incomplete = f.text("incomplete"); !codeRE().MatchString(plan.Incomplete) {
			f.fail("incomplete", "want the reason the answer ended short, such as max_output_tokens or content_filter, got %q", plan.Incomplete)
		}
		for _, k := range []string{"status", "error", "reset_after"} {
			if f.has(k) {
				f.fail("incomplete", "not allowed with %s (an incomplete answer is a 200 that streams to its end)", k)
			}
		}
	}
	if f.err != nil {
		return seat.Plan{}, 0, f.err
	}
	return plan, int(repeat), nil
}

// scalar checks n is a scalar with a value, of a plain YAML type.
func (p *parser) scalar(n *yaml.Node, key, want string) (string, error) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", p.errf(n, key, "want %s, got %s", want, describe(n))
	}
	switch n.ShortTag() {
	case "!!null":
		return "", p.errf(n, key, "missing value (want %s)", want)
	case "!!str", "!!int", "!!float", "!!bool":
		return strings.TrimSpace(n.Value), nil
	default:
		return "", p.errf(n, key, "unsupported tag %s (want %s)", n.Tag, want)
	}
}

func (p *parser) text(n *yaml.Node, key string) (string, error) {
	v, err := p.scalar(n, key, "a string")
	if err != nil {
		return "", err
	}
	if len(v) > maxText {
		return "", p.errf(n, key, "longer than %d bytes", maxText)
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return "", p.errf(n, key, "contains a control character or invalid UTF-8")
		}
	}
	return v, nil
}

// duration reads Go syntax ("1.5s", "1500ms") or a bare number of seconds.
func (p *parser) duration(n *yaml.Node, key string) (time.Duration, error) {
	v, err := p.scalar(n, key, "a duration such as 1.5s, 1500ms or 1.5")
	if err != nil {
		return 0, err
	}
	if n.ShortTag() == "!!bool" {
		return 0, p.errf(n, key, "want a duration such as 1.5s, 1500ms or 1.5, got %q", v)
	}
	d, err := admit.ParseDuration(v)
	if err != nil {
		return 0, p.errf(n, key, "%v", err)
	}
	if d > admit.MaxStep {
		return 0, p.errf(n, key, "duration %q out of range (a scripted step lasts at most %s)", v, admit.MaxStep)
	}
	return d, nil
}

// integer reads a whole number in [lo, hi], as admit reads every count.
func (p *parser) integer(n *yaml.Node, key string, lo, hi int64) (int64, error) {
	v, err := p.scalar(n, key, "a whole number")
	if err != nil {
		return 0, err
	}
	i, err := admit.ParseCount(v)
	switch {
	case err != nil:
		return 0, p.errf(n, key, "%v", err)
	case i > hi:
		return 0, p.errf(n, key, "%s out of range (at most %d)", v, hi)
	case i < lo:
		return 0, p.errf(n, key, "must be at least %d, got %s", lo, v)
	}
	return i, nil
}

// rate reads completion tokens per second: a positive, finite number.
func (p *parser) rate(n *yaml.Node, key string) (float64, error) {
	v, err := p.scalar(n, key, "completion tokens per second")
	if err != nil {
		return 0, err
	}
	f, err := admit.ParseNumber(v)
	switch {
	case err != nil:
		return 0, p.errf(n, key, "%v (want completion tokens per second)", err)
	case f < 0:
		return 0, p.errf(n, key, "must not be negative, got %s", v)
	case f == 0:
		return 0, p.errf(n, key, "must be positive (tokens per second), got %s", v)
	case f > admit.MaxTokenRate:
		return 0, p.errf(n, key, "%s out of range (at most %g)", v, float64(admit.MaxTokenRate))
	}
	return f, nil
}

func (p *parser) boolean(n *yaml.Node, key string) (bool, error) {
	v, err := p.scalar(n, key, "true or false")
	if err != nil {
		return false, err
	}
	switch strings.ToLower(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, p.errf(n, key, "want true or false, got %q", v)
}

// describe names a node's kind for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		return "nothing"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(admit.Shorten(n.Value))
	}
	return "an unexpected node"
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}
