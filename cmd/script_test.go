package cmd

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run this test binary as `retrygate` inside
// the txtar scripts under testdata/script, and the tests that spawn
// processes (retrygateBinary).
func TestMain(m *testing.M) {
	testscript.Main(mainM{m}, map[string]func(){
		"retrygate": func() {
			if os.Getenv(parseOnlyEnv) != "" {
				os.Exit(parseOnlyMain()) // docs_test.go: an example that is not run
			}
			os.Exit(Main())
		},
	})
}

// TestScript runs the end-to-end scripts in testdata/script. Each script
// starts in a fresh directory with no config; set UPDATE_SCRIPTS=1 to
// rewrite the expected output in place.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "../testdata/script",
		UpdateScripts: os.Getenv("RETRYGATE_UPDATE_GOLDEN") != "",
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", repoRoot(t))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":     cmdExits,
			"waitport":  cmdWaitPort,
			"freeport":  cmdFreePort, // ports_test.go
			"expandenv": cmdExpandEnv,
			"scrape":    cmdScrape, // scrape_test.go
			"get":       cmdGet,
		},
	})
}

// cmdExits runs a command and checks its exit code exactly:
// `exits 2 retrygate admit --max-attempts 0` (stdout and stderr are kept
// for the lines after it, as exec keeps them).
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

// cmdWaitPort waits (at most 20s) until something listens on host:port,
// for scripts that start a server in the background: `waitport 127.0.0.1:$PROXY`.
func cmdWaitPort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitport host:port")
	}
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", args[0], time.Second); err == nil {
			c.Close()
			return
		}
	}
	ts.Fatalf("waitport: nothing listens on %s after 20s", args[0])
}

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd + "/.."
}
