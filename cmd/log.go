package cmd

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/ledgerfile/store"
	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
)

// LogExportOptions prints a log in the file format.
type LogExportOptions struct {
	IO  *IOStreams
	Ctx context.Context
	URL string
}

// LogImportOptions loads a log file into a database.
type LogImportOptions struct {
	IO   *IOStreams
	Ctx  context.Context
	File string
	URL  string
}

func newLogCmd(f *Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "log",
		Short: "Move a log between a file and PostgreSQL",
		Long: `A log kept in PostgreSQL holds the same rows as a file, with the same
reader contract.

export prints it in the file format, byte for byte what the file writer
writes, so reviewers still read rehearsal.log; import loads a file.` + exitStatus("done", "not used"),
		Args: cobra.NoArgs,
	}
	c.AddCommand(newLogExportCmd(f, nil), newLogImportCmd(f, nil))
	return c
}

func newLogExportCmd(f *Factory, runF func(*LogExportOptions) error) *cobra.Command {
	opts := &LogExportOptions{IO: f.IO, Ctx: f.Ctx}
	return &cobra.Command{
		Use:   "export [LOG]",
		Short: "Print a PostgreSQL log in the file format",
		Long: `Print every row and comment of a log kept in PostgreSQL on stdout, in
the rehearsal.log format: the same bytes the file writer would have
written.

Rows stream from the server, so memory stays bounded however long the
log. LOG is a postgres:// URL (or a file, printed as the writer writes
it), else the config's log.` + exitStatus("done", "not used"),
		Example: `  retrygate log export postgres://retrygate@db.internal/retrygate > rehearsal.log`,
		Args:    cobra.MaximumNArgs(1),
		RunE: runE(opts, func(c *cobra.Command, args []string) (err error) {
			opts.URL, err = logArg(f, c, args)
			return err
		}, runF, runLogExport),
	}
}

func runLogExport(o *LogExportOptions) error {
	l, err := openLog(o.Ctx, o.IO.ErrOut, o.URL, false)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := store.Export(o.Ctx, l, o.IO.Out); err != nil {
		return badInputErr(fmt.Errorf("failed to export log %s: %w", logDisplay(o.URL), err))
	}
	return nil
}

func newLogImportCmd(f *Factory, runF func(*LogImportOptions) error) *cobra.Command {
	opts := &LogImportOptions{IO: f.IO, Ctx: f.Ctx}
	return &cobra.Command{
		Use:   "import FILE [LOG]",
		Short: "Load a log file into PostgreSQL",
		Long: `Load every row and comment of a log file into a log kept in PostgreSQL,
in one transaction with COPY: all of it or none.

The file is read strictly (a bad line is named by its number). A (job,
attempt) that is already in the log, or twice in the file, is refused.
LOG is a postgres:// URL, else the config's log; it may be a file too
(the rows are appended under its lock, all or none; comments are not
copied).` + exitStatus("done", "not used"),
		Example: `  retrygate log import rehearsal.log postgres://retrygate@db.internal/retrygate`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: runE(opts, func(c *cobra.Command, args []string) (err error) {
			opts.File = args[0]
			opts.URL, err = logArg(f, c, args[1:])
			return err
		}, runF, runLogImport),
	}
}

func runLogImport(o *LogImportOptions) error {
	fh, err := openLogFile(o.File)
	if err != nil {
		return err
	}
	defer fh.Close()
	l, err := openLog(o.Ctx, nil, o.URL, false)
	if err != nil {
		return err
	}
	defer l.Close()
	// Both stores import, all or none: a file under its lock, PostgreSQL with COPY.
	dst := l.(*reportingLog).Log.(interface {
		Import(context.Context, iter.Seq2[store.Entry, error]) (int64, error)
	})
	n, err := dst.Import(o.Ctx, store.Entries(fh, o.File))
	if err != nil {
		var pe *pgstore.Error
		if errors.As(err, &pe) && !errors.Is(err, store.ErrDuplicate) {
			return withHint(badInputErr(fmt.Errorf("failed to import %q: %w", o.File, err)), dbHint)
		}
		return badInputErr(fmt.Errorf("failed to import %q into %s: %w (nothing was imported)", o.File, logDisplay(o.URL), err))
	}
	fmt.Fprintf(o.IO.ErrOut, "retrygate: imported %d rows from %s into %s\n", n, o.File, logDisplay(o.URL))
	return nil
}
