package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/summary"
)

// logSet is the logs a command reads, opened lazily; stdin is spooled to
// a temp file when it must be read twice (--since counted from the newest row).
type logSet struct {
	io      *IOStreams
	names   []string
	spool   string
	event   func(*ledgerfile.Event)     // takes the logs' `# event` lines (report: the summary's AddEvent)
	comment func(line int, text string) // takes their other comment lines (report --html: the # policy line)
	// endLog is told when each log has been read: a job is every row of
	// its id within one log, so the same id in the next log (the same
	// file named twice too) is another job (summary.Summarizer.EndLog).
	endLog func()
}

func (l *logSet) display(name string) string {
	if name == "-" {
		return "stdin"
	}
	return logDisplay(name)
}

func (l *logSet) open(name string) (io.ReadCloser, error) {
	if name == "-" {
		if l.spool != "" {
			return os.Open(l.spool)
		}
		return io.NopCloser(l.io.In), nil
	}
	if isDBLog(name) {
		return openLogReader(context.Background(), name)
	}
	// A log is a regular file: a FIFO, device or directory is refused, not read.
	fh, err := ledgerfile.OpenLog(name)
	if err != nil {
		return nil, badInputErr(err)
	}
	return fh, nil
}

func (l *logSet) close() {
	if l.spool != "" {
		_ = os.Remove(l.spool)
	}
}

// newest finds the newest ts over every log, spooling stdin first.
func (l *logSet) newest() (time.Time, bool, error) {
	var newest time.Time
	found := false
	for _, name := range l.names {
		if name == "-" && l.spool == "" {
			tmp, err := os.CreateTemp("", "retrygate-stdin-*.log")
			if err != nil {
				return newest, false, fmt.Errorf("failed to spool stdin: %w", err)
			}
			l.spool = tmp.Name()
			_, cerr := io.Copy(tmp, l.io.In)
			if err := tmp.Close(); cerr == nil {
				cerr = err
			}
			if cerr != nil {
				return newest, false, fmt.Errorf("failed to spool stdin: %w", cerr)
			}
		}
		rc, err := l.open(name)
		if err != nil {
			return newest, false, err
		}
		t, ok, err := ledgerfile.NewestTS(rc, l.display(name))
		rc.Close()
		if err != nil {
			return newest, false, badInput("failed to read log %q: %v", l.display(name), err)
		}
		if ok && (!found || t.After(newest)) {
			newest, found = t, true
		}
	}
	return newest, found, nil
}

// scan reads every log strictly, in order, handing each row to fn. Torn
// lines are warnings; malformed rows stop it (exit 2) unless skipBad,
// which lists them on stderr afterwards.
func (l *logSet) scan(skipBad bool, fn func(r *ledgerfile.Row, file string)) (torn, skipped []*ledgerfile.LineError, err error) {
	for _, name := range l.names {
		rc, err := l.open(name)
		if err != nil {
			return torn, skipped, err
		}
		disp := l.display(name)
		t, s, err := summary.ScanEvents(rc, disp, skipBad, func(r *ledgerfile.Row) { fn(r, disp) }, l.event, l.comment)
		rc.Close()
		torn, skipped = append(torn, t...), append(skipped, s...)
		if l.endLog != nil {
			l.endLog()
		}
		for _, e := range t {
			fmt.Fprintf(l.io.ErrOut, "retrygate: warning: %s: line %d: torn write (no newline at end of line); skipped\n", e.File, e.Line)
		}
		if err != nil {
			var le *ledgerfile.LineError
			if errors.As(err, &le) {
				return torn, skipped, withHint(badInput("failed to read log %q: line %d: %v", le.File, le.Line, le.Err),
					"fix the row, or pass --skip-bad to skip malformed rows and list them")
			}
			return torn, skipped, badInput("%v", err)
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(l.io.ErrOut, "retrygate: warning: --skip-bad skipped %d malformed %s:\n", len(skipped), plural(len(skipped), "row", "rows"))
		for i, e := range skipped {
			if i == 20 {
				fmt.Fprintf(l.io.ErrOut, "retrygate: warning:   … and %d more\n", len(skipped)-20)
				break
			}
			fmt.Fprintf(l.io.ErrOut, "retrygate: warning:   %s:%d: %v\n", e.File, e.Line, e.Err)
		}
	}
	return torn, skipped, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func lineRefs(errs []*ledgerfile.LineError) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s:%d", e.File, e.Line))
	}
	return out
}

// resolveSince turns a relative --since into a time from the newest row.
func resolveSince(logs *logSet, since time.Time, back time.Duration) (time.Time, error) {
	if back == 0 {
		return since, nil
	}
	newest, ok, err := logs.newest()
	if err != nil {
		return time.Time{}, err
	}
	if !ok {
		return time.Time{}, nil // no row has a ts: every row is kept
	}
	return newest.Add(-back), nil
}

func displayNames(l *logSet) []string {
	out := make([]string, len(l.names))
	for i, n := range l.names {
		out[i] = l.display(n)
	}
	return out
}
