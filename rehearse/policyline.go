package rehearse

import (
	"slices"
	"strings"

	"github.com/retrygate/retrygate/ledgerfile"
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
// written: a seat is its name, kind and model. Routes are written as
// "MODEL=SEAT,SEAT; …" in order, and the seats only a route names
// (routeSeats) after the chain's.
func PolicyLine(run int, p Policy, chain, routeSeats []seat.Config, thresholds []Threshold) string {
	var kvs []ledgerfile.KV
	kv := func(k, v string) { kvs = append(kvs, ledgerfile.KV{Key: k, Value: v}) }
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
	if len(p.Routes) > 0 {
		kv(KeyRoutes, RoutesText(p.Routes))
	}
	for _, s := range append(slices.Clip(chain), routeSeats...) {
		for i := range Keys {
			if k := &Keys[i]; k.SeatField != nil && k.Logged != nil && k.Logged(&p, &s) {
				kv(k.Seat(s.Name), FormatValue(k.SeatField(&s)))
			}
		}
	}
	for _, th := range thresholds {
		kv(strings.Replace(KeyThresholds, "*", th.Metric, 1), strings.Join(th.Exprs, "; "))
	}
	return ledgerfile.PolicyText(run, kvs) // the line's one encoder
}

// RoutesText is routes as the # policy line writes them: "MODEL=SEAT,SEAT"
// for each route, in order, joined by "; ".
func RoutesText(routes []Route) string {
	parts := make([]string, len(routes))
	for i, r := range routes {
		parts[i] = r.Model + "=" + strings.Join(r.Fallback, ",")
	}
	return strings.Join(parts, "; ")
}
