package cmd

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gofrs/flock"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The loopback ports the tests' servers are handed: below every OS's
// ephemeral range (Linux 32768-60999, macOS and Windows 49152-65535),
// so no outgoing connection takes one as its local port between the
// probe and the server's listen (one did, on 47312, in a CI run), and a
// lock file per port, shared by every test process on the machine, so
// two runs at once (two checkouts, two CI jobs) never hand out the same.
// (bench/compare.sh takes its ports from 21400-21499.)
const (
	testPortLo = 23000
	testPortN  = 1000
)

// reservePort is a loopback port nothing listens on, kept from every
// other test process on this machine until release is called (or the
// process ends).
func reservePort() (port int, release func(), err error) {
	dir := filepath.Join(os.TempDir(), "retrygate-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, err
	}
	start := rand.IntN(testPortN)
	for i := range testPortN {
		p := testPortLo + (start+i)%testPortN
		if l, ok := lockPort(dir, p); ok {
			return p, func() { _ = l.Unlock() }, nil
		}
	}
	return 0, nil, fmt.Errorf("no free loopback port in %d-%d", testPortLo, testPortLo+testPortN-1)
}

// lockPort takes port's lock and checks that nothing listens on it.
func lockPort(dir string, port int) (*flock.Flock, bool) {
	l := flock.New(filepath.Join(dir, strconv.Itoa(port)+".lock"))
	if ok, err := l.TryLock(); err != nil || !ok {
		return nil, false
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		_ = l.Unlock()
		return nil, false
	}
	_ = ln.Close()
	return l, true
}

// cmdFreePort sets each NAME to a loopback port of the script's own for
// its servers, held until the script ends: `freeport SEAT PROXY`, then
// `--addr 127.0.0.1:$SEAT`. No script names a fixed port: two runs of
// the tests at once would want it both.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: freeport NAME...")
	}
	for _, name := range args {
		port, release, err := reservePort()
		ts.Check(err)
		ts.Defer(release)
		ts.Setenv(name, strconv.Itoa(port))
	}
}

// cmdExpandEnv replaces $NAME and ${NAME} in each file by the script's
// variable, for the files of an archive that name a port freeport
// handed out (a seat's base_url): `expandenv retrygate.yaml`.
func cmdExpandEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: expandenv FILE...")
	}
	for _, name := range args {
		text := os.Expand(ts.ReadFile(name), func(key string) string {
			v := ts.Getenv(key)
			if v == "" {
				ts.Fatalf("expandenv: %s: $%s is not set", name, key)
			}
			return v
		})
		ts.Check(os.WriteFile(ts.MkAbs(name), []byte(text), 0o644))
	}
}

// A reserved port is nobody else's until released: not another
// reservation's (the lock, shared across processes), and not one
// something listens on (the probe).
func TestReservePort(t *testing.T) {
	dir := filepath.Join(os.TempDir(), "retrygate-test-ports")
	port, release, err := reservePort()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, port, testPortLo)
	assert.Less(t, port, testPortLo+testPortN)
	_, ok := lockPort(dir, port)
	assert.False(t, ok, "a held port handed out again")

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err, "the server's listen on its reserved port")
	release()
	_, ok = lockPort(dir, port)
	assert.False(t, ok, "a port something listens on handed out")
	require.NoError(t, ln.Close())

	l, ok := lockPort(dir, port)
	require.True(t, ok, "a released port, free again")
	require.NoError(t, l.Unlock())
}
