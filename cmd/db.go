package cmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/ledgerfile/store/pgstore"
)

// DBInitOptions sets up or migrates a PostgreSQL database.
type DBInitOptions struct {
	IO  *IOStreams
	Ctx context.Context
	URL string
}

func newDBCmd(f *Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "db",
		Short: "Set up the PostgreSQL database that many machines share",
		Long: `A log, its claims and budgets can live in PostgreSQL instead of files,
so that many machines (a CI matrix, a fleet of workers) share one log, one
deadline and one spend ceiling per job.

Give a postgres:// URL wherever a log path is accepted.` + exitStatus("done", "not used"),
		Args: cobra.NoArgs,
	}
	c.AddCommand(newDBInitCmd(f, nil))
	return c
}

func newDBInitCmd(f *Factory, runF func(*DBInitOptions) error) *cobra.Command {
	opts := &DBInitOptions{IO: f.IO, Ctx: f.Ctx}
	c := &cobra.Command{
		Use:   "init [URL]",
		Short: "Create the schema, or migrate it to this version",
		Long: `Create retrygate's tables in a PostgreSQL database, or migrate an older
schema to this version, in one transaction. Running it again is harmless.
A database whose schema a newer retrygate made is refused: upgrade.

The URL is the argument, else the config's log (RETRYGATE_LOG, the log:
key) when it is a postgres:// URL. A password in it is never printed;
PGPASSWORD works too.` + exitStatus("the schema is ready", "not used"),
		Example: `  retrygate db init postgres://retrygate@db.internal:5432/retrygate`,
		Args:    cobra.MaximumNArgs(1),
		RunE:    runE(opts, func(c *cobra.Command, args []string) error { return opts.fill(f, c, args) }, runF, runDBInit),
	}
	return c
}

func (o *DBInitOptions) fill(f *Factory, c *cobra.Command, args []string) error {
	if len(args) > 0 && !isDBLog(args[0]) {
		return badInput("URL %q: not a postgres:// URL or a host=… dbname=… connection string", args[0])
	}
	u, err := logArg(f, c, args)
	o.URL = u
	return err
}

// logArg is the log a db or log command works on: its argument, else the
// config's log (RETRYGATE_LOG, the log: key; default rehearsal.log).
func logArg(f *Factory, c *cobra.Command, args []string) (string, error) {
	if len(args) > 0 {
		if strings.TrimSpace(args[0]) == "" {
			return "", badInput("log: empty name")
		}
		return args[0], nil
	}
	cfg, err := loadConfig(f, c, nil)
	if err != nil {
		return "", err
	}
	name, err := cfg.str("log")
	if err == nil && strings.TrimSpace(name) == "" {
		err = badInput("log: empty name")
	}
	return name, err
}

func runDBInit(o *DBInitOptions) error {
	if !isDBLog(o.URL) {
		fmt.Fprintf(o.IO.ErrOut, "retrygate: the log %s is a file: nothing to set up (give a postgres:// URL)\n", o.URL)
		return nil
	}
	from, err := pgstore.Init(o.Ctx, o.URL)
	if err != nil {
		return withHint(badInputErr(err), dbHint)
	}
	name := logDisplay(o.URL)
	switch {
	case from == pgstore.SchemaVersion:
		fmt.Fprintf(o.IO.ErrOut, "retrygate: %s: schema version %d, up to date\n", name, from)
	case from == 0:
		fmt.Fprintf(o.IO.ErrOut, "retrygate: %s: created schema version %d\n", name, pgstore.SchemaVersion)
	default:
		fmt.Fprintf(o.IO.ErrOut, "retrygate: %s: migrated schema version %d to %d\n", name, from, pgstore.SchemaVersion)
	}
	return nil
}
