// Package pgtest gives tests a fresh database on the test server that
// .ci/postgres.sh starts (RETRYGATE_TEST_PG). Without one, tests skip
// with a message saying how to run them; with CI=true they fail instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Restart stops and starts the test server (fast shutdown), for tests of
// a server that goes away mid-run. It skips when the server is not one
// .ci/postgres.sh started.
func Restart(t testing.TB, down time.Duration) {
	t.Helper()
	data, bin := os.Getenv("RETRYGATE_TEST_PGDATA"), os.Getenv("RETRYGATE_TEST_PGBIN")
	if data == "" || bin == "" {
		t.Skipf("the test server was not started by .ci/postgres.sh: cannot restart it (%s)", howTo)
	}
	run := func(args ...string) {
		ctl := append([]string{filepath.Join(bin, "pg_ctl"), "-D", data, "-w", "-t", "60"}, args...)
		if user := os.Getenv("RETRYGATE_TEST_PGUSER"); os.Geteuid() == 0 && user != "" {
			ctl = append([]string{"runuser", "-u", user, "--"}, ctl...)
		}
		out, err := exec.Command(ctl[0], ctl[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("pg_ctl %v: %v\n%s", args, err, out)
		}
	}
	run("-m", "fast", "stop")
	time.Sleep(down)
	run("-l", filepath.Join(filepath.Dir(data), "server.log"), "-o", os.Getenv("RETRYGATE_TEST_PGOPTS"), "start")
}
