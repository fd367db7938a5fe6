package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mattn/go-runewidth"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// printTable writes rows under header: a bordered table on a terminal,
// tab-separated lines (header first, stable column order, every column)
// when piped, so scripts can read it with cut or awk.
//
// On a terminal narrower than the table, the columns named in narrow are
// left out, in that order, until it fits (--wide keeps every column; the
// command says at its end which it left out); a table still too wide
// wraps its widest column.
func printTable(s *IOStreams, header []string, rows [][]string, narrow ...string) error {
	if !s.OutTTY {
		var b strings.Builder
		b.WriteString(strings.Join(header, "\t"))
		b.WriteByte('\n')
		for _, r := range rows {
			for i, cell := range r {
				if i > 0 {
					b.WriteByte('\t')
				}
				b.WriteString(strings.NewReplacer("\t", " ", "\n", " ").Replace(cell))
			}
			b.WriteByte('\n')
		}
		_, err := io.WriteString(s.Out, b.String())
		return err
	}
	out, err := renderBox(header, rows)
	if err != nil {
		return err
	}
	if s.Width > 0 && !s.Wide && textWidth(out) > s.Width {
		if out, err = fitBox(s, header, rows, narrow); err != nil {
			return err
		}
	}
	_, err = io.WriteString(s.Out, out)
	return err
}

// fitBox is the table in s.Width columns: the narrow columns left out
// one by one until it fits; then headers of many words on many lines;
// then the widest columns wrapped to one width, the widest that fits.
func fitBox(s *IOStreams, header []string, rows [][]string, narrow []string) (string, error) {
	for _, name := range narrow {
		i := slices.Index(header, name)
		if i < 0 {
			continue
		}
		header, rows = dropColumn(header, rows, i)
		s.leftOut(name)
		if out, err := renderBox(header, rows); err != nil || textWidth(out) <= s.Width {
			return out, err
		}
	}
	// A header wider than its column's cells takes a line per word.
	data := columnWidths(nil, rows, len(header))
	for i, h := range header {
		header[i] = wrapText(h, max(data[i], longestWord(h)))
	}
	out, err := renderBox(header, rows)
	if err != nil || textWidth(out) <= s.Width {
		return out, err
	}
	// The widest columns wrap to the widest width that fits: borders and
	// padding take what the render shows beyond the cells.
	widths := columnWidths(header, rows, len(header))
	frame := textWidth(out)
	for _, w := range widths {
		frame -= w
	}
	const minWrap = 6 // narrower than this, a column is not worth reading
	wrapAt := minWrap
	for c := slices.Max(widths); c > minWrap; c-- {
		sum := frame
		for _, w := range widths {
			sum += min(w, c)
		}
		if sum <= s.Width {
			wrapAt = c
			break
		}
	}
	for i, w := range widths {
		if w > wrapAt {
			header, rows = wrapColumn(header, rows, i, wrapAt)
		}
	}
	return renderBox(header, rows)
}

func longestWord(s string) int {
	w := 0
	for _, word := range strings.Fields(s) {
		w = max(w, runewidth.StringWidth(word))
	}
	return w
}

// renderBox is the bordered table, header centred, cells right-aligned.
func renderBox(header []string, rows [][]string) (string, error) {
	var b strings.Builder
	t := tablewriter.NewTable(&b,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAlignment(tw.AlignRight),
		tablewriter.WithHeaderAlignment(tw.AlignCenter),
	)
	h := make([]any, len(header))
	for i, x := range header {
		h[i] = x
	}
	t.Header(h...)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return "", err
		}
	}
	err := t.Render()
	return b.String(), err
}

// textWidth is the widest line of s, in terminal columns.
func textWidth(s string) int {
	w := 0
	for _, line := range strings.Split(s, "\n") {
		w = max(w, runewidth.StringWidth(line))
	}
	return w
}

// columnWidths is the widest line of each of n columns, over the header
// (when not nil) and the rows.
func columnWidths(header []string, rows [][]string, n int) []int {
	w := make([]int, n)
	if header != nil {
		rows = append([][]string{header}, rows...)
	}
	for _, r := range rows {
		for i, cell := range r {
			if i < n {
				w[i] = max(w[i], textWidth(cell))
			}
		}
	}
	return w
}

func dropColumn(header []string, rows [][]string, i int) ([]string, [][]string) {
	out := make([][]string, len(rows))
	for k, r := range rows {
		out[k] = slices.Delete(slices.Clone(r), i, min(i+1, len(r)))
	}
	return slices.Delete(slices.Clone(header), i, i+1), out
}

// wrapColumn wraps column i of the header and every row to width
// columns, at spaces where it can.
func wrapColumn(header []string, rows [][]string, i, width int) ([]string, [][]string) {
	header = slices.Clone(header)
	header[i] = wrapText(header[i], width)
	out := make([][]string, len(rows))
	for k, r := range rows {
		out[k] = slices.Clone(r)
		if i < len(r) {
			out[k][i] = wrapText(r[i], width)
		}
	}
	return header, out
}

func wrapText(s string, width int) string {
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			for runewidth.StringWidth(word) > width { // a word too long for a line: cut it, after a . / _ - where it can
				head := runewidth.Truncate(word, width, "")
				if i := strings.LastIndexAny(head, "./_-"); i > 0 && i < len(head)-1 {
					head = head[:i+1]
				}
				if line != "" {
					lines, line = append(lines, line), ""
				}
				lines = append(lines, head)
				word = word[len(head):]
			}
			switch {
			case line == "":
				line = word
			case runewidth.StringWidth(line)+1+runewidth.StringWidth(word) <= width:
				line += " " + word
			default:
				lines, line = append(lines, line), word
			}
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// printJSON writes v as indented JSON followed by a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "p(95) < 5s" stays readable
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("failed to write JSON: %w", err)
	}
	return nil
}
