package cmd

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The CI formats, byte for byte, for a failing and a passing policy.
func TestCheckCIFormatsGolden(t *testing.T) {
	tests := []struct {
		name string
		code int
		args []string
	}{
		{"check/tight.github", ExitRefuse, []string{"check", "--policy", policies + "tight.yaml", "--format", "github", mixedLog}},
		{"check/pass.github", ExitOK, []string{"check", "--policy", policies + "pass.yaml", "--format", "github", mixedLog}},
		{"check/tight.junit.xml", ExitRefuse, []string{"check", "--policy", policies + "tight.yaml", "--format", "junit", mixedLog}},
		{"check/pass.junit.xml", ExitOK, []string{"check", "--policy", policies + "pass.yaml", "--format", "junit", mixedLog}},
		// --format tsv on a terminal is the piped text; --format table a
		// bordered one even through a pipe.
		{"check/pass.txt", ExitOK, []string{"check", "--policy", policies + "pass.yaml", "--format", "tsv", mixedLog}},
		{"check/tight.json", ExitRefuse, []string{"check", "--policy", policies + "tight.yaml", "--format", "json", mixedLog}},
		// A shadow proxy's log: every format says what enforcing would change.
		{"check/shadow.txt", ExitRefuse, []string{"check", "--policy", policies + "seed003.yaml", "--format", "tsv", shadowLog}},
		{"check/shadow.json", ExitRefuse, []string{"check", "--policy", policies + "seed003.yaml", "--format", "json", shadowLog}},
		{"check/shadow.github", ExitRefuse, []string{"check", "--policy", policies + "seed003.yaml", "--format", "github", shadowLog}},
		{"check/shadow.junit.xml", ExitRefuse, []string{"check", "--policy", policies + "seed003.yaml", "--format", "junit", shadowLog}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := reportRun(t, true, "", tt.args...)
			require.Equal(t, tt.code, code)
			golden(t, tt.name, out)
		})
	}
	code, out, _ := reportRun(t, false, "", "check", "--policy", policies+"tight.yaml", "--format", "table", mixedLog)
	require.Equal(t, ExitRefuse, code)
	golden(t, "check/tight.table", out)
}

// What a GitHub runner acts on: an error per failed threshold at its
// policy line, an error at the held-out row the budget refuses, and the
// verdict; a passing policy has no error at all.
func TestCheckGitHubAnnotations(t *testing.T) {
	_, out, _ := reportRun(t, false, "", "check", "--policy", policies+"tight.yaml", "--format", "github", mixedLog)
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "::error ") {
			errs = append(errs, l[:strings.Index(l, ",title=")])
		}
	}
	assert.Equal(t, []string{
		"::error file=../testdata/policies/tight.yaml,line=7",
		"::error file=../testdata/policies/tight.yaml,line=9",
		"::error file=../testdata/policies/tight.yaml,line=10",
		"::error file=../testdata/logs/mixed.log,line=73",
	}, errs)
	assert.Contains(t, out, "\n::notice title=retrygate check::check FAIL: 3 of 5 thresholds failed; 1 held-out attempt refused;")

	_, out, _ = reportRun(t, false, "", "check", "--policy", policies+"pass.yaml", "--format", "github", mixedLog)
	assert.NotContains(t, out, "::error")
	assert.Contains(t, out, "\n::notice title=retrygate check::check PASS: 12 thresholds passed;")

	// Every threshold passes and the held-out row fails the check: the
	// notice and the JUnit output word the verdict as the text does.
	_, out, _ = reportRun(t, false, "", "check", "--policy", policies+"seed003.yaml", "--format", "github", seedHoldLog)
	assert.Contains(t, out, "\ncheck: FAIL (1 threshold passed; 1 held-out attempt refused)\n")
	assert.Contains(t, out, "\n::notice title=retrygate check::check FAIL: 1 threshold passed; 1 held-out attempt refused;")
	_, out, _ = reportRun(t, false, "", "check", "--policy", policies+"seed003.yaml", "--format", "junit", seedHoldLog)
	assert.Contains(t, out, "<system-out>check FAIL: 1 threshold passed; 1 held-out attempt refused;")
}

func TestWorkflowCommandEscaping(t *testing.T) {
	var b strings.Builder
	writeWorkflowCommand(&b, "error", "dir,a/p:1.yaml", 3, "t: 50%, a\r\nb", "100% done\r\nnext: a,b")
	assert.Equal(t, "::error file=dir%2Ca/p%3A1.yaml,line=3,title=t%3A 50%25%2C a%0D%0Ab::100%25 done%0D%0Anext: a,b\n", b.String())
	b.Reset()
	writeWorkflowCommand(&b, "notice", "", 7, "", "x")
	assert.Equal(t, "::notice::x\n", b.String(), "no file: no line either")
}

func TestAnnotationFileIsRelativeToTheWorkspace(t *testing.T) {
	ws := filepath.FromSlash("/home/runner/work/app/app")
	opts := &CheckOptions{Workspace: ws}
	assert.Equal(t, "policies/retrygate.yaml", annotationFile(opts, filepath.Join(ws, "policies", "retrygate.yaml")))
	assert.Equal(t, "retrygate.yaml", annotationFile(opts, "./retrygate.yaml"))
	assert.Equal(t, "", annotationFile(opts, "-"), "stdin is no file")
}

