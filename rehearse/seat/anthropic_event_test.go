package seat

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzAnthropicEvent: any event, or any whole answer, is read without a
// panic; one that does not decode is malformed and adds nothing.
func FuzzAnthropicEvent(f *testing.F) {
	for _, s := range []string{
		anText("hello"), anText("caf\u00e9"),
		`{"type":"message_start","message":{"usage":{"input_tokens":12,"cache_read_input_tokens":9e18,"output_tokens":1}}}`,
		`{"type":"content_block_start","content_block":{"type":"thinking","thinking":"hm"}}`,
		`{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{\"a\""}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":40}}`, `{"type":"message_stop"}`,
		`{"type":"error","error":{"type":"overloaded_error"}}`, `{"type":7}`, `{"delta":"x"}`, `null`,
		`{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":5}}`,
	} {
		f.Add([]byte(s), "")
	}
	f.Fuzz(func(t *testing.T, data []byte, typ string) {
		for _, read := range []func(*stream){
			func(st *stream) { anthropicWire{}.event(typ, data, st) },
			func(st *stream) { anthropicWire{}.whole(data, st) },
		} {
			st := stream{onContent: func() {}}
			read(&st)
			if !json.Valid(data) {
				require.Positive(t, st.bad)
				require.False(t, st.content || st.done || st.failed)
			}
		}
	})
}
