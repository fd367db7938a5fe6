package admit

import "time"

// RateLimit is a provider's rate-limit state on one answer, normalised
// from its headers (OpenAI's x-ratelimit-*, Anthropic's
// anthropic-ratelimit-*): the requests and tokens left in the current
// window and how long until the limit that ran out resets. Each part is
// kept only when the provider reported it (the Has fields), so a reviewer
// can tell a token-rate 429 (tokens at 0, requests left) from a
// request-rate one.
type RateLimit struct {
	RemainingRequests, RemainingTokens int64
	Reset                              time.Duration
	HasRequests, HasTokens, HasReset   bool
}

// Any reports whether any part was reported.
func (r RateLimit) Any() bool { return r.HasRequests || r.HasTokens || r.HasReset }
