package seat

import "net/http"

// WithTransport is the HTTP seat s (openai, anthropic or ollama) sending
// its attempts through rt instead of its own client: `retrygate proxy`
// times a client's own request with the seat's stopwatch and readers by
// handing Do a transport that forwards that request. ok is false for a
// seat of another kind. Redirects are still never followed.
func WithTransport(s Seat, rt http.RoundTripper) (_ Seat, ok bool) {
	h, ok := s.(*httpSeat)
	if !ok {
		return nil, false
	}
	c := *h
	c.rt = rt
	return &c, true
}
