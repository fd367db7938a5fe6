package seat

import "net/http"

// WithTransport is the HTTP seat s (openai, anthropic or ollama) sending
// its attempts through wrap(own), where own is the seat's own
// http.Transport (kept-alive connections, no resend of a written
// request): `retrygate proxy` times a client's own request with the
// seat's stopwatch and readers by wrapping it in a RoundTripper that
// forwards that request. own is returned too, for requests the proxy
// sends untimed. ok is false for a seat of another kind. Redirects are
// still never followed. wrap's RoundTripper keeps http.RoundTripper's
// contract: a response with a body, or an error, never both.
func WithTransport(s Seat, wrap func(own http.RoundTripper) http.RoundTripper) (_ Seat, own http.RoundTripper, ok bool) {
	h, ok := s.(*httpSeat)
	if !ok {
		return nil, nil, false
	}
	c := *h
	c.rt = wrap(h.rt)
	return &c, h.rt, true
}
