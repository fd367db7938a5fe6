package rehearse

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/go-logfmt/logfmt"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// Threshold is one metric's thresholds as the policy file gives them.
type Threshold struct {
	Metric string
	Exprs  []string
}

// PolicyLine is the text of the `# policy` comment a run writes after its
// `# run` line: the effective policy in logfmt, keyed by the config file's
// own key paths (budget.deadline, retry.base_delay, seats.NAME.kind, …),
// then its short hash (the first 12 hex of the SHA-256 of the keys before
// it). A reviewer can check any refusal in the run from the log alone.
// Prices are per million tokens; API keys, URLs and commands are never
// written: a seat is its name, kind and model.
func PolicyLine(run int, p Policy, chain []seat.Config, thresholds []Threshold) string {
	var body bytes.Buffer
	enc := logfmt.NewEncoder(&body)
	kv := func(k, v string) { _ = enc.EncodeKeyval(k, v) }
	for i := range Keys {
		if k := &Keys[i]; k.Field != nil && k.Logged(&p, nil) {
			kv(k.Name, FormatValue(k.Field(&p)))
		}
	}
	names := make([]string, len(chain))
	for i, s := range chain {
		names[i] = s.Name
	}
	kv(KeyFallback, strings.Join(names, ","))
	for _, s := range chain {
		for i := range Keys {
			if k := &Keys[i]; k.SeatField != nil && k.Logged != nil && k.Logged(&p, &s) {
				kv(k.Seat(s.Name), FormatValue(k.SeatField(&s)))
			}
		}
	}
	for _, th := range thresholds {
		kv(strings.Replace(KeyThresholds, "*", th.Metric, 1), strings.Join(th.Exprs, "; "))
	}
	sum := sha256.Sum256(body.Bytes())

	return "policy run=r" + strconv.Itoa(run) + " " + body.String() + " hash=" + hex.EncodeToString(sum[:])[:12]
}
