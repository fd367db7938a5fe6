package cmd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/spf13/cobra"
)

// TestDocs runs every console example in README.md and docs/*.md, so none
// can go stale. A ```console block holds `$ command` lines, each followed
// by what a terminal shows: its stdout and its stderr, in the order they
// interleave (the comparison accepts any interleaving of the two streams;
// RETRYGATE_UPDATE_GOLDEN=1 rewrites each output as `2>&1` orders it).
// A command's trailing shell comment may say `# exits N`: it must exit N
// (else 0). What the reader need not see is said in an HTML comment on
// the line before the block, which a rendered page does not show:
//
//   - `<!-- times vary -->`: timestamps and measured times (a decimal
//     number, with or without a unit, or a line that is one whole number,
//     as claim's milliseconds) match any other, and so does the padding
//     they move; nothing else is loosened;
//   - `<!-- not run: REASON -->`: its commands cannot run offline (a real
//     provider, a PostgreSQL server); their output is not compared, but
//     every retrygate command must parse (the command exists, every flag
//     exists and takes its value, the argument count fits) and each line
//     must be valid sh.
//
// A ```sh block holding a retrygate command is a script to adapt (a loop
// around a real seat, PostgreSQL URLs, a CI step): it is parsed as a
// `not run` command is, and must say why it is not run.
//
// A command ending in ` &` is a server the next commands talk to, as a
// reader starts one in the background: one retrygate command with
// --addr HOST:PORT. It starts, the next command waits until the port
// listens, and it is stopped (Ctrl-C) at the end of the file, when the
// lines the docs show under it must be among what it printed, in order.
// The server listens on a port the test hands out (docaddrs), not the
// one the docs give: the test maps the docs' address to it in the
// commands and in the files they read, and back in what they print, so
// two runs of the docs test at once never want one port both.
//
// A block whose fence says `file=NAME` (```yaml file=retrygate.yaml) is
// saved as NAME for the examples after it, as the reader is told to.
//
// The blocks of one file run in order in one fresh directory, where the
// repository's testdata/ is at hand, so a later example reads the log an
// earlier one wrote. Stdout is a terminal's (RETRYGATE_FORCE_TTY=1) unless
// the command pipes or redirects it, as a reader's terminal would see it.
// A retrygate command outside a console block fails the test: every
// example runs.
func TestDocs(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	n := 0
	for _, f := range docFiles(t, root) {
		script, count, err := docScript(f)
		if err != nil {
			t.Error(err)
			continue
		}
		if count == 0 {
			continue
		}
		n += count
		name := strings.ReplaceAll(strings.TrimSuffix(docRel(f), ".md"), "/", "_") + ".txtar"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("no console examples found in README.md or docs/")
	}
	if t.Failed() {
		return
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
			env.Setenv("COLUMNS", "80") // the terminal a reader has
			return os.Symlink(filepath.Join(root, "testdata"), filepath.Join(env.WorkDir, "testdata"))
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"doc": cmdDoc, "waitport": cmdWaitPort, "docaddrs": cmdDocAddrs, "docbg": cmdDocBackground,
		},
	})
}

