package cmd

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rogpeppe/go-internal/testscript"
)

// cmdScrape fetches a Prometheus endpoint, parses it with expfmt's text
// parser (strict names: a malformed exposition fails the script), and
// prints one line a series, sorted: `name{k="v",...} value`, a
// histogram as its _count and _sum. `scrape http://127.0.0.1:$METRICS/metrics`
func cmdScrape(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: scrape URL")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(args[0])
	ts.Check(err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	ts.Check(err)
	var lines []string
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := func(n string) string {
				if len(ls) == 0 {
					return n
				}
				return n + "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				lines = append(lines, fmt.Sprintf("%s %g", series(name), m.GetCounter().GetValue()))
			case m.Gauge != nil:
				lines = append(lines, fmt.Sprintf("%s %g", series(name), m.GetGauge().GetValue()))
			case m.Histogram != nil:
				lines = append(lines, fmt.Sprintf("%s %d", series(name+"_count"), m.GetHistogram().GetSampleCount()),
					fmt.Sprintf("%s %g", series(name+"_sum"), m.GetHistogram().GetSampleSum()))
			}
		}
	}
	slices.Sort(lines)
	fmt.Fprintln(ts.Stdout(), strings.Join(lines, "\n"))
}

// cmdGet fetches a URL and prints its status line and body:
// `get http://127.0.0.1:$METRICS/readyz`.
func cmdGet(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: get URL")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(args[0])
	ts.Check(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%s\n%s", resp.Status, body)
}
