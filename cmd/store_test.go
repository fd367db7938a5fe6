package cmd

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore/pgtest"
)

// withPassword puts a password into a test database's URL. The test
// server trusts every loopback connection and ignores it, so the URL
// works, and the password must show nowhere.
func withPassword(t testing.TB, raw, pw string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

const testPassword = "hunter2-Secret"

// keywordForm is a test database's URL as a libpq keyword/value string.
func keywordForm(t testing.TB, raw string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	pw, _ := u.User.Password()
	return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable",
		u.Hostname(), u.Port(), u.User.Username(), pw, strings.TrimPrefix(u.Path, "/"))
}

// TestScriptPostgres runs testdata/script-pg against a fresh database per
// script: $PGURL (with a password that must never be printed) and
// $PGNAME (the same URL as output names it).
func TestScriptPostgres(t *testing.T) {
	pgtest.Server(t)
	testscript.Run(t, testscript.Params{
		Dir: "../testdata/script-pg",
		Setup: func(env *testscript.Env) error {
			u := withPassword(t, pgtest.DB(t), testPassword)
			env.Setenv("PGURL", u)
			env.Setenv("PGNAME", logDisplay(u))
			env.Setenv("PGKV", keywordForm(t, u))
			env.Setenv("PGPW", testPassword)
			env.Setenv("REPO", repoRoot(t))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":   cmdExits,
			"cmpname": cmdCmpName,
		},
	})
}

// cmdCmpName compares a file with another after naming the log alike:
// `cmpname stdout want $PGNAME rehearsal.log` replaces the database's
// name by the file's in stdout before comparing.
func cmdCmpName(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: cmpname got want NAME REPLACEMENT")
	}
	got := ts.ReadFile(args[0])
	want := ts.ReadFile(args[1])
	got = strings.ReplaceAll(got, args[2], args[3])
	if got != want {
		ts.Fatalf("%s and %s differ (with %s named %s):\n%s\n----\n%s", args[0], args[1], args[2], args[3], got, want)
	}
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	io, _, out, errOut := TestStreams()
	f := &Factory{IO: io, Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	code = Run(f, args)
	return code, out.String(), errOut.String()
}

// The password of the connection string never appears in output or
// errors, whether the URL comes from an argument or RETRYGATE_LOG, and
// whether the server answers or not.
func TestDBPasswordNeverPrinted(t *testing.T) {
	u := withPassword(t, pgtest.DB(t), testPassword)
	t.Chdir(t.TempDir())
	t.Setenv("RETRYGATE_LOG", "")
	log := "job=a attempt=1 wait_s=1.000 elapsed_s=2.000 tokens=3\n"
	require.NoError(t, os.WriteFile("r.log", []byte(log), 0o644))
	dead := withPassword(t, "postgres://postgres@127.0.0.1:1/nowhere", testPassword)
	cases := []struct {
		args []string
		env  map[string]string
		code int
	}{
		{[]string{"log", "export", u}, nil, 2}, // no schema yet
		{[]string{"db", "init", u}, nil, 0},
		{[]string{"db", "init"}, map[string]string{"RETRYGATE_LOG": u}, 0},
		{[]string{"log", "import", "r.log", u}, nil, 0},
		{[]string{"log", "import", "r.log"}, map[string]string{"RETRYGATE_LOG": u}, 2}, // duplicate
		{[]string{"log", "export"}, map[string]string{"RETRYGATE_LOG": u}, 0},
		{[]string{"log", "export", dead}, nil, 2},
		{[]string{"db", "init", dead}, nil, 2},
		{[]string{"log", "export", strings.Replace(u, "127.0.0.1", "127.0.0.1:notaport", 1)}, nil, 2},
	}
	for _, c := range cases {
		os.Unsetenv("RETRYGATE_LOG")
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		code, out, errOut := run(t, c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		assert.NotContains(t, out+errOut, testPassword, "%v", c.args)
		assert.NotContains(t, out+errOut, "hunter2", "%v", c.args)
		if c.code == 2 {
			assert.Contains(t, errOut, "retrygate: ", "%v", c.args)
		}
	}
	code, out, _ := run(t, "log", "export", u)
	require.Equal(t, 0, code)
	assert.Equal(t, ledgerfile.Header+"\n"+log, out)

	code, _, errOut := run(t, "log", "export", dead)
	require.Equal(t, 2, code)
	assert.Contains(t, errOut, "postgres 127.0.0.1:1/nowhere: server unreachable")
}

// A sent attempt whose row cannot be written is printed on stderr with
// the row itself.
func TestUnwrittenRowIsReported(t *testing.T) {
	var errOut bytes.Buffer
	dir := t.TempDir()
	l, err := openLog(context.Background(), &errOut, filepath.Join(dir, "no-such-dir", "r.log"), false)
	require.NoError(t, err)
	row := ledgerfile.Row{Job: "j", Attempt: 1, Tokens: 42, Outcome: "ok", Decision: "admit"}
	require.Error(t, l.Append(context.Background(), row))
	assert.Contains(t, errOut.String(), "a sent attempt's row was not written")
	assert.Contains(t, errOut.String(), ledgerfile.FormatRow(&row))
}

// The db and log commands' valid command lines for flags_test.go, kept
// here beside their tests. Their only flag is --config.
func init() {
	flagBase["db init"] = []string{}                                   // a file log: nothing to set up
	flagBase["log export"] = []string{}                                // the config's log, a file
	flagBase["log import"] = []string{"rehearsal.log", "imported.log"} // into a file log
}
