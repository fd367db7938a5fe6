package cmd

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flagRepo is the repository root, read before any test changes directory.
var flagRepo = func() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..")
}()

// flagSpec says which values of one flag are bad. Every flag of every
// subcommand must have one: a new flag without an entry fails
// TestEveryFlagHasASpec, so whoever adds it decides what a bad value is.
type flagSpec struct {
	bad  []string
	free bool // free text: no value is bad (say why in a comment)
	// base replaces the command's base arguments for this flag, when the
	// flag only means something beside others (admit --job with --log).
	base []string
	// path: the flag names a file; an error may name the file (quoted, as
	// %q prints it) instead of the flag. An empty value must name the flag.
	path bool
}

// Bad values by meaning. Every flag is given its value as --name=value,
// so an empty value is really empty and a leading '-' is not a flag.
var (
	flagBadDuration = []string{"-1s", "-5", "NaN", "+Inf", "", "  ", "1e400", "876001h", "99999999999", "5 parsecs", "10x", "1,5", "1s2"}
	flagBadPositive = append(slices.Clone(flagBadDuration), "0", "0s")
	flagBadCount    = []string{"-1", "NaN", "", "1e30", "99999999999999999999", "1.5", "5s", "ten", "0x10"}
	flagBadUSD      = []string{"-0.01", "NaN", "Inf", "", "1e400", "1e13", "5s", "1,50", "$"}
	flagBadRate     = []string{"-0.1", "NaN", "", "1.5", "150%", "-5%", "5s", "1e400"}
	flagBadInt      = []string{"-1", "NaN", "", "99999999999999999999", "1.5", "5s", "0x"}
	flagBadUint     = []string{"-1", "NaN", "", "1e400", "99999999999999999999999", "1.5"}
	flagBadBool     = []string{"maybe", "", "2", "yes please"}
	flagBadPath     = []string{"", ".", "no-such-dir/x"}
	flagBadOutPath  = []string{"", ".", "no-such-dir/rehearsal.log"}
	flagBadTime     = []string{"", "yesterday", "2026-13-01T00:00:00Z", "2026-03-14 09:00:00", "NaN"}
	flagBadRamp     = []string{"", "/s", "0", "1,,2", "x", "-1", "NaN", "1,Inf", "2e7", "1;2"}
	flagBadLayers   = []string{"", "sdk", "sdk=0", "sdk=-1", "sdk=x", "=3", "sdk=3,,app=2", "sdk=NaN", "sdk=99999999999", "sdk=1.5"}
)

func flagWith(list []string, more ...string) []string { return append(slices.Clone(list), more...) }

