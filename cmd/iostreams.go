package cmd

import (
	"bytes"
	"io"
	"os"
	"strconv"

	"github.com/mattn/go-isatty"
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
	Width  int // terminal width, 0 when unknown
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
	if v, _ := strconv.ParseBool(os.Getenv("RETRYGATE_FORCE_TTY")); v {
		s.OutTTY = true
		if s.Width == 0 {
			s.Width = 120
		}
	}
	return s
}

// TestStreams returns streams backed by buffers, not terminals.
func TestStreams() (s *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}
