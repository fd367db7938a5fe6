package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check --html: the verdict, each trend threshold's limit drawn over its
// distribution, the flipped decisions and the refused held-out row, and
// every figure on the page is check --json's.
func TestCheckHTML(t *testing.T) {
	page := filepath.Join(t.TempDir(), "check.html")
	args := []string{"check", "--policy", "../testdata/policies/tight.yaml", mixedLog}
	code, _, stderr := reportRun(t, false, "", append(args, "--html", page)...)
	require.Equal(t, 1, code, stderr) // tight.yaml fails mixed.log: the page is written all the same
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(b)
	for _, want := range []string{
		`retrygate check <span class="fail">FAIL</span>`,
		`p(95) &lt; 5s: FAIL`, // the wait_s limit, drawn over the waits
		`wait_s: limits over the observed distribution`,
		`<td>../testdata/logs/mixed.log:70</td><td>d</td><td>1</td><td>scratch</td><td>admit</td><td><b>refuse: queue wait</b>`,
		// the flip tables have the text report's columns (replayHeader)
		`<th>row</th><th>job</th><th>attempt</th><th>seat</th><th>logged</th><th>now</th><th>row_wait_s</th><th>row_elapsed_s</th><th>row_tokens</th><th>spent_s</th><th>spent_tokens</th><th>used</th>`,
		`<h2 id="held-out">Held-out rows the budget refuses</h2><p>1 of 1 held-out rows.</p><table id="held-out-table">`,
	} {
		assert.True(t, strings.Contains(html, want), want)
	}
	assert.NotRegexp(t, `(?i)(src|href)=`, html)
	figs := map[string]string{}
	for _, m := range regexp.MustCompile(`data-fig="([^"]+)" data-value="([^"]*)"`).FindAllStringSubmatch(html, -1) {
		figs[m[1]] = m[2]
	}
	assert.Len(t, figs, 10) // rows, jobs, thresholds_failed, changes_total, held_out_rows, 5 observed
	_, out, _ := reportRun(t, false, "", append(args, "--json")...)
	figsEqualJSON(t, figs, []byte(out))

	code, _, stderr = reportRun(t, false, "", append(args, "--html", filepath.Dir(page))...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "is a directory")
}
