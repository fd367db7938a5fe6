// Package pgtest gives tests a fresh database on the test server that
// .ci/postgres.sh starts (RETRYGATE_TEST_PG). Without one, tests skip
// with a message saying how to run them; with CI=true they fail instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env names the test server's URL.
const Env = "RETRYGATE_TEST_PG"

const howTo = "run them with a throwaway server: .ci/postgres.sh go test ./..."

// Server is the test server's URL, or skips (fails with CI=true) when
// there is none or it does not answer.
func Server(t testing.TB) string {
	t.Helper()
	u := os.Getenv(Env)
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	if u == "" {
		if ci {
			t.Fatalf("CI=true but %s is not set: PostgreSQL tests must run in CI (%s)", Env, howTo)
		}
		t.Skipf("no PostgreSQL test server (%s unset): %s", Env, howTo)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		if ci {
			t.Fatalf("%s does not answer: %v", Env, err)
		}
		t.Skipf("%s does not answer (%v): %s", Env, err, howTo)
	}
	c.Close(ctx)
	return u
}

// DB creates an empty database for one test, dropped at its end, and
// returns its URL.
func DB(t testing.TB) string {
	t.Helper()
	base := Server(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rg_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String()
}

// Own is a server of a test's own, for tests that stop it: the shared
// test server stays up for every other test.
type Own struct {
	URL  string
	t    testing.TB
	dir  string
	port int
	bin  string
	user string
}

// NewServer starts a throwaway server of the test's own with the binaries
// .ci/postgres.sh found, stopped and removed at the test's end.
func NewServer(t testing.TB) *Own {
	t.Helper()
	Server(t)
	bin := os.Getenv("RETRYGATE_TEST_PGBIN")
	if bin == "" {
		t.Skipf("the test server was not started by .ci/postgres.sh: no binaries to start another (%s)", howTo)
	}
	dir, err := os.MkdirTemp("", "retrygate-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	o := &Own{t: t, dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		o.user = os.Getenv("RETRYGATE_TEST_PGUSER")
		if o.user == "" {
			o.user = "postgres"
		}
		if out, err := exec.Command("chown", o.user, dir).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v\n%s", dir, err, out)
		}
	}
	t.Cleanup(func() {
		_ = o.run("pg_ctl", "-D", o.data(), "-m", "immediate", "-w", "stop")
		_ = os.RemoveAll(dir)
	})
	if err := o.run("initdb", "-D", o.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if err = o.start(); err == nil {
			break
		} else if try == 4 {
			t.Fatal(err)
		}
	}
	o.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", o.port)
	return o
}

func (o *Own) data() string { return filepath.Join(o.dir, "data") }

func (o *Own) start() error {
	return o.run("pg_ctl", "-D", o.data(), "-w", "-t", "60", "-l", filepath.Join(o.dir, "server.log"),
		"-o", fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", o.port, o.dir), "start")
}

func (o *Own) run(name string, args ...string) error {
	argv := append([]string{filepath.Join(o.bin, name)}, args...)
	if o.user != "" {
		argv = append([]string{"runuser", "-u", o.user, "--"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %v\n%s", name, args, err, out)
	}
	return nil
}

// Restart stops the server (fast shutdown: clients are cut off), keeps
// it down for down, and starts it again on the same port.
func (o *Own) Restart(down time.Duration) {
	o.t.Helper()
	o.Stop()
	time.Sleep(down)
	o.Start()
}

// Stop stops the server (fast shutdown: clients are cut off): an outage
// until Start.
func (o *Own) Stop() {
	o.t.Helper()
	if err := o.run("pg_ctl", "-D", o.data(), "-m", "fast", "-w", "stop"); err != nil {
		o.t.Fatal(err)
	}
}

// Start starts the stopped server again on the same port.
func (o *Own) Start() {
	o.t.Helper()
	if err := o.start(); err != nil {
		o.t.Fatal(err)
	}
}
