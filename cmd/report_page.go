// The page's furniture: percentile tables, figures tied to --json paths,
// the head, and output paths checked before any work.

package cmd

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/ledgerfile/summary"
)

func percentileTable(p *pictures) table {
	t := table{ID: "percentiles", Head: []string{string(p.s.By), "metric", "n", "p50", "p95", "p99", "max"}}
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
			at := path + "." + m.key
			t.Rows = append(t.Rows, []any{g.Key, m.key, figN(at+".n", m.d.N), fig(at+".p50", tSec(m.d.P50), m.d.P50),
				fig(at+".p95", tSec(m.d.P95), m.d.P95), fig(at+".p99", tSec(m.d.P99), m.d.P99), fig(at+".max", tSec(m.d.Max), m.d.Max)})
		}
	}
	return t
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

//go:embed pages.tmpl
var pagesSrc string

// pages are the --html pages of report, check and simulate: one head
// (no scripts, styles or fonts from anywhere else, and a
// Content-Security-Policy that forbids fetching any), then each page.
// Parsed on first use: most runs write no page.
var pages = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("pages").Funcs(template.FuncMap{"join": strings.Join, "tSec": tSec}).Parse(pagesSrc))
})

// writePage writes pages.tmpl's page name to --html's path, whole or not
// at all.
func writePage(path, name string, data any) error {
	var b bytes.Buffer
	if err := pages().ExecuteTemplate(&b, name, data); err != nil {
		return err
	}
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}

// card is one figure of a page's summary row.
type card struct {
	Label string
	Body  template.HTML
}

// table is one of a page's tables; a cell is text, or template.HTML (a
// fig). A table with no rows is not written.
type table struct {
	ID   string
	Head []string
	Rows [][]any
}

// chartList is a page's charts in order, each embedded as figure does.
type chartList struct {
	html template.HTML
	n    int
}

func (f *chartList) add(name string, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	f.html += figure(f.n, name, b.String())
	f.n++
	return nil
}

// figure embeds chart i's SVG; its ids (patterns, title) become the
// page's own, so charts never share one.
func figure(i int, name, svg string) template.HTML {
	n := strconv.Itoa(i)
	svg = strings.NewReplacer(`id="`, `id="c`+n+`-`, `url(#`, `url(#c`+n+`-`,
		`aria-labelledby="t d"`, `aria-labelledby="c`+n+`-t c`+n+`-d"`).Replace(svg)
	return template.HTML(`<figure id="chart-` + name + `" class="chart" data-chart="` + name + `" style="margin:0">` + svg + `</figure>`)
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