// docFiles is README.md, docs/*.md and the maintainers' docs/dev/*.md.
func docFiles(t *testing.T, root string) []string {
	files := []string{filepath.Join(root, "README.md")}
	for _, dir := range []string{"docs", filepath.Join("docs", "dev")} {
		more, err := filepath.Glob(filepath.Join(root, dir, "*.md"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}
	return files
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

var (
	exitsRE = regexp.MustCompile(`#.*\bexits (\d+)\b`)
	// The markers of the block after them, in an HTML comment of a line
	// of its own: a rendered page does not show them.
	blockNotRunRE = regexp.MustCompile(`^<!-- not run: (.+) -->$`)
	blockTimesRE  = regexp.MustCompile(`^<!-- times vary -->$`)
	// A marker in a command's comment would be shown to readers.
	shownMarkerRE = regexp.MustCompile(`#.*\b(not run:|times vary\b)`)
	addrRE        = regexp.MustCompile(`--addr[ =](\S+)`)
	// A copy onto the files a reader keeps (their log, their config).
	overwriteRE = regexp.MustCompile(`\b(cp|mv)\b[^|;&]*\s(\./)?(rehearsal\.log|retrygate\.yaml)(\s|$)`)
	// A command outside a console block: a `$ ` prompt, or a line that
	// starts with the program's name and a word (not `retrygate: …`,
	// which is output).
	// ```yaml file=retrygate.yaml: a block the reader saves as that file.
	docFileRE      = regexp.MustCompile(`\bfile=(\S+)`)
	synopsisRE     = regexp.MustCompile(`\[--|\[[A-Z]`) // retrygate rehearse [--seat NAME]: a usage line
	strayCommandRE = regexp.MustCompile(`^\s*(\$ |retrygate [a-z-])`)
)

// docMode is how one documented command is checked.
const (
	modeRun    = "run"    // run it, compare what it prints
	modeTimes  = "times"  // run it, compare with times and timestamps masked
	modeParse  = "parse"  // do not run it: check that it parses
	modeStatus = "status" // run it, check only its exit code (help examples)
)

// docScript turns a markdown file's console blocks into one testscript:
// `doc FILE:LINE CODE N MODE 'command'` per command, its expected output
// in a file section of its own.
func docScript(path string) (string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var cmds, files strings.Builder
	var errs []string
	n, line, nfiles := 0, 0, 0
	saving := false           // in a block the reader saves as a file
	script, scriptAt := "", 0 // a ```sh block's lines, and its first
	fence := ""               // the open fence's language; "" outside a block
	inBlock := false
	marks := ""                          // the HTML comment on the line before a block
	blockNotRun, blockTimes := "", false // what it says of the open block
	var servers []string                 // the background servers started: their docbg lines, for the end
	var waitFor []string                 // the servers' addresses the next command waits for
	var addrs []string                   // the addresses the docs give the servers
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
		trimmed := strings.TrimSpace(text)
		switch {
		case !inBlock && (blockNotRunRE.MatchString(trimmed) || blockTimesRE.MatchString(trimmed)):
			marks = trimmed
		case !inBlock && strings.HasPrefix(trimmed, "```"):
			inBlock, fence = true, strings.TrimPrefix(trimmed, "```")
			blockNotRun, blockTimes = "", blockTimesRE.MatchString(marks)
			if m := blockNotRunRE.FindStringSubmatch(marks); m != nil {
				blockNotRun = m[1]
			}
			marks = ""
			if m := docFileRE.FindStringSubmatch(fence); m != nil {
				// The reader is told to save this block as a file: so do
				// the examples after it.
				nfiles++
				fmt.Fprintf(&cmds, "cp docfile/%d %s\n", nfiles, m[1])
				fmt.Fprintf(&files, "-- docfile/%d --\n", nfiles)
				saving = true
			}
		case inBlock && trimmed == "```":
			flush()
			if fence == "sh" && strings.Contains(script, "retrygate ") {
				// A script to adapt: parsed, not run, and it says why.
				n++
				if blockNotRun == "" {
					errs = append(errs, fmt.Sprintf("%s:%d: a ```sh block with a retrygate command: if it runs offline, make it a ```console block; else say why on the line before it with <!-- not run: WHY -->", docRel(path), scriptAt))
				}
				fmt.Fprintf(&cmds, "doc %s:%d 0 %d %s @script/%d\n", docRel(path), scriptAt, n, modeParse, n)
				fmt.Fprintf(&files, "-- script/%d --\n%s", n, script)
			}
			script = ""
			inBlock, saving = false, false
		case !inBlock:
			if trimmed != "" {
				marks = "" // a marker belongs to the block right after it
			}
		case saving:
			files.WriteString(text + "\n")
		case fence == "sh":
			if script == "" {
				scriptAt = line
			}
			if shownMarkerRE.MatchString(text) {
				errs = append(errs, fmt.Sprintf("%s:%d: a test's marker shown to readers: say it on the line before the block (<!-- not run: WHY -->)", docRel(path), line))
			}
			script += text + "\n"
		case inBlock && fence != "console":
			if strayCommandRE.MatchString(text) && !synopsisRE.MatchString(text) {
				errs = append(errs, fmt.Sprintf("%s:%d: a command in a ```%s block: put it in a ```console block (with `# not run: why` if it cannot run offline), so a test runs it", docRel(path), line, fence))
			}
		case strings.HasPrefix(text, "$ "):
			flush()
			n++
			at := line
			command := strings.TrimPrefix(text, "$ ")
			for strings.HasSuffix(command, "\\") && sc.Scan() { // a command continued on the next line
				line++
				command = strings.TrimSuffix(command, "\\") + " " + strings.TrimSpace(sc.Text())
			}
			code, mode := "0", modeRun
			if m := exitsRE.FindStringSubmatch(command); m != nil {
				code = m[1]
			}
			if overwriteRE.MatchString(command) {
				errs = append(errs, fmt.Sprintf("%s:%d: `%s` overwrites a reader's own file: name the example's file in the commands instead", docRel(path), at, command))
			}
			if shownMarkerRE.MatchString(command) {
				errs = append(errs, fmt.Sprintf("%s:%d: a test's marker shown to readers: say it on the line before the block (<!-- not run: WHY --> or <!-- times vary -->)", docRel(path), at))
			}
			if blockTimes {
				mode = modeTimes
			}
			if blockNotRun != "" {
				mode = modeParse
			}
			expect = &strings.Builder{}
			if bg, ok := strings.CutSuffix(strings.TrimSpace(command), " &"); ok && mode != modeParse {
				// A server for the commands after it.
				words := shellCommands(bg)
				m := addrRE.FindStringSubmatch(bg)
				if len(words) != 1 || !words[0].isRetrygate() || m == nil {
					errs = append(errs, fmt.Sprintf("%s:%d: a command in the background is one retrygate server with --addr HOST:PORT, so the commands after it can reach it", docRel(path), at))
					continue
				}
				// It listens on a port docaddrs hands out: $DOCADDRn
				// stands in for the address the docs give.
				v := slices.Index(addrs, m[1])
				if v < 0 {
					addrs, v = append(addrs, m[1]), len(addrs)
				}
				v++
				args := make([]string, len(words[0].words))
				for i, w := range words[0].words {
					args[i] = tsQuoteAddr(w, m[1], v)
				}
				fmt.Fprintf(&cmds, "exec %s &\n", strings.Join(args, " "))
				servers = append(servers, fmt.Sprintf("docbg %s:%d %d %s\n", docRel(path), at, n, mode))
				waitFor = append(waitFor, fmt.Sprintf("$DOCADDR%d", v))
				continue
			}
			for _, addr := range waitFor {
				fmt.Fprintf(&cmds, "waitport %s\n", addr)
			}
			waitFor = nil
			fmt.Fprintf(&cmds, "doc %s:%d %s %d %s %s\n", docRel(path), at, code, n, mode, tsQuote(command))
		case expect != nil:
			expect.WriteString(text + "\n")
		default:
			errs = append(errs, fmt.Sprintf("%s:%d: console block line before any $ command", docRel(path), line))
		}
	}
	if err := sc.Err(); err != nil {
		return "", 0, err
	}
	if inBlock {
		errs = append(errs, fmt.Sprintf("%s: unterminated ``` block", docRel(path)))
	}
	if len(errs) > 0 {
		return "", 0, errors.New(strings.Join(errs, "\n"))
	}
	if len(servers) > 0 {
		cmds.WriteString("kill -INT\nwait\n") // Ctrl-C, as the reader stops it
		cmds.WriteString(strings.Join(servers, ""))
	}
	head := ""
	if len(addrs) > 0 {
		head = "docaddrs " + strings.Join(addrs, " ") + "\n"
	}
	return head + cmds.String() + files.String(), n, nil
}

// tsQuote quotes one testscript argument: '…', a quote inside doubled.
func tsQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tsQuoteAddr quotes one testscript argument as tsQuote does, with
// $DOCADDRv in the place of each addr.
func tsQuoteAddr(s, addr string, v int) string {
	parts := strings.Split(s, addr)
	for i, p := range parts {
		if p != "" {
			parts[i] = tsQuote(p)
		}
	}
	return strings.Join(parts, fmt.Sprintf("$DOCADDR%d", v))
}

// cmdDoc runs one documented command with sh and checks its exit code and
// what it printed against the documented output.
func cmdDoc(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 5 {
		ts.Fatalf("usage: doc WHERE CODE N MODE 'command'|@FILE")
	}
	where, n, mode, command := args[0], args[2], args[3], args[4]
	want, _ := strconv.Atoi(args[1])
	if file, ok := strings.CutPrefix(command, "@"); ok {
		command = strings.TrimSuffix(ts.ReadFile(file), "\n")
	}
	if mode == modeParse {
		if err := parseOnly(ts, command); err != nil {
			ts.Fatalf("%s: `%s` (not run) does not parse: %v", where, command, err)
		}
		return
	}
	// A command whose stdout is piped or redirected sees no terminal.
	tty := "1"
	for _, c := range shellCommands(command) {
		if c.isRetrygate() && !c.toTerminal {
			tty = "0"
		}
	}
	ts.Setenv("RETRYGATE_FORCE_TTY", tty)
	defer ts.Setenv("RETRYGATE_FORCE_TTY", "1")
	script := command
	if mode == modeStatus {
		script = "set -e\n" + command // every line of a --help example must pass
	}
	if docUpdate && mode != modeStatus {
		script = "{\n" + command + "\n} 2>&1" // the order the docs will show
	}
	toTest, toDocs := docAddrs(ts)
	err := ts.Exec("sh", "-c", toTest.Replace(script))
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%s: %v", where, err)
		}
		got = ee.ExitCode()
	}
	stdout, stderr := toDocs.Replace(ts.ReadFile("stdout")), toDocs.Replace(ts.ReadFile("stderr"))
	if got != want {
		ts.Fatalf("%s: `%s` exited %d, the docs say %d\nstdout:\n%s\nstderr:\n%s", where, command, got, want, stdout, stderr)
	}
	if w := userWords(stdout + stderr); w != "" {
		ts.Fatalf("%s: `%s` printed %q: users do not have the articles; name the idea", where, command, w)
	}
	if mode == modeStatus {
		return
	}
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
	expected := ts.ReadFile("expect/" + n)
	if !docMatch(docLines(expected), docLines(stdout), docLines(stderr), mode == modeTimes) {
		ts.Fatalf("%s: `%s` printed:\n%s\non stderr:\n%s\nthe docs show:\n%s\n(RETRYGATE_UPDATE_GOLDEN=1 go test ./cmd/ -run TestDocs rewrites the docs from what the commands print)", where, command, stdout, stderr, expected)
	}
}

func docLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// docMatch reports whether want is an interleaving of the stdout lines
// out and the stderr lines errs: a terminal shows both, in an order the
// two pipes of a test do not keep.
func docMatch(want, out, errs []string, times bool) bool {
	if len(want) != len(out)+len(errs) {
		return false
	}
	norm := func(s string) string {
		s = strings.TrimRight(s, " ")
		if times {
			s = maskTimes(s)
		}
		return s
	}
	// seen[j][k]: want[:j+k] cannot be matched with out[:j], errs[:k] — or it can; memoised.
	memo := map[[2]int]bool{}
	var match func(j, k int) bool
	match = func(j, k int) bool {
		if j == len(out) && k == len(errs) {
			return true
		}
		key := [2]int{j, k}
		if v, ok := memo[key]; ok {
			return v
		}
		w := norm(want[j+k])
		ok := (j < len(out) && w == norm(out[j]) && match(j+1, k)) ||
			(k < len(errs) && w == norm(errs[k]) && match(j, k+1))
		memo[key] = ok
		return ok
	}
	return match(0, 0)
}

var (
	timestampRE  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	unixTimeRE   = regexp.MustCompile(`"created":\d+`)        // an OpenAI chunk's creation time, in seconds
	realSeedRE   = regexp.MustCompile(`seed \d+, real clock`) // a real-clock run's seed comes from the clock too
	measuredRE   = regexp.MustCompile(`\d+\.\d+(ms|s)?|\d+(ms|s)\b`)
	bareMillisRE = regexp.MustCompile(`^\d+$`)
	padRE        = regexp.MustCompile(` +`)
	ruleRE       = regexp.MustCompile(`─+`)
)

