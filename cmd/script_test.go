package cmd

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run this test binary as `retrygate` inside
// the txtar scripts under testdata/script.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"retrygate": func() { os.Exit(Main()) },
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
	})
}

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd + "/.."
}