// flagSpecs is every flag, keyed "<command path after retrygate> --<flag>";
// "* --name" is a persistent flag every command inherits.
var flagSpecs = map[string]flagSpec{
	"* --config": {bad: []string{"", ".", "no-such.yaml", "no-such-dir/retrygate.yaml"}, path: true},
	"* --wide":   {bad: flagBadBool},

	// admit: the budget, the spend, the next attempt.
	"admit --deadline":      {bad: flagBadPositive},
	"admit --token-ceiling": {bad: flagWith(flagBadCount, "0")},
	"admit --max-attempts":  {bad: flagWith(flagBadCount, "0", "1001")},
	"admit --max-wait":      {bad: flagBadPositive},
	"admit --max-spend":     {bad: flagBadUSD},
	"admit --spent":         {bad: flagBadDuration},
	"admit --spent-tokens":  {bad: flagBadCount},
	"admit --used":          {bad: flagWith(flagBadCount, "2000000")},
	"admit --spent-usd":     {bad: flagBadUSD},
	"admit --next-wait":     {bad: flagBadDuration},
	"admit --next-elapsed":  {bad: flagBadDuration},
	"admit --next-tokens":   {bad: flagBadCount},
	"admit --next-usd":      {bad: flagBadUSD},
	// A log that is not there yet has no rows (the job's first attempt):
	// not a bad value for admit.
	"admit --log":  {bad: []string{"", "."}, path: true, base: []string{"--job", "a"}},
	"admit --job":  {bad: []string{"", "   "}, base: []string{"--log", "rehearsal.log"}},
	"admit --seat": {free: true}, // a seat name to filter rows by: any text
	"admit --json": {bad: flagBadBool},

	// record: one hand-timed attempt.
	"record --deadline":          {bad: flagBadPositive},
	"record --token-ceiling":     {bad: flagWith(flagBadCount, "0")},
	"record --max-attempts":      {bad: flagWith(flagBadCount, "0", "1001")},
	"record --max-wait":          {bad: flagBadPositive},
	"record --max-spend":         {bad: flagBadUSD},
	"record --job":               {bad: []string{"", "   ", "a\nb", "a\rb"}},
	"record --seat":              {free: true},                          // a name; the log quotes it
	"record --model":             {free: true},                          // a name; the log quotes it
	"record --wait":              {bad: flagWith(flagBadDuration, "9")}, // 9 > --elapsed 2
	"record --elapsed":           {bad: flagWith(flagBadDuration, "0.5")},
	"record --ttfb":              {bad: flagBadDuration},
	"record --tokens":            {bad: flagBadCount},
	"record --prompt-tokens":     {bad: flagBadCount},
	"record --completion-tokens": {bad: flagBadCount},
	"record --outcome":           {bad: []string{"", "okay", "timeout,ok", "5s", "-1"}},
	"record --http-status":       {bad: flagWith(flagBadCount, "99", "600", "0")},
	"record --cost":              {bad: flagBadUSD},
	"record --holdout":           {bad: flagBadBool},
	"record --note":              {bad: []string{"a\nb", "a\rb"}},
	"record --ts":                {bad: flagBadTime},
	"record --log":               {bad: flagBadOutPath, path: true},
	"record --fsync":             {bad: flagBadBool},

	// claim: a deadline made once.
	"claim --job": {bad: []string{"", "   "}},
	// claim makes the state's directory (.retrygate/) when it is missing.
	"claim --state":        {bad: []string{"", "."}, path: true},
	"claim --deadline":     {bad: flagBadPositive},
	"claim --max-attempts": {bad: flagWith(flagBadCount, "0", "1001")},
	"claim --hard-timeout": {bad: flagBadPositive},
	"claim --done":         {bad: flagBadBool},
	"claim --seconds":      {bad: flagBadBool},

	// rehearse.
	"rehearse --deadline":      {bad: flagBadPositive},
	"rehearse --token-ceiling": {bad: flagWith(flagBadCount, "0")},
	"rehearse --max-attempts":  {bad: flagWith(flagBadCount, "0", "1001")},
	"rehearse --max-wait":      {bad: flagBadPositive},
	"rehearse --max-spend":     {bad: flagBadUSD},
	// An empty --seat (a script's unset $SEAT) must not run the demo into the log.
	"rehearse --seat":        {bad: []string{"", "no-such-seat"}},
	"rehearse --jobs":        {bad: flagWith(flagBadInt, "0", "100000001")},
	"rehearse --concurrency": {bad: flagWith(flagBadInt, "0", "10001")},
	"rehearse --prompt":      {bad: []string{"", "   ", "\n"}},
	"rehearse --prompt-file": {bad: flagBadPath, path: true},
	"rehearse --max-tokens":  {bad: flagWith(flagBadInt, "0", "4611686018427387904")},
	"rehearse --log":         {bad: flagBadOutPath, path: true},
	"rehearse --holdout":     {bad: flagBadBool},
	"rehearse --seed":        {bad: flagBadUint},
	"rehearse --json":        {bad: flagBadBool},
	"rehearse --rate":        {bad: flagWith(flagBadUSD, "0", "2e6")},
	"rehearse --duration":    {bad: flagBadPositive},
	"rehearse --ramp":        {bad: flagBadRamp},
	"seat serve --slots":     {bad: flagWith(flagBadInt, "1000001"), base: []string{"--script", "builtin:seed003"}},
	"rehearse --ramp-step":   {bad: flagBadPositive, base: []string{"--ramp", "1,2"}},

	// a prompt set: a file, read in order or drawn with the seed.
	"rehearse --prompts":      {bad: flagBadPath, path: true},
	"rehearse --prompt-order": {bad: []string{"", "bogus", "seq,random"}},

	// proxy: what one client is, and its share of the request slots.
	"proxy --max-client-concurrent": {bad: flagWith(flagBadInt, "257")}, // over --max-concurrent
	"proxy --client-prefix-v4":      {bad: flagWith(flagBadInt, "0", "33")},
	"proxy --client-prefix-v6":      {bad: flagWith(flagBadInt, "0", "129")},

	"proxy --deadline":        {bad: flagBadPositive},
	"proxy --token-ceiling":   {bad: flagWith(flagBadCount, "0")},
	"proxy --max-attempts":    {bad: flagWith(flagBadCount, "0", "1001")},
	"proxy --max-wait":        {bad: flagBadPositive},
	"proxy --max-spend":       {bad: flagBadUSD},
	"proxy --seat":            {bad: []string{"", "no-such-seat"}},
	"proxy --listen":          {bad: []string{"", "nope", "127.0.0.1:99999", "127.0.0.1:-1"}},
	"proxy --log":             {bad: flagBadOutPath, path: true},
	"proxy --max-body":        {bad: flagWith(flagBadInt, "0", "1073741825")},
	"proxy --max-concurrent":  {bad: flagWith(flagBadInt, "0", "100001")},
	"proxy --max-jobs":        {bad: flagWith(flagBadInt, "0", "10000001")},
	"proxy --max-client-jobs": {bad: flagWith(flagBadInt, "100001")}, // over --max-jobs
	"proxy --job-retention":   {bad: flagBadPositive},
	"proxy --pass-unknown":    {bad: flagBadBool},
	"proxy --shadow":          {bad: flagBadBool},
	"proxy --max-body-total":  {bad: flagWith(flagBadInt, "0", "1099511627777")},
	"proxy --max-conns":       {bad: flagWith(flagBadInt, "0", "1000001")},
	"proxy --max-held":        {bad: flagWith(flagBadInt, "0", "10000001")},

	// report.
	"report --by":         {bad: []string{"", "bogus", "seat,job"}},
	"report --since":      {bad: []string{"", "yesterday", "0", "-5m", "NaN", "2026-13-01T00:00:00Z", "5 parsecs"}},
	"report --json":       {bad: flagBadBool},
	"report --csv":        {bad: flagBadBool},
	"report --hist":       {bad: []string{"bogus", "wait,tokens", "5s"}},
	"report --skip-bad":   {bad: flagBadBool},
	"report --max-tokens": {bad: flagWith(flagBadInt, "9223372036854775807")},
	"report --html":       {bad: flagBadOutPath, path: true},
	"report --svg":        {bad: []string{"", "no-such-dir/charts"}, path: true},
	"report --png":        {bad: []string{"", "no-such-dir/charts"}, path: true},

	// check.
	"check --policy":   {bad: flagBadPath, path: true},
	"check --json":     {bad: flagBadBool},
	"check --skip-bad": {bad: flagBadBool},
	"check --format":   {bad: []string{"", "githb", "xml", "JSON "}},
	"check --junit":    {bad: flagBadOutPath, path: true},
	"check --html":     {bad: flagBadOutPath, path: true},

	// tune.
	"tune --json":     {bad: flagBadBool},
	"tune --skip-bad": {bad: flagBadBool},
	"tune --margin":   {bad: []string{"0.5", "-1", "NaN", "Inf", "", "1e400", "101", "5s"}},

	// simulate.
	"simulate --policy":    {bad: flagBadPath, path: true},
	"simulate --vs":        {bad: flagBadPath, path: true},
	"simulate --model":     {bad: []string{"", "lognormal", "lognormal p50=-1s p99=2s", "lognormal p50=NaN p99=2s", "lognormal p50=2s p99=1s", "bogus p50=1s", "log:", "script:no-such.yaml"}},
	"simulate --jobs":      {bad: flagWith(flagBadCount, "0", "100000001")},
	"simulate --rate":      {bad: flagWith(flagBadUSD, "0")},
	"simulate --seed":      {bad: flagBadUint},
	"simulate --layers":    {bad: flagBadLayers},
	"simulate --json":      {bad: flagBadBool},
	"simulate --duration":  {bad: flagBadPositive},
	"simulate --ramp":      {bad: flagBadRamp},
	"simulate --ramp-step": {bad: flagBadPositive, base: []string{"--ramp", "1,2"}},
	"simulate --html":      {bad: flagBadOutPath, path: true},

	// cost.
	"cost --fail-rate":            {bad: flagBadRate},
	"cost --retries":              {bad: flagWith(flagBadCount, "1001")},
	"cost --timeout-rate":         {bad: flagBadRate},
	"cost --cost":                 {bad: flagBadUSD},
	"cost --fallback-cost":        {bad: flagBadUSD, base: []string{"--cost", "0.02", "--attempts-per-success", "1.4"}},
	"cost --attempts-per-success": {bad: flagWith(flagBadUSD, "0.5", "0"), base: []string{"--cost", "0.02"}},
	"cost --layers":               {bad: flagBadLayers},
	"cost --prices":               {bad: []string{"", "in", "in=-1", "in=x", "=3", "in=3,,out=1", "in=NaN", "ot=1", "in=1e400", "in=1,in=2"}, base: []string{"--usage", "prompt=10,completion=1"}},
	"cost --usage":                {bad: []string{"", "prompt", "prompt=-1", "prompt=x", "=3", "prompt=1.5", "prompt=1,cached=5", "promt=1", "prompt=1e30"}, base: []string{"--prices", "in=3,out=15"}},
	"cost --json":                 {bad: flagBadBool},

	// seat serve and time (issue 3): the flags the issue names.
	"seat serve --script":       {bad: flagBadPath, path: true},
	"seat serve --format":       {bad: []string{"", "grpc", "openai,anthropic"}},
	"seat serve --addr":         {bad: []string{"", "0.0.0.0:0", ":0", "10.0.0.1:0", "example.com:80", "nope", "127.0.0.1:99999", "127.0.0.1:-1"}},
	"seat serve --allow-remote": {bad: flagBadBool},
	"time --seat":               {bad: []string{"", "no-such-seat"}},
	"time --json":               {bad: flagBadBool},
	"time --call":               {bad: flagWith(flagBadCount, "0", "2147483648")},
	"time --hard-timeout":       {bad: flagBadPositive},
	"time --wait-cap":           {bad: flagBadDuration}, // 0 means no cap
	"time --max-tokens":         {bad: flagWith(flagBadCount, "0", "16777217")},
	"time --prompt":             {bad: []string{"", "   ", "\n"}},
	"time --prompt-file":        {bad: flagBadPath, path: true},
	// The job goes out as the Idempotency-Key header: one line, or the
	// request fails as a confusing connection error.
	"time --job": {bad: []string{"a\nb", "a\rb"}},

	// proxy --metrics: off when empty; a listener of its own.
	"proxy --metrics": {bad: []string{"nope", "127.0.0.1:99999", "127.0.0.1:-1"}},
}

