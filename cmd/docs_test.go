package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestDocs runs every console example in README.md and docs/*.md, so none
// can go stale. A ```console block holds `$ command` lines, each followed
// by the stdout it prints; a line `...` stands for any lines (a timing, a
// timestamp), and a command whose line ends in `# exits N` must exit N.
// The blocks of one file run in order in one fresh directory, where the
// repository's testdata/ is at hand, so a later example reads the log an
// earlier one wrote. Stderr is not compared: an example that shows it
// redirects it (2>&1). Output is a terminal's (RETRYGATE_FORCE_TTY=1), as
// a reader sees it. RETRYGATE_UPDATE_GOLDEN=1 rewrites the documented
// output from what the commands print.
func TestDocs(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	dir := t.TempDir()
	n := 0
	for _, f := range files {
		script, count, err := docScript(f)
		if err != nil {
			t.Fatal(err)
		}
		if count == 0 {
			continue
		}
		n += count
		name := strings.TrimSuffix(filepath.Base(f), ".md") + ".txtar"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("no console examples found in README.md or docs/")
	}
	if docUpdate {
		// The scripts run as parallel subtests: rewrite once they are done.
		t.Cleanup(func() {
			for file, outs := range docUpdates {
				if err := rewriteDoc(filepath.Join(root, file), outs); err != nil {
					t.Error(err)
				}
			}
		})
	}
	testscript.Run(t, testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", root)
			env.Setenv("RETRYGATE_FORCE_TTY", "1")
			env.Setenv("COLUMNS", "100")
			return os.Symlink(filepath.Join(root, "testdata"), filepath.Join(env.WorkDir, "testdata"))
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"doc": cmdDoc},
	})
}

var (
	docUpdate   = os.Getenv("RETRYGATE_UPDATE_GOLDEN") != ""
	docMu       sync.Mutex
	docUpdates  = map[string]map[int]string{} // file → line of the $ command → its output
	docLineOfRE = regexp.MustCompile(`^(.*):(\d+)$`)
)

// rewriteDoc replaces the output after each updated `$ command` line.
func rewriteDoc(path string, outs map[int]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(data), "\n")
	var b strings.Builder
	for i := 0; i < len(lines); i++ {
		b.WriteString(lines[i])
		if i < len(lines)-1 {
			b.WriteByte('\n')
		}
		out, ok := outs[i+1]
		if !ok {
			continue
		}
		for strings.HasSuffix(lines[i], "\\") && i+1 < len(lines) { // the command's continuation lines
			i++
			b.WriteString(lines[i] + "\n")
		}
		b.WriteString(out)
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "$ ") && strings.TrimSpace(lines[i+1]) != "```" {
			i++ // the old output
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

var exitsRE = regexp.MustCompile(`\s+# exits (\d+)$`)

// docScript turns a markdown file's console blocks into one testscript:
// `doc FILE:LINE CODE 'command'` per command, its expected stdout in a
// file section of its own.
func docScript(path string) (string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var cmds, files strings.Builder
	n, line := 0, 0
	inBlock := false
	var expect *strings.Builder
	flush := func() {
		if expect != nil {
			fmt.Fprintf(&files, "-- expect/%d --\n%s", n, expect.String())
			expect = nil
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case !inBlock && strings.TrimSpace(text) == "```console":
			inBlock = true
		case inBlock && strings.TrimSpace(text) == "```":
			flush()
			inBlock = false
		case inBlock && strings.HasPrefix(text, "$ "):
			flush()
			n++
			at := line
			command, code := strings.TrimPrefix(text, "$ "), "0"
			for strings.HasSuffix(command, "\\") && sc.Scan() { // a command continued on the next line
				line++
				command = strings.TrimSuffix(command, "\\") + " " + strings.TrimSpace(sc.Text())
			}
			if m := exitsRE.FindStringSubmatch(command); m != nil {
				command, code = strings.TrimSuffix(command, m[0]), m[1]
			}
			// testscript quotes with '…', doubling a quote inside.
			fmt.Fprintf(&cmds, "doc %s:%d %s %d '%s'\n", docRel(path), at, code, n, strings.ReplaceAll(command, "'", "''"))
			expect = &strings.Builder{}
		case inBlock && expect != nil:
			expect.WriteString(text + "\n")
		case inBlock:
			return "", 0, fmt.Errorf("%s:%d: console block line before any $ command", path, line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", 0, err
	}
	if inBlock {
		return "", 0, fmt.Errorf("%s: unterminated console block", path)
	}
	return cmds.String() + files.String(), n, nil
}

// cmdDoc runs one documented command with sh and checks its exit code and
// stdout against the documented output.
func cmdDoc(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: doc WHERE CODE N 'command'")
	}
	where, n := args[0], args[2]
	want, _ := strconv.Atoi(args[1])
	command := args[3]
	err := ts.Exec("sh", "-c", command)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%s: %v", where, err)
		}
		got = ee.ExitCode()
	}
	stdout := ts.ReadFile("stdout")
	if got != want {
		ts.Fatalf("%s: `%s` exited %d, the docs say %d\nstdout:\n%s\nstderr:\n%s", where, command, got, want, stdout, ts.ReadFile("stderr"))
	}
	expected := ts.ReadFile("expect/" + n)
	if docUpdate {
		m := docLineOfRE.FindStringSubmatch(where)
		line, _ := strconv.Atoi(m[2])
		docMu.Lock()
		if docUpdates[m[1]] == nil {
			docUpdates[m[1]] = map[int]string{}
		}
		docUpdates[m[1]][line] = stdout
		docMu.Unlock()
		return
	}
	if !docMatch(strings.Split(strings.TrimSuffix(expected, "\n"), "\n"), strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")) {
		ts.Fatalf("%s: `%s` printed:\n%s\nthe docs show:\n%s", where, command, stdout, expected)
	}
}

// docMatch matches lines, where a want line "..." matches any run of lines.
func docMatch(want, got []string) bool {
	if len(want) == 1 && want[0] == "" {
		want = nil
	}
	if len(got) == 1 && got[0] == "" {
		got = nil
	}
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if docMatch(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && strings.TrimRight(want[0], " ") == strings.TrimRight(got[0], " ") && docMatch(want[1:], got[1:])
}

// docRel names a doc by its path in the repository: README.md, docs/x.md.
func docRel(path string) string {
	if filepath.Base(filepath.Dir(path)) == "docs" {
		return "docs/" + filepath.Base(path)
	}
	return filepath.Base(path)
}