// maskTimes stands every timestamp and measured time in for any other,
// and the padding a table gives them.
func maskTimes(s string) string {
	s = timestampRE.ReplaceAllString(s, "<ts>")
	s = unixTimeRE.ReplaceAllString(s, `"created":<ts>`)
	s = realSeedRE.ReplaceAllString(s, "seed <seed>, real clock")
	s = measuredRE.ReplaceAllString(s, "<t>")
	s = bareMillisRE.ReplaceAllString(s, "<t>") // claim's milliseconds
	s = ruleRE.ReplaceAllString(s, "─")
	return padRE.ReplaceAllString(s, " ")
}

// userWordsRE is what user-facing text never says (DESIGN.md's words):
// users don't have the articles the product comes from.
var userWordsRE = regexp.MustCompile(`(?i)\bseeds? 00\d\b|\barticles?\b|free-seat scenario|\bDESIGN\.md\b`)

func userWords(s string) string { return userWordsRE.FindString(s) }

// shellCommand is one simple command of a shell line.
type shellCommand struct {
	words      []string
	toTerminal bool // stdout is not piped or redirected
}

// isRetrygate: the installed command or the binary the README builds
// (./retrygate).
func (c shellCommand) isRetrygate() bool {
	return len(c.words) > 0 && (c.words[0] == "retrygate" || c.words[0] == "./retrygate")
}