// flagBase is a valid command line (after the command path) for each
// command, run in flagDir: it must succeed, so that a bad flag added to
// it is what fails.
var flagBase = map[string][]string{
	"admit":    {"--spent", "1", "--spent-tokens", "10", "--used", "0", "--next-wait", "1", "--next-elapsed", "2", "--next-tokens", "10"},
	"record":   {"--job", "flagjob", "--wait", "1", "--elapsed", "2", "--tokens", "10"},
	"claim":    {"--job", "flagjob"},
	"rehearse": {}, // the built-in demo: no config here
	"report":   {},
	"check":    {"--policy", "pass.yaml"},
	"tune":     {},
	"simulate": {"--model", "lognormal p50=0.5s p99=2s", "--jobs", "20"},
	"cost":     {"--fail-rate", "0.05", "--retries", "3"},
	// seat serve runs until its context ends (the runner's timeout).
	"seat serve": {"--script", "seed003.yaml", "--addr", "127.0.0.1:0"},
	"time":       {"--seat", "scratch", "--config", "time.yaml"},
	// db and log take a PostgreSQL URL and only the root's flags, which
	// every other command tests.
	"db init":    nil,
	"log export": nil,
	"log import": nil,
	// proxy serves until its context ends (the runner's timeout).
	"proxy": {"--seat", "scratch", "--config", "proxy.yaml", "--listen", "127.0.0.1:0"},
}

