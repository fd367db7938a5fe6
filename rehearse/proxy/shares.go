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

// slotShares counts the request slots each client holds, so that one
// client (a prefix) holds at most its share (Options.MaxClientConcurrent)
// of them, whatever number of connections it opens.
type slotShares struct {
	mu   sync.Mutex
	held map[string]int
	max  int
}

func newSlotShares(n int) *slotShares { return &slotShares{held: map[string]int{}, max: n} }

// take takes one of client's slots: false when it holds its share.
func (s *slotShares) take(client string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[client] >= s.max {
		return false
	}
	s.held[client]++
	return true
}

// give gives one back.
func (s *slotShares) give(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[client]--; s.held[client] <= 0 {
		delete(s.held, client)
	}
}
