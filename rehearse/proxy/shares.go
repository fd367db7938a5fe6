package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// What one client may hold of the proxy's request slots and job table is
// its share, and a client is its remote address's prefix, not the
// address: an IPv4 /32 and an IPv6 /64 by default (Options.ClientPrefixV4,
// ClientPrefixV6), so one IPv6 host, which has 2^64 addresses, is one
// client. An IPv4 address mapped into IPv6 (::ffff:a.b.c.d) is IPv4.

// Default client prefixes: an IPv4 host has one address, an IPv6 host
// (a subnet's interface identifiers) a /64.
const (
	DefaultClientPrefixV4 = 32
	DefaultClientPrefixV6 = 64
)

// clientKey is the share a request from remote (host:port, as
// http.Request.RemoteAddr) counts against: its address's prefix of v4 or
// v6 bits, written as a prefix ("2001:db8::/64"). A remote that is no IP
// address is its own client.
func clientKey(remote string, v4, v6 int) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	bits := v6
	if a.Is4() {
		bits = v4
	}
	pfx, err := a.Prefix(bits)
	if err != nil {
		return host
	}
	return pfx.String()
}

// checkPrefixes refuses prefix lengths past an address's bits.
func checkPrefixes(v4, v6 int) error {
	switch {
	case v4 < 0 || v4 > 32:
		return fmt.Errorf("client prefix: IPv4 /%d: must be between 1 and 32", v4)
	case v6 < 0 || v6 > 128:
		return fmt.Errorf("client prefix: IPv6 /%d: must be between 1 and 128", v6)
	}
	return nil
}

// clientShares counts what each client holds of the request slots and
// of the body budget, so that one client (a prefix) holds at most its
// share of either (Options.MaxClientConcurrent slots, and as large a
// part of MaxBodyTotal), whatever number of connections it opens.
type clientShares struct {
	mu    sync.Mutex
	held  map[string]*clientHeld
	slots int
	bytes int64
}

type clientHeld struct {
	slots int
	bytes int64
}

// newClientShares gives each client slots of the request slots and bytes
// of the body budget.
func newClientShares(slots int, bytes int64) *clientShares {
	return &clientShares{held: map[string]*clientHeld{}, slots: slots, bytes: bytes}
}

// bodyShare is a client's part of the body budget: its part of the
// request slots, and room for one largest body at least.
func bodyShare(o *Options) int64 {
	if o.MaxClientConcurrent >= o.MaxConcurrent {
		return o.MaxBodyTotal
	}
	return max(o.MaxBody, o.MaxBodyTotal/int64(o.MaxConcurrent)*int64(o.MaxClientConcurrent))
}

// take takes one of client's slots: false when it holds its share.
func (s *clientShares) take(client string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[client]
	if h == nil {
		h = &clientHeld{}
		s.held[client] = h
	}
	if h.slots >= s.slots {
		return false
	}
	h.slots++
	return true
}

// give gives one back.
func (s *clientShares) give(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[client].slots--
	s.forget(client)
}

// takeBytes takes n bytes of client's part of the body budget (a client
// holding a slot): false when they would pass it.
func (s *clientShares) takeBytes(client string, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[client]
	if h.bytes+n > s.bytes {
		return false
	}
	h.bytes += n
	return true
}

// giveBytes gives n bytes back.
func (s *clientShares) giveBytes(client string, n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[client].bytes -= n
	s.forget(client)
}

// forget drops a client that holds nothing, under s.mu.
func (s *clientShares) forget(client string) {
	if h := s.held[client]; h.slots <= 0 && h.bytes <= 0 {
		delete(s.held, client)
	}
}
