package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// printTable writes rows under header: a bordered table on a terminal,
// tab-separated lines (header first, stable column order) when piped, so
// scripts can read it with cut or awk.
func printTable(s *IOStreams, header []string, rows [][]string) error {
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
	t := tablewriter.NewTable(s.Out,
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
			return err
		}
	}
	return t.Render()
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