// shellCommands splits a sh line (or script) into its simple commands,
// enough to find each retrygate command's words and where its stdout
// goes: quotes and backslashes are honoured, $VAR and $(…) are kept as
// written (a retrygate command inside $(…) is found as its own command),
// a # comment and redirections are dropped.
func shellCommands(line string) []shellCommand {
	var cmds []shellCommand
	cur := shellCommand{toTerminal: true}
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			cur.words = append(cur.words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func(piped bool) {
		endWord()
		if piped {
			cur.toTerminal = false
		}
		if len(cur.words) > 0 {
			cmds = append(cmds, cur)
		}
		cur = shellCommand{toTerminal: true}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\' && i+1 < len(rs):
			i++
			if rs[i] != '\n' {
				word.WriteRune(rs[i])
				inWord = true
			}
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			word.WriteString(string(rs[i+1 : min(j, len(rs))]))
			inWord, i = true, j
		case r == '"':
			j := i + 1
			for j < len(rs) && rs[j] != '"' {
				if rs[j] == '\\' && j+1 < len(rs) {
					j++
				}
				word.WriteRune(rs[j])
				j++
			}
			inWord, i = true, j
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			// A command substitution: its commands are commands of their own.
			endWord()
			depth, j := 1, i+2
			for j < len(rs) && depth > 0 {
				switch rs[j] {
				case '(':
					depth++
				case ')':
					depth--
				}
				j++
			}
			for _, c := range shellCommands(string(rs[i+2 : max(i+2, j-1)])) {
				c.toTerminal = false // its stdout is captured
				cmds = append(cmds, c)
			}
			word.WriteString("$(…)")
			inWord, i = true, j-1
		case r == '#' && !inWord:
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
			endCmd(false)
		case r == '|':
			if i+1 < len(rs) && rs[i+1] == '|' {
				i++
				endCmd(false)
			} else {
				endCmd(true)
			}
		case r == '&' || r == ';' || r == '\n' || r == '(' || r == ')' || r == '{' && !inWord || r == '}' && !inWord:
			if r == '&' && i+1 < len(rs) && rs[i+1] == '&' {
				i++
			}
			endCmd(false)
		case r == '>' || r == '<':
			fd := "1"
			if r == '<' {
				fd = "0"
			}
			if inWord && (word.String() == "1" || word.String() == "2") {
				fd, inWord = word.String(), false
				word.Reset()
			}
			endWord()
			if i+1 < len(rs) && rs[i+1] == '>' {
				i++
			}
			if i+1 < len(rs) && rs[i+1] == '&' { // 2>&1: a dup, no file name
				i++
				for i+1 < len(rs) && rs[i+1] >= '0' && rs[i+1] <= '9' {
					i++
				}
			} else { // the file name
				for i+1 < len(rs) && rs[i+1] == ' ' {
					i++
				}
				for i+1 < len(rs) && !strings.ContainsRune(" \n;&|)", rs[i+1]) {
					i++
				}
			}
			if fd == "1" {
				cur.toTerminal = false
			}
		case r == ' ' || r == '\t':
			endWord()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd(false)
	return cmds
}

// parseOnly checks a command that is not run: valid sh, and every
// retrygate command in it parses, in the script's directory and
// environment (its config file is read): see parseOnlyMain.
func parseOnly(ts *testscript.TestScript, script string) error {
	if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
		return fmt.Errorf("sh -n: %v: %s", err, out)
	}
	found := false
	for _, c := range shellCommands(script) {
		if !c.isRetrygate() {
			continue
		}
		found = true
		ts.Setenv(parseOnlyEnv, "1")
		err := ts.Exec("retrygate", c.words[1:]...)
		ts.Setenv(parseOnlyEnv, "")
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(c.words, " "), err, ts.ReadFile("stderr"))
		}
	}
	if !found && strings.Contains(script, "retrygate ") {
		return errors.New("no retrygate command found in it")
	}
	return nil
}

// parseOnlyEnv makes the test binary, run as retrygate, parse its command
// line without running it (TestMain).
const parseOnlyEnv = "RETRYGATE_TEST_PARSE_ONLY"

