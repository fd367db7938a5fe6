package ledgerfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strconv"
	"strings"

	"github.com/go-logfmt/logfmt"
)

// The log's comment lines that say something (DESIGN.md): each run
// begins with a `# run` line, then a `# policy` line holding the
// effective policy. Each has one encoder and one decoder, here.

// RunText is the text of a run's `# run` comment (Writer.Comment puts the
// "# " before it): "run rN", then what the run says of itself.
func RunText(run int, describe string) string {
	return strings.TrimSpace("run r" + strconv.Itoa(run) + " " + describe)
}

// ParseRun reads a `# run` comment line ("# run r3 seed=1", or its text
// without "# "): the run's number and what follows it; ok is false for
// any other line.
func ParseRun(line string) (run int, describe string, ok bool) {
	text := strings.TrimPrefix(strings.TrimSpace(line), "# ")
	rest, found := strings.CutPrefix(text, "run r")
	if !found {
		return 0, "", false
	}
	n, k := leadingInt([]byte(rest))
	if k == 0 || k < len(rest) && rest[k] != ' ' {
		return 0, "", false
	}
	return n, strings.TrimSpace(rest[k:]), true
}

// leadingInt reads the decimal number b starts with and how many digits
// it took; (0, 0) when there is none or it has more than 9 digits.
func leadingInt(b []byte) (n, k int) {
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		if k == 9 {
			return 0, 0
		}
		n = n*10 + int(b[k]-'0')
		k++
	}
	return n, k
}

// PolicyLine is a `# policy` comment: the run it begins, the effective
// policy as keys (the config file's own key paths, budget.deadline, …)
// in the order written, and its short hash.
type PolicyLine struct {
	Run  int
	KVs  []KV
	Hash string
}

// Get is key's value, or "".
func (p PolicyLine) Get(key string) string {
	for _, kv := range p.KVs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// PolicyText is the text of a run's `# policy` comment: "policy run=rN",
// the keys in logfmt, then hash= the first 12 hex of the SHA-256 of the
// keys' logfmt, so a reviewer can tell two runs' policies apart at a glance.
func PolicyText(run int, kvs []KV) string {
	var body bytes.Buffer
	enc := logfmt.NewEncoder(&body)
	for _, kv := range kvs {
		_ = enc.EncodeKeyval(kv.Key, kv.Value)
	}
	sum := sha256.Sum256(body.Bytes())
	return "policy run=r" + strconv.Itoa(run) + " " + body.String() + " hash=" + hex.EncodeToString(sum[:])[:12]
}

// ParsePolicy reads a `# policy` comment line (or its text without "# ");
// ok is false for any other line. A line it cannot read to its end gives
// the keys before the fault.
func ParsePolicy(line string) (p PolicyLine, ok bool) {
	text := strings.TrimPrefix(strings.TrimSpace(line), "# ")
	rest, found := strings.CutPrefix(text, "policy ")
	if !found {
		return PolicyLine{}, false
	}
	dec := logfmt.NewDecoder(strings.NewReader(rest))
	for dec.ScanRecord() {
		for dec.ScanKeyval() {
			k, v := string(dec.Key()), string(dec.Value())
			switch {
			case k == "run" && p.Run == 0 && len(p.KVs) == 0:
				if n, m := leadingInt([]byte(strings.TrimPrefix(v, "r"))); m > 0 && strings.HasPrefix(v, "r") {
					p.Run = n
				}
			case k == "hash":
				p.Hash = v
			default:
				p.KVs = append(p.KVs, KV{k, v})
			}
		}
	}
	return p, true
}

// HighestRun is the highest run number in a log: its `# run` lines
// (ParseRun) and the job ids of the form rN-k on its rows. It reads
// leniently (a row it cannot make sense of is not its business: the
// strict reader is report's), so a damaged log never stops a new run
// from numbering itself; a torn last row still counts.
func HighestRun(r io.Reader) (int, error) {
	lf := NewLineFilter(r)
	high := 0
	for {
		line, err := lf.Next()
		switch kind, text := classifyLine(line, true); kind {
		case lineSkip:
			if n, _, ok := ParseRun(string(text)); ok {
				high = max(high, n)
			}
		case lineRow:
			if n, ok := runOfJob(text); ok {
				high = max(high, n)
			}
		}
		if err == io.EOF {
			return high, nil
		}
		if err != nil {
			return high, err
		}
	}
}

// runOfJob is N of a row's job id rN-k, read from the line's bytes
// alone: the job key is found where a key starts, its value quoted or not.
func runOfJob(line []byte) (int, bool) {
	i := bytes.Index(line, []byte("job="))
	if i < 0 || i > 0 && line[i-1] != ' ' {
		return 0, false
	}
	v := bytes.TrimPrefix(line[i+4:], []byte(`"`))
	if len(v) < 2 || v[0] != 'r' {
		return 0, false
	}
	n, k := leadingInt(v[1:])
	if k == 0 || k+1 >= len(v) || v[1+k] != '-' {
		return 0, false
	}
	return n, true
}
