// Reading a log's # policy line while the strict reader reads the log,
// for the page's summary of the policy in force.

package cmd

import (
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/go-logfmt/logfmt"
)

// policyWatch reads the `# policy` comment lines as the log streams past
// to the strict reader, without a second pass.
type policyWatch struct {
	r       io.Reader
	midLine bool   // inside a line that is not a policy line
	head    []byte // the start of the current line, until it can be judged
	line    []byte // the policy line being read
	inLine  bool
	last    string
	hashes  []string
}

const policyPrefix = "# policy "

func (p *policyWatch) wrap(r io.Reader) io.Reader {
	p.r, p.midLine, p.head, p.inLine = r, false, p.head[:0], false
	return p
}

func (p *policyWatch) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.scan(b[:n])
	return n, err
}

func (p *policyWatch) scan(b []byte) {
	for len(b) > 0 {
		switch {
		case p.inLine:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				p.keep(b)
				return
			}
			p.keep(b[:i])
			p.done()
			b = b[i+1:]
		case p.midLine:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return
			}
			p.midLine = false
			b = b[i+1:]
		default:
			// Judging a line's start: most lines are rows, told apart by
			// their first byte.
			if len(p.head) == 0 && b[0] != '#' {
				p.midLine = true
				continue
			}
			need := len(policyPrefix) - len(p.head)
			take := min(need, len(b))
			if i := bytes.IndexByte(b[:take], '\n'); i >= 0 {
				p.head = p.head[:0]
				b = b[i+1:]
				continue
			}
			p.head = append(p.head, b[:take]...)
			b = b[take:]
			if len(p.head) < len(policyPrefix) {
				return
			}
			if string(p.head) == policyPrefix {
				p.inLine = true
				p.line = append(p.line[:0], p.head...)
			} else {
				p.midLine = true
			}
			p.head = p.head[:0]
		}
	}
}

// maxPolicyLine bounds what is kept of one policy line, however the
// reads split it.
const maxPolicyLine = 64 << 10

func (p *policyWatch) keep(b []byte) {
	if room := maxPolicyLine - len(p.line); room > 0 {
		p.line = append(p.line, b[:min(room, len(b))]...)
	}
}

func (p *policyWatch) done() {
	p.inLine = false
	s := strings.TrimSpace(string(p.line[2:]))
	p.last = s
	pol := parsePolicyLine(s)
	if h := pol.get("hash"); h != "" && !slices.Contains(p.hashes, h) {
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