// flagDir is a fresh directory holding a seeded rehearsal.log, a policy
// and a script, and no retrygate.yaml.
func flagDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	copyFile := func(from, to string) {
		data, err := os.ReadFile(filepath.Join(flagRepo, from))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, to), data, 0o644))
	}
	copyFile("testdata/logs/mixed.log", "rehearsal.log")
	copyFile("testdata/policies/pass.yaml", "pass.yaml")
	copyFile("testdata/seats/seed003.yaml", "seed003.yaml")
	// time's seat: a script seat, so no network is needed.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "time.yaml"),
		[]byte("seats:\n  scratch: {kind: script, script: seed003.yaml}\n"), 0o644))
	// proxy's seat: never called, the runner stops it first.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "proxy.yaml"),
		[]byte("seats:\n  scratch: {kind: openai, base_url: \"http://127.0.0.1:9/v1\", model: m}\n"), 0o644))
	return dir
}

// flagSnapshot is every file under dir with its bytes.
func flagSnapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = nil
			return nil
		}
		data, err := os.ReadFile(p)
		out[rel] = data
		return err
	})
	require.NoError(t, err)
	return out
}

// flagRun runs one command line in process in dir, bounded in time: a
// command that accepted a bad value and went on to serve or rehearse is
// stopped by its context.
func flagRun(t *testing.T, dir string, timeout time.Duration, args []string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	ios, _, out, errOut := TestStreams()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env := map[string]string{}
	f := &Factory{
		IO:     ios,
		Now:    func() time.Time { return time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC) },
		Getenv: func(k string) string { return env[k] },
		Ctx:    ctx,
	}
	done := make(chan int, 1)
	go func() { done <- Run(f, args) }()
	select {
	case code = <-done:
	case <-time.After(timeout + 10*time.Second):
		t.Fatalf("retrygate %s: still running %s after its context ended", strings.Join(args, " "), timeout+10*time.Second)
	}
	return code, out.String(), errOut.String()
}