// The JUnit report parses as XML, with a test case per threshold plus
// the held-out one, and the failures where check says they are.
func TestCheckJUnitParses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "check.xml")
	code, out, _ := reportRun(t, false, "", "check", "--policy", policies+"tight.yaml", "--junit", file, mixedLog)
	require.Equal(t, ExitRefuse, code)
	assert.Contains(t, out, "check: FAIL", "--junit leaves stdout's format alone")
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var got junitSuites
	require.NoError(t, xml.Unmarshal(raw, &got))
	assert.Equal(t, 6, got.Tests)
	assert.Equal(t, 4, got.Failures)
	var failed []string
	for _, c := range got.Suite.Cases {
		if c.Failure != nil {
			failed = append(failed, c.Classname+": "+c.Name+": "+c.Failure.Message)
		}
	}
	assert.Equal(t, []string{
		"thresholds: wait_s p(95) < 5s: p(95)=12.000s, want p(95) < 5s",
		"thresholds: refused_rate rate < 30%: rate=37.5%, want rate < 30%",
		"thresholds: deadline_miss_rate rate < 10%: rate=40.0%, want rate < 10%",
		"held-out: every held-out attempt is admitted: the budget refuses 1 of 1 held-out row: believe the refusal",
	}, failed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temp file left beside the report")
}

func TestCheckFormatBadInput(t *testing.T) {
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"--format", "githb"}, `--format: unknown format "githb" (want table, tsv, json, github, junit)` + "\nretrygate: hint: did you mean --format github?"},
		{[]string{"--format", ""}, `--format: unknown format ""`},
		{[]string{"--format", "junit", "--json"}, "--json and --format junit ask for two formats: pass one"},
		{[]string{"--junit", "no-such-dir/check.xml"}, `--junit: "no-such-dir": no such file or directory`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"check", "--policy", policies + "pass.yaml"}, tt.args...)
			code, out, errOut := reportRun(t, false, "", append(args, mixedLog)...)
			assert.Equal(t, ExitBad, code)
			assert.Contains(t, errOut, tt.err)
			if strings.HasPrefix(tt.args[0], "--format") {
				assert.Empty(t, out)
			}
		})
	}
}

const shadowLog = "../testdata/logs/shadow.log"

// On a shadow proxy's log, every form of check carries what enforcing
// the policy would change, with the same figures (check --json's shadow)
// in the same words: the text's section, a GitHub notice, the JUnit
// suite's properties and system-out (--format junit and --junit FILE
// alike), and a table on the HTML page; a log with no would= has none.
func TestCheckShadowInEveryForm(t *testing.T) {
	const head = "shadow log: enforcing this policy changes 5 of 6 forwarded requests: 2 refused (attempt cap 1, deadline 1), 3 retried"
	const deadline = "deadline misses: 1 job ran past the 45s deadline passed through (enforcing answers 504 at it); 1 request refused for the deadline"
	args := []string{"check", "--policy", policies + "seed003.yaml", shadowLog}
	run := func(extra ...string) string {
		t.Helper()
		code, out, stderr := reportRun(t, false, "", append(args[:len(args)-1:len(args)-1], append(extra, shadowLog)...)...)
		require.Equal(t, ExitRefuse, code, stderr)
		return out
	}

	out := run("--format", "tsv")
	assert.Contains(t, out, "\n"+head+"\n")
	assert.Contains(t, out, "\n  "+deadline+"\n")

	var doc struct{ Shadow map[string]any }
	require.NoError(t, json.Unmarshal([]byte(run("--json")), &doc))
	assert.EqualValues(t, 5, doc.Shadow["changed"])
	assert.EqualValues(t, 2, doc.Shadow["refused_total"])

	out = run("--format", "github")
	assert.Contains(t, out, "\n::notice title=retrygate shadow::"+head+"%0Aretry tax: 0 tokens saved")
	assert.Contains(t, out, "%0A"+deadline+"\n::notice title=retrygate check::")

	file := filepath.Join(t.TempDir(), "check.xml")
	for _, raw := range []string{run("--format", "junit"), func() string { run("--junit", file); b, _ := os.ReadFile(file); return string(b) }()} {
		var got junitSuites
		require.NoError(t, xml.Unmarshal([]byte(raw), &got))
		props := map[string]string{}
		for _, p := range got.Suite.Properties {
			props[p.Name] = p.Value
		}
		assert.Equal(t, "6", props["shadow.rows"])
		assert.Equal(t, "5", props["shadow.changed"])
		assert.Equal(t, "1", props["shadow.refused.attempt cap"])
		assert.Equal(t, "3", props["shadow.retried"])
		assert.Equal(t, "1", props["shadow.answers_lost"])
		assert.Contains(t, got.Suite.SystemOut, "\n"+head+"\n")
		assert.Equal(t, 2, got.Tests, "the shadow figures judge nothing: no test case")
	}

	page := filepath.Join(t.TempDir(), "check.html")
	run("--html", page)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(b)
	assert.Contains(t, html, `<h2 id="shadow">Shadow log: what enforcing this policy would change</h2><p>`+head+`</p>`)
	assert.Contains(t, html, `<td>answers lost</td><td><span class="fig" data-fig="shadow.answers_lost" data-value="1">1</span></td>`)
	figs := map[string]string{}
	for _, m := range regexp.MustCompile(`data-fig="(shadow\.[^"]+)" data-value="([^"]*)"`).FindAllStringSubmatch(html, -1) {
		figs[m[1]] = m[2]
	}
	assert.Len(t, figs, 12)
	figsEqualJSON(t, figs, []byte(run("--json")))

	// An enforcing log: no shadow part in any form.
	for _, f := range []string{"tsv", "github", "junit"} {
		_, out, _ := reportRun(t, false, "", "check", "--policy", policies+"pass.yaml", "--format", f, mixedLog)
		assert.NotContains(t, out, "shadow", f)
	}
	_, _, _ = reportRun(t, false, "", "check", "--policy", policies+"pass.yaml", "--html", page, mixedLog)
	b, _ = os.ReadFile(page)
	assert.NotContains(t, string(b), `id="shadow"`)
}
