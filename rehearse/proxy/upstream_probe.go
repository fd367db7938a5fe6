//go:build linux || darwin || freebsd || netbsd || openbsd

package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
)

// alive reports whether an idle connection can still carry a request:
// nothing to read on it, not even its end (a peek that does not wait).
func alive(nc net.Conn) bool {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	tcp, ok := nc.(*net.TCPConn)
	if !ok {
		return true
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && ok
}