// flagCommand is one runnable subcommand and the flags it takes.
type flagCommand struct {
	path  string // "record", "seat serve"
	flags []*pflag.Flag
}

// flagCommands walks the tree from NewRootCmd. Hidden commands count:
// they take flags too.
func flagCommands(t *testing.T) []flagCommand {
	t.Helper()
	ios, _, _, _ := TestStreams()
	root := NewRootCmd(&Factory{IO: ios, Now: time.Now, Getenv: func(string) string { return "" }})
	var out []flagCommand
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		// Cobra's own help and completion commands (and the per-shell
		// completion subcommands) take only cobra's flags.
		builtin := c.Name() == "help" || c.Name() == "completion" || (c.Parent() != nil && c.Parent().Name() == "completion")
		// A group (seat) only refuses unknown subcommands; its subcommands
		// carry the flags.
		if c == root || !c.Runnable() || c.HasSubCommands() || builtin {
			return
		}
		fc := flagCommand{path: strings.TrimPrefix(c.CommandPath(), root.Name()+" ")}
		add := func(fl *pflag.Flag) {
			if fl.Name == "help" || fl.Name == "version" {
				return
			}
			fc.flags = append(fc.flags, fl)
		}
		c.LocalFlags().VisitAll(add)
		c.InheritedFlags().VisitAll(add)
		out = append(out, fc)
	}
	walk(root)
	require.NotEmpty(t, out)
	return out
}

func flagSpecFor(cmdPath, name string) (flagSpec, bool) {
	if s, ok := flagSpecs[cmdPath+" --"+name]; ok {
		return s, true
	}
	s, ok := flagSpecs["* --"+name]
	return s, ok
}

