//go:build ignore

// gen writes mixed.jsonl, a synthetic prompt set (no third-party text):
// 32 requests from a few words to a few thousand words of seeded filler,
// some as messages with a system role, some with tags.
//
//	go run testdata/prompts/gen.go > testdata/prompts/mixed.jsonl
package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

var words = strings.Fields(`retry budget seat wait deadline token ceiling jitter
backoff breaker fallback queue latency stream chunk spend gate attempt job
ledger row policy rehearsal model answer limit clock sample window rate`)

func filler(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type line struct {
	Prompt    string   `json:"prompt,omitempty"`
	Messages  []msg    `json:"messages,omitempty"`
	MaxTokens int      `json:"max_tokens,omitempty"`
	Tags      []string `json:"tags,omitempty"`
}

func main() {
	r := rand.New(rand.NewPCG(17, 17))
	lengths := []int{3, 5, 8, 12, 20, 40, 80, 150, 300, 600, 1200, 2500, 4000}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	for i := range 32 {
		n := lengths[i%len(lengths)]
		var l line
		size := "short"
		switch {
		case n >= 1000:
			size = "long"
		case n >= 100:
			size = "medium"
		}
		text := fmt.Sprintf("Summarise in one line: %s", filler(r, n))
		if i%3 == 1 {
			l.Messages = []msg{{"user", text}}
			if i%2 == 1 {
				l.Messages = append([]msg{{"system", "You answer in one short sentence."}}, l.Messages...)
			}
			l.Tags = append(l.Tags, "chat")
		} else {
			l.Prompt = text
		}
		if i%4 == 0 {
			l.MaxTokens = 64 << (i % 3)
		}
		if i%2 == 0 {
			l.Tags = append(l.Tags, size)
		}
		if err := enc.Encode(l); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
