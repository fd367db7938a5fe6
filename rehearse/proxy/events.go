package proxy

import (
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
)

// A request the proxy answers that is no attempt of a job (an
// allow-listed pass-through, a request forwarded under PassUnknown, a
// refusal before any job is opened) is one `# event request` line of the
// log, not a row: a row is an attempt, and report, check and the replay
// count rows as attempts and jobs; event lines they skip.
//
//	# event request method=GET path=/v1/models served=pass status=200 elapsed_s=0.004 client=127.0.0.1 seat=gpt ts=…
//
// served is pass (allow-listed), unknown (off the list, --pass-unknown)
// or refused (with code, the X-Retrygate-Refused word of the answer).

// maxEventPath bounds the path an event line keeps of a request.
const maxEventPath = 256

// clientIP is the client a request came from: its remote IP (no port).
// A header naming another (X-Forwarded-For) is the client's own word, not
// trusted.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// logRequest writes the event line of a request that is no attempt.
// code is the refusal's word ("" for one forwarded), seat the seat it
// went to ("" for a refusal).
func (p *Proxy) logRequest(r *http.Request, how served, status int, code, seat string, start time.Time) {
	pth := r.URL.EscapedPath() // printable ASCII; never the query string
	if len(pth) > maxEventPath {
		pth = pth[:maxEventPath]
	}
	method := r.Method
	if len(method) > 32 {
		method = method[:32]
	}
	e := ledgerfile.Event{Kind: ledgerfile.EventRequest, TS: p.opts.Now(), Seat: seat, Extra: []ledgerfile.KV{
		{Key: "method", Value: method},
		{Key: "path", Value: pth},
		{Key: "served", Value: string(how)},
		{Key: "status", Value: strconv.Itoa(status)},
	}}
	if code != "" {
		e.Extra = append(e.Extra, ledgerfile.KV{Key: "code", Value: code})
	}
	e.Extra = append(e.Extra,
		ledgerfile.KV{Key: "elapsed_s", Value: ledgerfile.FormatSeconds(ledgerfile.Resolution(time.Since(start)))},
		ledgerfile.KV{Key: "client", Value: clientIP(r)})
	p.events.add(&e)
}

// LogEvent queues an event line that is no request's (a breaker's
// change of state, which OnBreaker is told of under the proxy's lock)
// with the request event lines: written off the caller's path, held
// while the log refuses writes, as a row is.
func (p *Proxy) LogEvent(e *ledgerfile.Event) {
	p.events.add(e)
}