// parseSeams build every command with a run function that does nothing:
// flags, config and arguments are resolved and checked (a --seat the
// config does not have is refused), and nothing is served, dialled, read
// or written. A command without one (a new one) has its flags parsed.
var parseSeams = map[string]func(*Factory) *cobra.Command{
	"retrygate admit":   func(f *Factory) *cobra.Command { return newAdmitCmd(f, func(*AdmitOptions) error { return nil }) },
	"retrygate check":   func(f *Factory) *cobra.Command { return newCheckCmd(f, func(*CheckOptions) error { return nil }) },
	"retrygate claim":   func(f *Factory) *cobra.Command { return newClaimCmd(f, func(*ClaimOptions) error { return nil }) },
	"retrygate cost":    func(f *Factory) *cobra.Command { return newCostCmd(f, func(*CostOptions) error { return nil }) },
	"retrygate db init": func(f *Factory) *cobra.Command { return newDBInitCmd(f, func(*DBInitOptions) error { return nil }) },
	"retrygate log export": func(f *Factory) *cobra.Command {
		return newLogExportCmd(f, func(*LogExportOptions) error { return nil })
	},
	"retrygate log import": func(f *Factory) *cobra.Command {
		return newLogImportCmd(f, func(*LogImportOptions) error { return nil })
	},
	"retrygate proxy":    func(f *Factory) *cobra.Command { return newProxyCmd(f, func(*ProxyOptions) error { return nil }) },
	"retrygate record":   func(f *Factory) *cobra.Command { return newRecordCmd(f, func(*RecordOptions) error { return nil }) },
	"retrygate rehearse": func(f *Factory) *cobra.Command { return newRehearseCmd(f, func(*RehearseOptions) error { return nil }) },
	"retrygate report":   func(f *Factory) *cobra.Command { return newReportCmd(f, func(*ReportOptions) error { return nil }) },
	"retrygate seat serve": func(f *Factory) *cobra.Command {
		return newSeatServeCmd(f, func(*SeatServeOptions) error { return nil })
	},
	"retrygate simulate": func(f *Factory) *cobra.Command { return newSimulateCmd(f, func(*SimulateOptions) error { return nil }) },
	"retrygate time":     func(f *Factory) *cobra.Command { return newTimeCmd(f, func(*TimeOptions) error { return nil }) },
	"retrygate tune":     func(f *Factory) *cobra.Command { return newTuneCmd(f, func(*TuneOptions) error { return nil }) },
}

// parseOnlyMain parses os.Args as retrygate would, and stops before the
// command runs: through its parse seam when it has one, else by parsing
// its flags and checking its argument count. It exits 2 on an error.
func parseOnlyMain() int {
	f := &Factory{IO: System(), Now: time.Now, Getenv: os.Getenv, Ctx: context.Background()}
	args := os.Args[1:]
	root := NewRootCmd(f)
	c, rest, err := root.Find(args)
	if err == nil {
		if seam, ok := parseSeams[c.CommandPath()]; ok {
			parent := c.Parent()
			parent.RemoveCommand(c)
			parent.AddCommand(seam(f))
			decorateFlags(root, f, true)
			root.SetArgs(args)
			err = root.Execute()
		} else {
			err = parseFlagsOnly(root, c, rest)
		}
	}
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.Err != nil {
			err = ee.Err
		}
		fmt.Fprintf(os.Stderr, "retrygate: %v\n", err)
		return ExitBad
	}
	return ExitOK
}

func parseFlagsOnly(root, c *cobra.Command, rest []string) error {
	if c == root && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return fmt.Errorf("unknown command %q", rest[0])
	}
	if !c.Runnable() && len(c.Commands()) > 0 {
		return fmt.Errorf("%q needs a subcommand", c.CommandPath())
	}
	c.InitDefaultHelpFlag()
	if err := c.ParseFlags(rest); err != nil {
		return err
	}
	return c.ValidateArgs(c.Flags().Args())
}

// The relative links of README.md and docs/*.md name files (and
// headings) the repository has, and no line of them names what users do
// not have (the articles, DESIGN.md).
func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range docFiles(t, root) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		user := !strings.HasPrefix(docRel(f), "docs/dev/") && !goSymbolsPending[docRel(f)]
		inCode := false
		for i, line := range strings.Split(string(data), "\n") {
			if w := userWords(line); w != "" {
				t.Errorf("%s:%d: says %q: users do not have the articles or DESIGN.md; name the idea", docRel(f), i+1, w)
			}
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
			}
			if w := goSymbolRE.FindString(line); user && w != "" {
				t.Errorf("%s:%d: names %q: a user reads the manual, not the source; say what it does", docRel(f), i+1, w)
			}
			if user && !inCode && strayStopRE.MatchString(line) {
				t.Errorf("%s:%d: a stray \" .\": %s", docRel(f), i+1, line)
			}
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.Join(filepath.Dir(f), path)
				}
				rel, err := filepath.Rel(root, file)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d: link %q leaves the repository", docRel(f), i+1, target)
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %q: no such file %s", docRel(f), i+1, target, rel)
					continue
				}
				if anchor != "" && !hasHeading(t, file, anchor) {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", docRel(f), i+1, target, rel, anchor)
				}
			}
		}
	}
}

