package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/admit"
)

// stitched runs a first attempt's events and a continuation's through
// one stitch, as the client would get them.
func stitched(s *stitch, first, cont []string) string {
	var b strings.Builder
	for _, ev := range first {
		s.observe([]byte(ev))
		b.WriteString(ev)
	}
	for _, ev := range cont {
		b.Write(s.rewrite([]byte(ev)))
	}
	return b.String()
}

// An OpenAI chat continuation goes on under the first chunk's id and
// model, without its role chunk, and its usage adds the cut attempt's.
func TestStitchOpenAIChat(t *testing.T) {
	s := &stitch{}
	first := []string{
		"data: {\"id\":\"c1\",\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
		"data: {\"id\":\"c1\",\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello \"},\"finish_reason\":null}]}\n\n",
	}
	require.Equal(t, "", string(s.text))
	cont := []string{
		"data: {\"id\":\"c2\",\"model\":\"m2\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
		": keep-alive\n\n",
		"data: {\"id\":\"c2\",\"model\":\"m2\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"world\"},\"finish_reason\":null}]}\n\n",
		"data: {\"id\":\"c2\",\"model\":\"m2\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"id\":\"c2\",\"model\":\"m2\",\"choices\":[],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":3,\"total_tokens\":17}}\n\n",
		"data: [DONE]\n\n",
	}
	s.observe([]byte(first[0]))
	s.observe([]byte(first[1]))
	assert.Equal(t, "Hello ", string(s.text), "the text the client has: the prefill")
	s = &stitch{}
	out := stitched(s, first, nil)
	s.prior = admit.Usage{Prompt: 10, Completion: 2}
	for _, ev := range cont {
		out += string(s.rewrite([]byte(ev)))
	}
	assert.Equal(t, "Hello world", string(s.text))
	var ids, models, roles, finishes []string
	var usage map[string]int64
	for _, ev := range strings.Split(strings.TrimSpace(out), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var e struct {
			ID, Model string
			Choices   []struct {
				Delta struct {
					Role string `json:"role"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]int64 `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &e), data)
		ids, models = append(ids, e.ID), append(models, e.Model)
		for _, c := range e.Choices {
			if c.Delta.Role != "" {
				roles = append(roles, c.Delta.Role)
			}
			if c.Finish != nil {
				finishes = append(finishes, *c.Finish)
			}
		}
		if e.Usage != nil {
			usage = e.Usage
		}
	}
	assert.Equal(t, []string{"c1", "c1", "c1", "c1", "c1"}, ids, "the first chunk's id throughout")
	assert.Equal(t, []string{"m1", "m1", "m1", "m1", "m1"}, models)
	assert.Equal(t, []string{"assistant"}, roles, "one role chunk: the first's")
	assert.Equal(t, []string{"stop"}, finishes)
	assert.Equal(t, map[string]int64{"prompt_tokens": 24, "completion_tokens": 5, "total_tokens": 29}, usage, "both attempts added up")
	assert.Equal(t, 1, strings.Count(out, "data: [DONE]"))
	assert.Contains(t, out, ": keep-alive\n\n", "an event with no data passes")
}

// An Anthropic continuation drops its message_start, ping and first
// block's start (the client's are open), and its message_delta's usage
// adds the cut attempt's and its own input.
func TestStitchAnthropic(t *testing.T) {
	s := &stitch{anthropic: true}
	first := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello \"}}\n\n",
	}
	cont := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"usage\":{\"input_tokens\":14,\"output_tokens\":1}}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		"event: ping\ndata: {\"type\":\"ping\"}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"world\"}}\n\n",
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
	out := stitched(s, first, nil)
	s.prior = admit.Usage{Prompt: 10, Completion: 2}
	for _, ev := range cont {
		out += string(s.rewrite([]byte(ev)))
	}
	assert.Equal(t, "Hello world", string(s.text))
	assert.Equal(t, 1, strings.Count(out, "event: message_start"))
	assert.Equal(t, 1, strings.Count(out, "event: content_block_start"))
	assert.Equal(t, 0, strings.Count(out, "event: ping"))
	assert.Equal(t, 1, strings.Count(out, "event: message_stop"))
	_, data := sseData([]byte(cont[5]))
	require.NotEmpty(t, data)
	i := strings.Index(out, "event: message_delta")
	require.GreaterOrEqual(t, i, 0)
	_, data = sseData([]byte(out[i : strings.Index(out[i:], "\n\n")+i+2]))
	var e struct {
		Usage map[string]int64 `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(data, &e))
	assert.Equal(t, map[string]int64{"input_tokens": 24, "output_tokens": 5}, e.Usage, "both attempts added up")
}

// The prefill is the text so far as a trailing assistant message;
// Anthropic's without trailing white space, which it refuses.
func TestWithPrefill(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	var got struct {
		Model    string
		Messages []map[string]string
	}
	require.NoError(t, json.Unmarshal(withPrefill(body, "Hello ", false), &got))
	assert.Equal(t, "m", got.Model)
	assert.Equal(t, []map[string]string{{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello "}}, got.Messages)
	require.NoError(t, json.Unmarshal(withPrefill(body, "Hello \n", true), &got))
	assert.Equal(t, "Hello", got.Messages[1]["content"])
	assert.Nil(t, withPrefill([]byte(`{"model":"m","input":"hi"}`), "x", false), "no messages: nothing to continue")
}

// Anthropic's prefill goes without the white space the client's text
// ends in; the continuation's own leading white space is then not sent
// twice (a delta of white space alone is dropped).
func TestStitchAnthropicTrimmedPrefill(t *testing.T) {
	s := &stitch{anthropic: true, text: []byte("hello ")}
	var got struct{ Messages []map[string]string }
	require.NoError(t, json.Unmarshal(s.prefill([]byte(`{"messages":[{"role":"user","content":"hi"}]}`)), &got))
	assert.Equal(t, "hello", got.Messages[1]["content"])
	out := string(s.rewrite([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" \"}}\n\n")))
	assert.Empty(t, out, "white space alone: dropped")
	out = string(s.rewrite([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" world \"}}\n\n")))
	_, data := sseData([]byte(out))
	assert.JSONEq(t, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"world "}}`, string(data))
	assert.Equal(t, "hello world ", string(s.text))
}

// A stream that carried a tool call, a second choice or a block that is
// not text is not one text a prefill continues.
func TestStitchOtherThanText(t *testing.T) {
	for _, c := range []struct {
		anthropic bool
		ev        string
	}{
		{false, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]}}]}\n\n"},
		{false, "data: {\"id\":\"c\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n"},
		{true, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\"}}\n\n"},
	} {
		s := &stitch{anthropic: c.anthropic}
		s.observe([]byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"))
		require.False(t, s.other)
		s.observe([]byte(c.ev))
		assert.True(t, s.other, c.ev)
	}
}
