package cmd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/mattn/go-runewidth"
	"golang.org/x/term"
)

// IOStreams is where a command reads and writes. Data goes to Out;
// progress, warnings and hints to ErrOut.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// OutTTY is true when Out is a terminal: tables get borders, progress
	// bars draw. Piped output is plain tab-separated rows.
	OutTTY bool
	ErrTTY bool
	Width  int  // terminal width, 0 when unknown
	Wide   bool // --wide: tables keep every column, however wide

	left []string // the columns tables left out to fit Width (printTable)
}

// leftOut notes a column a table left out to fit the terminal.
func (s *IOStreams) leftOut(name string) {
	if !slices.Contains(s.left, name) {
		s.left = append(s.left, name)
	}
}

// sayLeftOut says, once, after the output, how many columns the tables
// left out to fit the terminal, and how to see them.
func (s *IOStreams) sayLeftOut() {
	if len(s.left) > 0 {
		fmt.Fprintf(s.ErrOut, "retrygate: hint: %d %s left out to fit %d columns; --wide shows %s\n",
			len(s.left), plural(len(s.left), "column", "columns"), s.Width, plural(len(s.left), "it", "them"))
		s.left = nil
	}
}

// System returns the process's streams. RETRYGATE_FORCE_TTY=1 makes piped
// output look like a terminal's (for screenshots and docs), as GH_FORCE_TTY does.
func System() *IOStreams {
	s := &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	s.OutTTY = isatty.IsTerminal(os.Stdout.Fd()) || isatty.IsCygwinTerminal(os.Stdout.Fd())
	s.ErrTTY = isatty.IsTerminal(os.Stderr.Fd()) || isatty.IsCygwinTerminal(os.Stderr.Fd())
	if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
		s.Width = w
	}
	forced, _ := strconv.ParseBool(os.Getenv("RETRYGATE_FORCE_TTY"))
	if forced {
		s.OutTTY = true
		if s.Width == 0 {
			s.Width = 120
			if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
				s.Width = n // the width a screenshot or a docs page has
			}
		}
	}
	errWidth := 0
	if w, _, err := term.GetSize(int(os.Stderr.Fd())); err == nil && s.ErrTTY {
		errWidth = w
	} else if forced {
		errWidth = s.Width
	}
	if errWidth > 0 {
		s.ErrOut = &wrapWriter{w: os.Stderr, width: errWidth}
	}
	return s
}

// TestStreams returns streams backed by buffers, not terminals.
func TestStreams() (s *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

// fit is a line of text for Out: on a terminal, wrapped at its width.
func (s *IOStreams) fit(line string) string {
	if !s.OutTTY || s.Width <= 0 {
		return line
	}
	return wrapLine(line, s.Width, "  ")
}

// wrapWriter wraps each whole line written to a terminal at its width,
// at spaces, the rest indented: a long warning or hint reads as one
// paragraph instead of breaking mid-word at the edge. A write that is not
// whole lines of plain text (a progress bar's \r redraws) passes as is.
type wrapWriter struct {
	w     io.Writer
	width int
}

func (ww *wrapWriter) Write(p []byte) (int, error) {
	if !bytes.HasSuffix(p, []byte("\n")) || bytes.ContainsAny(p, "\r\x1b") {
		return ww.w.Write(p)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(p), "\n"), "\n") {
		b.WriteString(wrapLine(strings.TrimSuffix(line, "\n"), ww.width, "  "))
		b.WriteByte('\n')
	}
	if _, err := io.WriteString(ww.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// wrapLine breaks a line longer than width at spaces, each later line
// starting with indent; a word longer than a line stays whole.
func wrapLine(line string, width int, indent string) string {
	if runewidth.StringWidth(line) <= width {
		return line
	}
	var b strings.Builder
	col := 0
	for i, word := range strings.Split(line, " ") {
		w := runewidth.StringWidth(word)
		switch {
		case i == 0:
		case col+1+w > width && col > len(indent):
			b.WriteString("\n" + indent)
			col = len(indent)
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += w
	}
	return b.String()
}