// TestEveryFlagHasASpec: a new flag must come with a decision about its
// bad values (or a note that it takes free text), and every spec names a
// flag that exists: a spec left behind by a renamed or removed flag tests
// nothing while it reads as coverage.
func TestEveryFlagHasASpec(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range flagCommands(t) {
		if _, ok := flagBase[c.path]; !ok {
			t.Errorf("command %q has no entry in flagBase: give it a valid command line so its flags can be tested", c.path)
		}
		for _, fl := range c.flags {
			key := c.path + " --" + fl.Name
			s, ok := flagSpecFor(c.path, fl.Name)
			if !ok {
				t.Errorf("flag %q has no entry in flagSpecs (cmd/flags_test.go): list its bad values, or mark it free text", key)
				continue
			}
			if !s.free && len(s.bad) == 0 {
				t.Errorf("flag %q: no bad values and not marked free text", key)
			}
			seen[key] = true
			seen["* --"+fl.Name] = true
		}
	}
	for key := range flagSpecs {
		if !seen[key] {
			t.Errorf("flagSpecs entry %q matches no flag: remove it, or fix its command or flag name", key)
		}
	}
}

// TestFlagBadValues walks every flag of every subcommand with bad values:
// each must exit 2 with a message naming the flag, never panic, and
// write nothing — no new file, the seeded log byte-for-byte unchanged.
func TestFlagBadValues(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of command lines")
	}
	for _, c := range flagCommands(t) {
		base, ok := flagBase[c.path]
		if !ok {
			continue // TestEveryFlagHasASpec says so
		}
		t.Run(strings.ReplaceAll(c.path, " ", "_"), func(t *testing.T) {
			if base == nil {
				t.Skip("only the root's flags, tested on every other command")
			}
			// The control: the base line must work, or the test proves nothing.
			dir := flagDir(t)
			args := append(strings.Fields(c.path), base...)
			code, _, stderr := flagRun(t, dir, 3*time.Second, args)
			require.Contains(t, []int{ExitOK, ExitRefuse}, code, "control run %q must work: %s", args, stderr)
			for _, fl := range c.flags {
				s, ok := flagSpecFor(c.path, fl.Name)
				if !ok || s.free {
					continue
				}
				fbase := base
				if s.base != nil {
					fbase = s.base
				}
				for _, bad := range s.bad {
					t.Run(fl.Name+"="+flagLabel(bad), func(t *testing.T) {
						flagCheckBad(t, c.path, fbase, fl.Name, bad, s)
					})
				}
			}
		})
	}
}

func flagLabel(v string) string {
	if v == "" {
		return "EMPTY"
	}
	return strings.NewReplacer("\n", `\n`, "\r", `\r`, "/", "_", " ", "_").Replace(v)
}

func flagCheckBad(t *testing.T, cmdPath string, base []string, name, bad string, s flagSpec) {
	dir := flagDir(t)
	before := flagSnapshot(t, dir)
	args := append(append(strings.Fields(cmdPath), base...), "--"+name+"="+bad)
	code, stdout, stderr := flagRun(t, dir, 3*time.Second, args)
	line := "retrygate " + strings.Join(args, " ")
	assert.NotContains(t, stderr, "internal error", "%s: a panic", line)
	assert.NotContains(t, stderr, "goroutine ", "%s: a stack trace", line)
	assert.Equal(t, ExitBad, code, "%s: a bad value is exit 2\nstdout: %s\nstderr: %s", line, stdout, stderr)
	named := strings.Contains(stderr, "--"+name)
	if !named && s.path && strings.TrimSpace(bad) != "" {
		// A file's error may name the file instead: "x.yaml": … or x.yaml: …
		named = strings.Contains(stderr, `"`+bad+`"`) || strings.Contains(stderr, " "+bad+": ")
	}
	assert.True(t, named, "%s: the message must name --%s; stderr: %s", line, name, stderr)
	assert.Empty(t, stdout, "%s: nothing on stdout", line)
	after := flagSnapshot(t, dir)
	for file, data := range after {
		old, ok := before[file]
		if !ok {
			t.Errorf("%s: created %s", line, file)
		} else if !bytes.Equal(old, data) {
			t.Errorf("%s: changed %s", line, file)
		}
	}
}
