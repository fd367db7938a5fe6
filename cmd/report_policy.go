// The log's # policy lines, for the page's summary of the policy in force.

package cmd

import (
	"slices"
	"strings"

	"github.com/go-logfmt/logfmt"
)

// policyWatch keeps the `# policy` comment lines the strict reader hands
// on as it reads the log (ledgerfile.Reader's OnComment): the last one,
// and every policy hash, without a second pass.
type policyWatch struct {
	last   string
	hashes []string
}

func (p *policyWatch) comment(_ int, text string) {
	if !strings.HasPrefix(text, "# policy ") {
		return
	}
	p.last = text[len("# "):]
	if h := parsePolicyLine(p.last).get("hash"); h != "" && !slices.Contains(p.hashes, h) {
		p.hashes = append(p.hashes, h)
	}
}

// policyKV is a `# policy` line's keys in their order.
type policyKV [][2]string

func (p policyKV) get(k string) string {
	for _, kv := range p {
		if kv[0] == k {
			return kv[1]
		}
	}
	return ""
}

// parsePolicyLine reads "policy run=r1 budget.deadline=45s … hash=…"; a
// line it cannot read gives what it read before the fault.
func parsePolicyLine(s string) policyKV {
	var out policyKV
	dec := logfmt.NewDecoder(strings.NewReader(strings.TrimPrefix(s, "policy")))
	for dec.ScanRecord() {
		for dec.ScanKeyval() {
			out = append(out, [2]string{string(dec.Key()), string(dec.Value())})
		}
	}
	return out
}
