package seat

import (
	"fmt"
	"strings"
	"testing"
)

// refWire reads events with the encoding/json reference decoder of its
// wire (the fuzz tests' readers), for the fast readers' benchmark.
type refWire struct {
	wire
	read func(typ string, data []byte, st *stream)
}

func (w refWire) event(typ string, data []byte, st *stream) { w.read(typ, data, st) }

// realisticStreams are 300-token answers, one token a chunk, as each
// wire format's provider sends them, with usage at the end.
var realisticStreams = func() map[string]string {
	const n = 300
	var chat, anth, olla, resp strings.Builder
	for i := range n {
		fmt.Fprintf(&chat, "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_7fcd609668\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word%d\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", i)
		fmt.Fprintf(&anth, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" word%d\"}}\n\n", i)
		fmt.Fprintf(&olla, "{\"model\":\"llama3.2\",\"created_at\":\"2030-01-01T00:00:00.000000Z\",\"message\":{\"role\":\"assistant\",\"content\":\" word%d\"},\"done\":false}\n", i)
		fmt.Fprintf(&resp, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\" word%d\",\"logprobs\":[]}\n\n", i+4, i)
	}
	chat.WriteString("data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n")
	chat.WriteString("data: " + oaUsage(12, n) + "\n\ndata: [DONE]\n\n")
	anth.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":300}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	olla.WriteString("{\"model\":\"llama3.2\",\"created_at\":\"2030-01-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":12,\"eval_count\":300}\n")
	resp.WriteString(respEvent(n+4, "response.completed", `"response":`+respObject("completed", `"usage":{"input_tokens":12,"output_tokens":300}`)))
	return map[string]string{"openai": chat.String(), "anthropic": anth.String(), "ollama": olla.String(), "responses": resp.String()}
}()

// BenchmarkReadStream is the seat reading one realistic answer, without
// the network (its SSE or NDJSON framing and each event's fields), with
// the fast targeted readers and with the encoding/json reference
// readers, per wire format: what a fast reader earns on the work a user
// waits on.
//
//	go test -run '^$' -bench ReadStream -benchmem -count 6 ./rehearse/seat/ | benchstat -col /reader -
func BenchmarkReadStream(b *testing.B) {
	wires := []struct {
		name string
		fast wire
		ref  func(typ string, data []byte, st *stream)
	}{
		{"openai", openaiWire{}, func(_ string, d []byte, st *stream) { openaiWire{}.eventWith(d, st, referenceChunk) }},
		{"anthropic", anthropicWire{}, func(typ string, d []byte, st *stream) { referenceAnthropic(anthropicWire{}, typ, d, st) }},
		{"ollama", ollamaWire{}, func(_ string, d []byte, st *stream) { referenceOllama(d, st) }},
		{"responses", responsesWire{}, referenceResponses},
	}
	for _, w := range wires {
		answer := realisticStreams[w.name]
		for _, reader := range []string{"fast", "encoding-json"} {
			s := &httpSeat{w: w.fast}
			switch {
			case w.ref == nil && reader == "fast":
				continue
			case w.ref != nil && reader != "fast":
				s.w = refWire{w.fast, w.ref}
			}
			b.Run("wire="+w.name+"/reader="+reader, func(b *testing.B) {
				b.SetBytes(int64(len(answer)))
				b.ReportAllocs()
				for b.Loop() {
					body := &countingReader{r: strings.NewReader(answer)}
					st := &stream{onContent: func() {}}
					err := s.readStream(body, st)
					if n, _ := st.usage.completion(); err != nil || !st.whole() || n != 300 || st.bad > 0 {
						b.Fatalf("err %v whole %v completion %d bad %d", err, st.whole(), n, st.bad)
					}
				}
			})
		}
	}
}
