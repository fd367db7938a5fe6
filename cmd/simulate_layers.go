package cmd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/retrygate/retrygate/admit"
)

// parseLayers reads --layers: name=attempts pairs, comma-separated,
// innermost first. Attempts count the first try (1 = no retries).
func parseLayers(s string) ([]admit.Layer, error) {
	var out []admit.Layer
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, val, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, badInput("--layers: %q: want name=attempts (e.g. sdk=2,app=3,queue=3)", part)
		}
		n, err := admit.ParseCount(val)
		if err != nil || n < 1 || n > 1000 {
			return nil, badInput("--layers: %q: attempts must be a whole number from 1 to 1000 (1 means the layer does not retry)", part)
		}
		for _, l := range out {
			if l.Name == name {
				return nil, badInput("--layers: layer %q given twice", name)
			}
		}
		out = append(out, admit.Layer{Name: name, Attempts: int(n)})
	}
	return out, nil
}

// layerRate is a per-attempt failure rate to evaluate the layers at.
type layerRate struct {
	Label string  `json:"policy"`
	F     float64 `json:"attempt_failure_rate"`
	Calls float64 `json:"expected_calls"`
}

type layersJSON struct {
	Layers    []layerJSON `json:"layers"`
	WorstCase int64       `json:"worst_case_calls"`
	Expected  []layerRate `json:"expected,omitempty"`
	Owners    []string    `json:"retry_owners"`
}

type layerJSON struct {
	Name     string `json:"name"`
	Attempts int    `json:"attempts"`
}

func layersFigures(ls []admit.Layer, rates []layerRate) *layersJSON {
	out := &layersJSON{WorstCase: admit.LayersWorstCase(ls), Owners: admit.RetryOwners(ls)}
	if out.Owners == nil {
		out.Owners = []string{}
	}
	for _, l := range ls {
		out.Layers = append(out.Layers, layerJSON{Name: l.Name, Attempts: l.Attempts})
	}
	for _, r := range rates {
		r.Calls = admit.LayersExpectedCalls(ls, r.F)
		out.Expected = append(out.Expected, r)
	}
	return out
}

// warnLayers is seed 004's rule: exactly one layer owns the retries.
func warnLayers(io *IOStreams, ls []admit.Layer) {
	if owners := admit.RetryOwners(ls); len(owners) > 1 {
		fmt.Fprintf(io.ErrOut, "retrygate: warning: %d layers retry (%s): one user action can make %d provider calls; give one layer the retry budget and set the others to 1 attempt\n",
			len(owners), strings.Join(owners, ", "), admit.LayersWorstCase(ls))
	}
}

func printLayers(io *IOStreams, lj *layersJSON) error {
	product := make([]string, len(lj.Layers))
	for i, l := range lj.Layers {
		product[i] = fmt.Sprintf("%s=%d", l.Name, l.Attempts)
	}
	rows := [][]string{{"worst case", strings.Join(product, " × "), strconv.FormatInt(lj.WorstCase, 10)}}
	for _, r := range lj.Expected {
		rows = append(rows, []string{"expected", fmt.Sprintf("f=%s (%s)", strings.TrimSuffix(strconv.FormatFloat(r.F*100, 'f', 2, 64), ".00")+"%", r.Label), fmtAttempts(r.Calls)})
	}
	return printTable(io, []string{"provider calls per user action", "layers (innermost first)", "calls"}, rows)
}
