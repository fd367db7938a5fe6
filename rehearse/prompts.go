package rehearse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// Prompt is one request of a prompt set (--prompts): the text, as a
// prompt or as chat messages, the completion tokens to ask for (0: the
// run's --max-tokens) and tags that rows carry. Rows keep its PromptSHA
// and tags, never the text.
type Prompt struct {
	Prompt    string
	Messages  []seat.Message
	MaxTokens int
	Tags      []string
}

// Prompt orders: which prompt of the set job k sends.
const (
	OrderRandom = "random" // drawn with the run's seed, independently per job
	OrderSeq    = "seq"    // the file's order, from the top again after the last
)

// PromptOrders are the --prompt-order values.
var PromptOrders = []string{OrderRandom, OrderSeq}

// Limits of a prompt set file.
const (
	MaxPromptSetLine  = 1 << 20 // bytes a line may hold
	MaxPromptSetLines = 100_000
	MaxPromptSetBytes = 64 << 20 // the whole set's text, held in memory
	MaxPromptTags     = 16
	MaxPromptTagLen   = 64
	maxPromptMsgs     = 1024
)

var roles = map[string]bool{"system": true, "user": true, "assistant": true}

// LoadPrompts reads a prompt set: JSONL, one request a line, each with
// prompt (a string) or messages ([{role, content}]), optional max_tokens
// (1..maxTokens) and optional tags (short strings without commas). Blank
// lines are skipped. Errors name the file, the line and the field.
func LoadPrompts(path string, maxTokens int) ([]Prompt, error) {
	fh, err := ledgerfile.OpenInput(path, "prompt set")
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return ReadPrompts(fh, path, maxTokens)
}

// ReadPrompts is LoadPrompts over a reader; name is the file in errors.
func ReadPrompts(r io.Reader, name string, maxTokens int) ([]Prompt, error) {
	lr := ledgerfile.NewLineReader(r, name, MaxPromptSetLine)
	var out []Prompt
	total := 0
	for {
		line, no, _, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if total += len(line); total > MaxPromptSetBytes {
			return nil, fmt.Errorf("%s:%d: the set passes %d MiB", name, no, MaxPromptSetBytes>>20)
		}
		if len(out) == MaxPromptSetLines {
			return nil, fmt.Errorf("%s:%d: more than %d prompts", name, no, MaxPromptSetLines)
		}
		p, err := parsePromptLine(line, maxTokens)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, no, err)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts (want one JSON object a line with prompt or messages)", name)
	}
	return out, nil
}

func parsePromptLine(line []byte, maxTokens int) (Prompt, error) {
	var raw struct {
		Prompt    *string          `json:"prompt"`
		Messages  *json.RawMessage `json:"messages"`
		MaxTokens *json.RawMessage `json:"max_tokens"`
		Tags      *json.RawMessage `json:"tags"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return Prompt{}, fmt.Errorf("%s: want %s", te.Field, "a string")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return Prompt{}, fmt.Errorf("unknown field %s (want prompt, messages, max_tokens, tags)", f)
		}
		return Prompt{}, fmt.Errorf("not a JSON object: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return Prompt{}, errors.New("more than one JSON value on the line")
	}
	var p Prompt
	switch {
	case raw.Prompt != nil && raw.Messages != nil:
		return p, errors.New("prompt and messages: give one or the other")
	case raw.Prompt != nil:
		if strings.TrimSpace(*raw.Prompt) == "" {
			return p, errors.New("prompt: empty")
		}
		p.Prompt = *raw.Prompt
	case raw.Messages != nil:
		if err := json.Unmarshal(*raw.Messages, &p.Messages); err != nil {
			return p, errors.New("messages: want an array of {\"role\": …, \"content\": …}")
		}
		if len(p.Messages) == 0 || len(p.Messages) > maxPromptMsgs {
			return p, fmt.Errorf("messages: want 1 to %d messages, got %d", maxPromptMsgs, len(p.Messages))
		}
		user := false
		for i, m := range p.Messages {
			if !roles[m.Role] {
				return p, fmt.Errorf("messages[%d].role: %q is not system, user or assistant", i, admit.Shorten(m.Role))
			}
			if m.Content == "" {
				return p, fmt.Errorf("messages[%d].content: empty", i)
			}
			user = user || m.Role == "user"
		}
		if !user {
			return p, errors.New("messages: no user message")
		}
	default:
		return p, errors.New("no prompt or messages")
	}
	if raw.MaxTokens != nil {
		n, err := strconv.ParseInt(string(*raw.MaxTokens), 10, 64)
		if err != nil || n < 1 || n > int64(maxTokens) {
			return p, fmt.Errorf("max_tokens: want a whole number from 1 to %d, got %s", maxTokens, admit.Shorten(string(*raw.MaxTokens)))
		}
		p.MaxTokens = int(n)
	}
	if raw.Tags != nil {
		if err := json.Unmarshal(*raw.Tags, &p.Tags); err != nil {
			return p, errors.New("tags: want an array of strings")
		}
		if len(p.Tags) > MaxPromptTags {
			return p, fmt.Errorf("tags: at most %d, got %d", MaxPromptTags, len(p.Tags))
		}
		for i, t := range p.Tags {
			if t == "" || len(t) > MaxPromptTagLen || strings.ContainsAny(t, ", \t\r\n\"=") {
				return p, fmt.Errorf("tags[%d]: %q: want 1 to %d characters without commas, spaces, quotes or =", i, admit.Shorten(t), MaxPromptTagLen)
			}
		}
	}
	return p, nil
}

// pickPrompt is the prompt index job k (1-based) of n sends: k-1 mod n in
// seq order, else a draw from the seed and k alone, so a job's prompt does
// not depend on which jobs started before it.
func pickPrompt(order string, seed uint64, k, n int) int {
	if n <= 1 {
		return 0
	}
	if order == OrderSeq {
		return (k - 1) % n
	}
	z := seed + uint64(k)*0x9e3779b97f4a7c15 // splitmix64
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	hi, _ := bits.Mul64(z, uint64(n))
	return int(hi)
}