// goSymbolRE is a Go name of retrygate's own (admit.Decide,
// rehearse.DefaultPolicy(), cmd/config.go): the maintainers' pages
// (docs/dev/) may name them, the user manual does not.
var goSymbolRE = regexp.MustCompile(`\b(admit|rehearse|ledgerfile|summary|seat|script|model|store|pgstore|claims|realtime|seatserver|metrics)\.[A-Z][A-Za-z]*\b|\b(cmd|admit|rehearse|ledgerfile|bench)/[a-z_/]*\.go\b`)

// goSymbolsPending are user pages that still name Go symbols, each with
// the reason it is allowed for now.
var goSymbolsPending = map[string]bool{
	"docs/proxy.md": true, // its owner is rewriting it (issue 35: its "in short" is net/http internals)
}

// strayStopRE is a full stop set off by a space (left where a citation
// was cut): "billed . Every".
var strayStopRE = regexp.MustCompile(`[\p{L})] \.( |$)`)

// hasHeading reports whether a markdown file has a heading whose GitHub
// anchor is anchor.
func hasHeading(t *testing.T, file, anchor string) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		h = strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")
		if h == anchor {
			return true
		}
	}
	return false
}

// docRel names a doc by its path in the repository: README.md,
// docs/x.md, docs/dev/x.md.
func docRel(path string) string {
	if filepath.Base(path) == "README.md" {
		return "README.md"
	}
	if filepath.Base(filepath.Dir(path)) == "dev" {
		return "docs/dev/" + filepath.Base(path)
	}
	return "docs/" + filepath.Base(path)
}

func TestDocsShellCommands(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string // each retrygate command's words, then "tty" or "piped"
	}{
		{"retrygate report testdata/logs/mixed.log | head -10", []string{"retrygate report testdata/logs/mixed.log piped"}},
		{"retrygate claim --job j1 2>&1   # exits 1", []string{"retrygate claim --job j1 tty"}},
		{"retrygate tune rehearsal.log > budget.yaml", []string{"retrygate tune rehearsal.log piped"}},
		{"retrygate report --json 2>/dev/null", []string{"retrygate report --json tty"}},
		{`while s=$(retrygate claim --job "$id" --seconds); do curl -d '{"a": 1}' x && break; done`, []string{`retrygate claim --job $id --seconds piped`}},
		{`retrygate simulate --model "lognormal p50=2.1s" --vs 'b c.yaml'`, []string{"retrygate simulate --model lognormal p50=2.1s --vs b c.yaml tty"}},
	} {
		var got []string
		for _, sc := range shellCommands(c.line) {
			if sc.isRetrygate() {
				where := "tty"
				if !sc.toTerminal {
					where = "piped"
				}
				got = append(got, strings.Join(sc.words, " ")+" "+where)
			}
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s:\n got %q\nwant %q", c.line, got, c.want)
		}
	}
}

// A command that is not run must still parse: a flag that does not exist,
// a bad value, a missing argument, an unknown command or a seat the config
// does not have is caught (testdata/script/docs_parse_only.txtar).
func TestDocsParseOnly(t *testing.T) {
	dir := t.TempDir()
	script := `parses 'retrygate proxy --seat scratch --listen 127.0.0.1:7000'
parses 'retrygate db init postgres://retrygate@db.internal/retrygate'
parses 'retrygate log export postgres://retrygate@db.internal/retrygate > rehearsal.log'
parses 'id=x; while s=$(retrygate claim --job "$id" --deadline 45s --seconds); do break; done'
parses 'retrygate report --by outcome rehearsal.log'
! parses 'retrygate proxy --seat openai'
stderr 'no seat named "openai"'
! parses 'retrygate proxy --sate scratch'
! parses 'retrygate claim --job j --deadline soon'
! parses 'retrygate log import'
! parses 'retrygate nosuch --x'
! parses 'retrygate report --by colour'
! parses 'retrygate report ''unterminated'
-- retrygate.yaml --
seats:
  scratch: {kind: openai, base_url: https://api.openai.com/v1, model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
`
	if err := os.WriteFile(filepath.Join(dir, "parse.txtar"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: dir,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"parses": func(ts *testscript.TestScript, neg bool, args []string) {
				err := parseOnly(ts, args[0])
				if err == nil && neg {
					ts.Fatalf("%s: parsed", args[0])
				}
				if err != nil && !neg {
					ts.Fatalf("%s: %v", args[0], err)
				}
			},
		},
	})
}

