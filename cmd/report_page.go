// The page's furniture: percentile tables, figures tied to --json paths,
// the head, and output paths checked before any work.

package cmd

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"retrygate/ledgerfile/summary"
)

func percentileTable(p *pictures) string {
	var b strings.Builder
	b.WriteString(`<table id="percentiles"><tr><th>` + html.EscapeString(string(p.s.By)) + `</th><th>metric</th><th>n</th><th>p50</th><th>p95</th><th>p99</th><th>max</th></tr>`)
	groups, _ := groupsOf(p.s)
	for _, g := range groups {
		path := "all"
		if g.index >= 0 {
			path = "groups." + strconv.Itoa(g.index)
		}
		for _, m := range []struct {
			key string
			d   summary.Dist
		}{{"wait_s", g.Wait}, {"ttfb_s", g.TTFB}, {"elapsed_s", g.Elapsed}} {
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>`, html.EscapeString(g.Key), m.key,
				fig(path+"."+m.key+".n", strconv.FormatInt(m.d.N, 10), m.d.N),
				fig(path+"."+m.key+".p50", tSec(m.d.P50), m.d.P50), fig(path+"."+m.key+".p95", tSec(m.d.P95), m.d.P95),
				fig(path+"."+m.key+".p99", tSec(m.d.P99), m.d.P99), fig(path+"."+m.key+".max", tSec(m.d.Max), m.d.Max))
		}
	}
	b.WriteString(`</table>`)
	return b.String()
}

// writeFileAtomic writes data to a temp file beside path, syncs it and
// renames it over path: a reader never sees half a page.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("failed to write %q: %v", path, unwrapPathErr(err))
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if err := tmp.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("failed to write %q: %v", path, unwrapPathErr(werr))
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// fillPictureOpts checks --html and --svg and resolves the caps they draw
// when the log carries no # policy line.
func fillPictureOpts(c *cobra.Command, cfg *config, opts *ReportOptions) error {
	if err := checkHTMLFlag(c, opts.HTML); err != nil {
		return err
	}
	for _, d := range []struct{ flag, dir string }{{"--svg", opts.SVGDir}, {"--png", opts.PNGDir}} {
		if c.Flags().Changed(d.flag[2:]) && strings.TrimSpace(d.dir) == "" {
			return badInput("%s: empty (give a path, or leave %s out)", d.flag, d.flag)
		}
		if d.dir == "" {
			continue
		}
		if st, err := os.Stat(d.dir); err == nil && !st.IsDir() {
			return badInput("%s: %q is not a directory", d.flag, d.dir)
		} else if err != nil {
			// "charts/" names the directory charts, created under ".":
			// its parent is that of the cleaned path, not charts itself.
			if err := checkParent(d.flag, filepath.Clean(d.dir)); err != nil {
				return err
			}
		}
	}
	if opts.HTML == "" && opts.SVGDir == "" && opts.PNGDir == "" {
		return nil
	}
	b, err := cfg.budget()
	if err != nil {
		return err
	}
	opts.Budget = b
	opts.BudgetFrom = cfg.where("budget.max_wait") + " and " + cfg.where("budget.deadline")
	return nil
}

// pageHead starts a page: no scripts, styles or fonts from anywhere else,
// and a Content-Security-Policy that forbids fetching any.
func pageHead(b *bytes.Buffer, title string) {
	b.WriteString(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">`)
	b.WriteString(`<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'unsafe-inline'">`)
	fmt.Fprintf(b, `<title>%s</title>`, html.EscapeString(title))
	b.WriteString(`<style>
body{font:14px/1.4 sans-serif;color:#222;margin:0 auto;max-width:1320px;padding:12px}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;border-bottom:1px solid #ccc;margin-top:28px}
.summary{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:8px}
.card{border:1px solid #ccc;border-radius:4px;padding:6px 8px}.card b{display:block;font-size:20px}
.charts{display:flex;flex-wrap:wrap;gap:10px}.charts svg{border:1px solid #eee;max-width:100%;height:auto}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}
code{background:#f3f3f3;padding:1px 3px;word-break:break-all}.policy{line-height:1.9;font-size:12px}.note{color:#555}
.pass{color:#009E73;font-weight:bold}.fail{color:#D55E00;font-weight:bold}
</style></head><body>`)
}

// figure embeds chart i's SVG; its ids (patterns, title) become the
// page's own, so charts never share one.
func figure(i int, name, svg string) string {
	n := strconv.Itoa(i)
	svg = strings.NewReplacer(`id="`, `id="c`+n+`-`, `url(#`, `url(#c`+n+`-`,
		`aria-labelledby="t d"`, `aria-labelledby="c`+n+`-t c`+n+`-d"`).Replace(svg)
	return `<figure id="chart-` + name + `" class="chart" data-chart="` + name + `" style="margin:0">` + svg + `</figure>`
}

// checkOutPath checks an output file's flag before any work: not a
// directory, and in a directory that exists.
func checkOutPath(flag, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return badInput("%s: %q is a directory", flag, path)
	}
	return checkParent(flag, path)
}

func checkParent(flag, path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return badInput("%s: %q: %v", flag, dir, unwrapPathErr(err))
	}
	if !st.IsDir() {
		return badInput("%s: %q is not a directory", flag, dir)
	}
	return nil
}
