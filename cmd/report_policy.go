// The log's # policy lines, for the page's summary of the policy in force.

package cmd

import (
	"slices"
	"strconv"

	"github.com/retrygate/retrygate/ledgerfile"
)

// policyWatch keeps the `# policy` comment lines the strict reader hands
// on as it reads the log (ledgerfile.Reader's OnComment), read by the
// log's own decoder (ledgerfile.ParsePolicy): the last one, and every
// policy hash, without a second pass.
type policyWatch struct {
	last   ledgerfile.PolicyLine
	seen   bool
	hashes []string
}

func (p *policyWatch) comment(_ int, text string) {
	pol, ok := ledgerfile.ParsePolicy(text)
	if !ok {
		return
	}
	p.last, p.seen = pol, true
	if h := pol.Hash; h != "" && !slices.Contains(p.hashes, h) {
		p.hashes = append(p.hashes, h)
	}
}

// pairs is the last policy line's keys as the page lists them: its run,
// the policy's keys in their order, its hash.
func (p *policyWatch) pairs() [][2]string {
	if !p.seen {
		return nil
	}
	out := [][2]string{{"run", "r" + strconv.Itoa(p.last.Run)}}
	for _, kv := range p.last.KVs {
		out = append(out, [2]string{kv.Key, kv.Value})
	}
	if p.last.Hash != "" {
		out = append(out, [2]string{"hash", p.last.Hash})
	}
	return out
}
