package seat

import (
	"strings"
	"testing"
)

// BenchmarkReadStream is the seat reading one answer's events, without
// the network: the SSE framing and the chunk fields of a 20-chunk OpenAI
// stream with usage (what the proxy benchmark's upstream sends).
//
//	go test -run '^$' -bench ReadStream -benchmem ./rehearse/seat/
func BenchmarkReadStream(b *testing.B) {
	answer := strings.Repeat(`data: {"id":"chatcmpl-retrygate0","object":"chat.completion.chunk","created":1796080514,"model":"gpt-4o-mini","system_fingerprint":"fp_retrygate","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`+"\n\n", 20) +
		`data: {"id":"chatcmpl-retrygate0","object":"chat.completion.chunk","created":1796080514,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":20}}` + "\n\ndata: [DONE]\n\n"
	s := &httpSeat{w: openaiWire{}}
	b.SetBytes(int64(len(answer)))
	b.ReportAllocs()
	for b.Loop() {
		body := &countingReader{r: strings.NewReader(answer)}
		st := &stream{onContent: func() {}}
		if err := s.readStream(body, st); err != nil || !st.done || st.completion != 20 {
			b.Fatalf("err %v done %v completion %d", err, st.done, st.completion)
		}
	}
}
