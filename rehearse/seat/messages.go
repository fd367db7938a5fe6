package seat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Message is one chat message of a request given as messages (a prompt
// set's messages line). Role is the sender: system, user or assistant.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chat is the request as a chat: its Messages, else Prompt as one user
// message. The bodies only read it.
func (r Request) chat() []Message {
	if len(r.Messages) == 0 {
		return []Message{{Role: "user", Content: r.Prompt}}
	}
	return r.Messages
}

// Text is the request's text as the local tokenizer counts it: Prompt, or
// the messages' contents joined by newlines.
func (r Request) Text() string { return RequestText(r.Prompt, r.Messages) }

// RequestText is the text of a prompt or of messages (see Request.Text).
func RequestText(prompt string, msgs []Message) string {
	if len(msgs) == 0 {
		return prompt
	}
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n")
}

// PromptSHA is the one fingerprint of a request's text that rows keep
// (prompt_sha), never the text: the first 12 hex digits of the SHA-256 of
// the prompt, or of the messages' canonical JSON ([{"role":…,"content":…},…]
// in order, no spaces) when the request is given as messages. "" for no
// text.
func PromptSHA(prompt string, msgs []Message) string {
	var b []byte
	switch {
	case len(msgs) > 0:
		b, _ = json.Marshal(msgs)
	case prompt != "":
		b = []byte(prompt)
	default:
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:12]
}
