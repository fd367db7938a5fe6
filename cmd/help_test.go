package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpNotRun names the --help examples that cannot run offline, by
// command path and a word of the example, with the reason. Each is still
// parsed: its command exists, its flags exist and take their values.
var helpNotRun = []struct{ command, word, why string }{
	{"retrygate claim", "curl", "a retry loop around a real seat, with curl"},
	{"retrygate db init", "db.internal", "a PostgreSQL server"},
	{"retrygate log export", "db.internal", "a PostgreSQL server"},
	{"retrygate log import", "db.internal", "a PostgreSQL server"},
	{"retrygate proxy", "proxy", "a gateway that serves until stopped"},
	{"retrygate seat serve", "serve", "a server that serves until stopped (and curl asking it)"},
	{"retrygate time", "served", "a seat server in the background"},
}

// helpConfig names, per command, the file of testdata/help its examples
// take as retrygate.yaml instead of the default one.
var helpConfig = map[string]string{"retrygate proxy": "proxy.yaml"}

// TestHelpExamples runs the examples of every command's --help, each in a
// fresh directory holding testdata/help (a retrygate.yaml whose seats are
// script seats, a rehearsal.log, prompt.txt, policies and logs/), so none
// can rot: each must exit 0, or N where its line ends in `# exits N`.
// What they print is not compared (--help shows none); those that cannot
// run offline (helpNotRun) are parsed instead. An example is a paragraph
// of the Example text, run as one sh script under set -e; `exits N` in
// its comment says the exit code a refusal or failed threshold gives.
func TestHelpExamples(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ios, _, _, _ := TestStreams()
	cmdRoot := NewRootCmd(&Factory{IO: ios, Getenv: func(string) string { return "" }})
	n := 0
	used := map[int]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example != "" {
			var script, files strings.Builder
			if cfg, ok := helpConfig[c.CommandPath()]; ok {
				fmt.Fprintf(&script, "cp $REPO/testdata/help/%s retrygate.yaml\n", cfg)
			}
			for i, ex := range helpExamples(c.Example) {
				mode, code := modeStatus, "0"
				for k, nr := range helpNotRun {
					if nr.command == c.CommandPath() && strings.Contains(ex, nr.word) {
						mode, used[k] = modeParse, true
						break
					}
				}
				if m := exitsRE.FindStringSubmatch(ex); m != nil {
					code = m[1]
				}
				n++
				// A script of many lines is a file of the archive: @FILE.
				fmt.Fprintf(&script, "doc %s:example-%d %s %d %s @example/%d\n", strings.ReplaceAll(c.CommandPath(), " ", "-"), i+1, code, n, mode, n)
				fmt.Fprintf(&files, "-- example/%d --\n%s\n", n, ex)
			}
			name := strings.ReplaceAll(c.CommandPath(), " ", "_") + ".txtar"
			if err := os.WriteFile(filepath.Join(dir, name), []byte(script.String()+files.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if w := userWords(c.Long + c.Short + c.Example + c.Flags().FlagUsages()); w != "" {
			t.Errorf("%s --help says %q: users do not have the articles; name the idea", c.CommandPath(), w)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmdRoot)
	if n < 25 {
		t.Fatalf("found only %d --help examples", n)
	}
	for k, nr := range helpNotRun {
		if !used[k] {
			t.Errorf("helpNotRun: no example of %q has %q: drop the entry", nr.command, nr.word)
		}
	}
	fixture := os.DirFS(filepath.Join(root, "testdata", "help"))
	testscript.Run(t, testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", root)
			if err := os.CopyFS(env.WorkDir, fixture); err != nil {
				return err
			}
			return os.Symlink(filepath.Join(root, "testdata"), filepath.Join(env.WorkDir, "testdata"))
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"doc": cmdDoc},
	})
}

var helpIndentRE = regexp.MustCompile(`(?m)^  `)

// helpExamples cuts an Example text into its examples at blank lines,
// each a sh script (its # lines are comments).
func helpExamples(text string) []string {
	var out []string
	for _, para := range strings.Split(helpIndentRE.ReplaceAllString(text, ""), "\n\n") {
		if para = strings.TrimSpace(para); para != "" {
			out = append(out, para)
		}
	}
	return out
}

// TestHelpLayout: every --help opens with its usage line and a summary of
// at most three lines, then its examples, before any details; its EXIT
// STATUS section stays; the root's says where to start.
func TestHelpLayout(t *testing.T) {
	ios, _, _, _ := TestStreams()
	root := NewRootCmd(&Factory{IO: ios, Getenv: func(string) string { return "" }})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		var b strings.Builder
		c.SetOut(&b)
		if err := c.Help(); err != nil {
			t.Fatal(err)
		}
		help := b.String()
		lines := strings.Split(help, "\n")
		name := c.CommandPath()
		if lines[0] != "Usage:" || !strings.HasPrefix(lines[1], "  "+name) {
			t.Errorf("%s --help: does not open with its usage line:\n%s", name, strings.Join(lines[:min(4, len(lines))], "\n"))
			return
		}
		i := 2
		for i < len(lines) && strings.HasPrefix(lines[i], "  ") {
			i++ // more usage lines
		}
		if lines[i] != "" {
			t.Errorf("%s --help: no blank line after the usage", name)
			return
		}
		n := 0
		for i++; i < len(lines) && lines[i] != ""; i++ {
			n++
		}
		if n == 0 || n > 3 {
			t.Errorf("%s --help: the summary after the usage is %d lines, want 1 to 3", name, n)
		}
		if c.Example != "" && i+1 < len(lines) && lines[i+1] != "Examples:" {
			t.Errorf("%s --help: the examples do not follow the summary (found %q)", name, lines[i+1])
		}
		if !strings.Contains(help, "\nEXIT STATUS\n  0  ") {
			t.Errorf("%s --help: no EXIT STATUS section", name)
		}
	}
	walk(root)
	var b strings.Builder
	root.SetOut(&b)
	require.NoError(t, root.Help())
	assert.Contains(t, b.String(), "Where to start:\n  retrygate rehearse ")
	assert.Less(t, strings.Index(b.String(), "Start here:\n  rehearse"), strings.Index(b.String(), "The gate by hand"), "the commands a newcomer needs first come first")
}