// cmdDocAddrs gives each server of a walkthrough a port of the
// test's own (reservePort), held until the script ends, in the place
// of the address the docs give it, so two runs at once never want one
// port both: `docaddrs 127.0.0.1:21357` sets $DOCADDR1 to 127.0.0.1:P
// for the server's --addr and waitport, and $DOCADDRS to the pairs
// docAddrs maps commands and outputs by. The files the walkthrough
// reads that name an address (its saved blocks, the repository's
// testdata) name the new one in this script's copy (docMapFiles).
func cmdDocAddrs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: docaddrs HOST:PORT...")
	}
	var pairs []string
	for i, addr := range args {
		host, _, err := net.SplitHostPort(addr)
		ts.Check(err)
		port, release, err := reservePort()
		ts.Check(err)
		ts.Defer(release)
		to := net.JoinHostPort(host, strconv.Itoa(port))
		ts.Setenv(fmt.Sprintf("DOCADDR%d", i+1), to)
		pairs = append(pairs, addr, to)
	}
	ts.Setenv("DOCADDRS", strings.Join(pairs, " "))
	ts.Check(docMapFiles(ts.Getenv("WORK"), filepath.Join(ts.Getenv("REPO"), "testdata"), args, strings.NewReplacer(pairs...)))
}

// docAddrs maps the docs' server addresses to the test's ($DOCADDRS),
// and back.
func docAddrs(ts *testscript.TestScript) (toTest, toDocs *strings.Replacer) {
	pairs := strings.Fields(ts.Getenv("DOCADDRS"))
	back := make([]string, len(pairs))
	for i := 0; i+1 < len(pairs); i += 2 {
		back[i], back[i+1] = pairs[i+1], pairs[i]
	}
	return strings.NewReplacer(pairs...), strings.NewReplacer(back...)
}

// docMapFiles rewrites, with r, the blocks the reader saves as files
// (work/docfile) that name one of addrs, and puts in the place of the
// link work/testdata → testdata a copy of it where the files that name
// one are rewritten and every other entry is a link. (The outputs the
// docs show, work/expect, are left as they are: docAddrs maps what the
// commands print back.)
func docMapFiles(work, testdata string, addrs []string, r *strings.Replacer) error {
	names := func(b []byte) bool {
		return slices.ContainsFunc(addrs, func(a string) bool { return bytes.Contains(b, []byte(a)) })
	}
	var mapped []string // under testdata
	for _, root := range []string{filepath.Join(work, "docfile"), testdata} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil // no block to save
			}
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil || !names(b) {
				return err
			}
			if root == testdata {
				mapped = append(mapped, p)
				return nil
			}
			return os.WriteFile(p, []byte(r.Replace(string(b))), 0o644)
		})
		if err != nil {
			return err
		}
	}
	if len(mapped) == 0 {
		return nil
	}
	link := filepath.Join(work, "testdata")
	if err := os.Remove(link); err != nil {
		return err
	}
	var copyDir func(src, dst string) error
	copyDir = func(src, dst string) error {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
			switch {
			case slices.Contains(mapped, s):
				b, err := os.ReadFile(s)
				if err == nil {
					err = os.WriteFile(d, []byte(r.Replace(string(b))), 0o644)
				}
				if err != nil {
					return err
				}
			case slices.ContainsFunc(mapped, func(m string) bool { return strings.HasPrefix(m, s+string(filepath.Separator)) }):
				if err := copyDir(s, d); err != nil {
					return err
				}
			default:
				if err := os.Symlink(s, d); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return copyDir(testdata, link)
}

// cmdDocBackground checks, once the servers have stopped, that the lines
// the docs show under a server's command are among what it printed, in
// order (it printed more as requests came): `docbg WHERE N MODE`.
func cmdDocBackground(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: docbg WHERE N MODE")
	}
	where, n, mode := args[0], args[1], args[2]
	_, toDocs := docAddrs(ts)
	out, errs := docLines(toDocs.Replace(ts.ReadFile("stdout"))), docLines(toDocs.Replace(ts.ReadFile("stderr")))
	norm := func(s string) string {
		s = strings.TrimRight(s, " ")
		if mode == modeTimes {
			s = maskTimes(s)
		}
		return s
	}
	find := func(lines []string, from int, w string) int {
		for i := from; i < len(lines); i++ {
			if norm(lines[i]) == w {
				return i
			}
		}
		return -1
	}
	j, k := 0, 0 // the next stdout and stderr lines to look at
	for _, want := range docLines(ts.ReadFile("expect/" + n)) {
		w := norm(want)
		if i := find(out, j, w); i >= 0 {
			j = i + 1
		} else if i := find(errs, k, w); i >= 0 {
			k = i + 1
		} else {
			ts.Fatalf("%s: the server did not print %q (in that order)\nstdout:\n%s\nstderr:\n%s", where, want, ts.ReadFile("stdout"), ts.ReadFile("stderr"))
		}
	}
}
