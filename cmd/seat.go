package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/rehearse/script"
	"github.com/retrygate/retrygate/rehearse/seatserver"
)

func newSeatCmd(f *Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "seat",
		Short: "Serve a script seat over real HTTP, for clients to rehearse against",
		Long: `Work with seats: where scratch calls go.

  seat serve   play a script seat over real HTTP on loopback, in the
               OpenAI, Anthropic or Ollama wire format` +
			exitStatus("done", "not used"),
		Args: cobra.NoArgs,
	}
	c.AddCommand(newSeatServeCmd(f, nil))
	return c
}

// SeatServeOptions is one `seat serve`: which script, which wire format, where.
type SeatServeOptions struct {
	IO          *IOStreams
	Ctx         context.Context // serving stops when it is done (Ctrl-C)
	Now         func() time.Time
	Script      string // a YAML script, or builtin:NAME
	Format      seatserver.Format
	Addr        string
	AllowRemote bool
	Slots       int // at most this many requests served at once (0: no limit)
}

func newSeatServeCmd(f *Factory, runF func(*SeatServeOptions) error) *cobra.Command {
	opts := &SeatServeOptions{IO: f.IO, Now: f.Now}
	var format string
	c := &cobra.Command{
		Use:   "serve --script FILE",
		Short: "Play a script seat over real HTTP on loopback",
		Long: `Play a script seat over real HTTP on loopback, with real delays, so any
client — retrygate's own seats, the OpenAI or Anthropic SDK, your
application — can be rehearsed against a seat that misbehaves on cue.

The n-th request (0-based, in arrival order) plays the script's n-th call:
headers at ttfb, first content at wait, tokens spread until elapsed;
an error status (with Retry-After and retry-after-ms when the step has
retry_after) at elapsed; hang sends headers at ttfb and then nothing until
the client leaves; reset_after drops the connection mid-stream; conn_error
closes the connection before a byte is written. Usage is included when
the step gives tokens (and, for OpenAI, when the request asks with
stream_options.include_usage), and left out with usage: false. The
completion is filler text; the prompt is never echoed, logged or kept.

The first line of stdout is the base URL to give a client:

  --format   endpoint                  base URL printed         SDK base URL
  openai     POST /v1/chat/completions http://127.0.0.1:PORT/v1 the same
  anthropic  POST /v1/messages         http://127.0.0.1:PORT/v1 http://127.0.0.1:PORT
  ollama     POST /api/chat            http://127.0.0.1:PORT    the same

(retrygate's seats post to {base_url}/chat/completions, {base_url}/messages
and {base_url}/api/chat; the Anthropic SDK appends /v1/messages itself.)
An openai server also speaks the Responses API on the same base URL:
POST /v1/responses (typed events with sequence numbers and no [DONE];
an error on a 200 stream is response.failed), and GET /v1/responses/{id}
reads a finished response back (an openai seat with api: responses).

When a client cancels a request before its plan finished, a line goes to
stderr ("seat: request 3 cancelled by client after 1.204s"), and
GET /_retrygate/requests lists the last ` + fmt.Sprint(seatserver.DefaultKeep) + ` requests as JSON (with
total, the count of every request so far): index,
received, idempotency_key, format, api (responses: a Responses API
request), plan, status, state (in_flight,
finished, cancelled, reset, dropped, rejected, shutdown), finished,
cancelled, ended, after_s, bytes. No prompt, completion or API key is
ever written there or on stderr.

A request's headers must arrive within ` + seatserver.HeaderTimeout.String() + ` and its body within ` + seatserver.DefaultBodyTimeout.String() + `,
and a body is at most ` + fmt.Sprint(seatserver.DefaultMaxBody>>20) + ` MiB: a slower client gets 408, a larger body 413.

It serves until Ctrl-C. It listens on loopback only (127.0.0.0/8, ::1,
localhost) unless --allow-remote is given.` + exitStatus("served until Ctrl-C", "not used"),
		Example: `  # the free-seat demo's two attempts, as an OpenAI-compatible endpoint
  retrygate seat serve --script builtin:free-seat

  # a bad provider day in the Anthropic format, on a fixed port
  retrygate seat serve --script testdata/seats/bad-day.yaml --format anthropic --addr 127.0.0.1:6556

  # what the server has seen so far
  curl -s http://127.0.0.1:6556/_retrygate/requests`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(*cobra.Command, []string) error { return opts.fill(f, format) }, runF, runSeatServe),
	}
	fl := c.Flags()
	fl.StringVar(&opts.Script, "script", "", "the script `file` to play, or builtin:NAME (e.g. builtin:free-seat)")
	fl.StringVar(&format, "format", "openai", "wire `format`: openai, anthropic or ollama")
	fl.StringVar(&opts.Addr, "addr", "127.0.0.1:0", "listen `address` (port 0 picks a free one)")
	fl.BoolVar(&opts.AllowRemote, "allow-remote", false, "allow a listen address off loopback")
	fl.IntVar(&opts.Slots, "slots", 0, "serve at most `n` requests at once; the rest queue, their plan starting when a slot frees (0: no limit)")
	return c
}

func (o *SeatServeOptions) fill(f *Factory, format string) error {
	o.Ctx = f.Ctx
	if strings.TrimSpace(o.Script) == "" {
		return withHint(badInput("--script: required"), "give a script file, or builtin:free-seat for the free-seat demo's two attempts")
	}
	var err error
	if o.Format, err = seatserver.ParseFormat(format); err != nil {
		return badInput("--format: %v", err)
	}
	if o.Slots < 0 || o.Slots > 1_000_000 {
		return badInput("--slots: must be between 0 and 1000000, got %d", o.Slots)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return badInput("--addr: not host:port %q (e.g. 127.0.0.1:0)", o.Addr)
	}
	if !o.AllowRemote {
		if err := seatserver.CheckLoopback(o.Addr); err != nil {
			return withHint(badInput("--addr: %v; refusing to serve off loopback without --allow-remote", err),
				"a scratch seat belongs on 127.0.0.1; pass --allow-remote if you really mean to expose it")
		}
	}
	return nil
}

func runSeatServe(o *SeatServeOptions) error {
	s, err := script.Open(o.Script)
	if err != nil {
		return badInputErr(err)
	}
	srv, err := seatserver.New(seatserver.Options{Planner: s, Format: o.Format, Log: o.IO.ErrOut, Now: o.Now, Slots: o.Slots})
	if err != nil {
		return badInputErr(err)
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return badInput("--addr: cannot listen on %q: %v", o.Addr, unwrapListenErr(err))
	}
	defer ln.Close()
	base := o.Format.BaseURL(ln.Addr())
	origin := "http://" + ln.Addr().String()
	// The base URL alone on stdout's first line, so a script can read it.
	if _, err := fmt.Fprintln(o.IO.Out, base); err != nil {
		return err
	}
	e := o.IO.ErrOut
	then := "loops"
	if s.Then() == script.Last {
		then = "repeats its last step"
	}
	fmt.Fprintf(e, "seat: playing %s (%d calls, then %s) as %s on %s\n", s.Name(), s.Len(), then, o.Format, origin+o.Format.Path())
	if o.Format == seatserver.OpenAI {
		fmt.Fprintf(e, "seat: and the Responses API on %s%s\n", origin, seatserver.ResponsesPath)
	}
	if o.Format == seatserver.Anthropic {
		fmt.Fprintf(e, "seat: give the Anthropic SDK %s (it appends /v1/messages)\n", origin)
	}
	fmt.Fprintf(e, "seat: requests so far: GET %s%s\n", origin, seatserver.RequestsPath)
	fmt.Fprintf(e, "seat: Ctrl-C stops\n")
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := srv.Serve(ctx, ln); err != nil {
		return fmt.Errorf("seat server: %w", err)
	}
	fmt.Fprintf(e, "seat: stopped after %d requests\n", srv.Total())
	return nil
}

// unwrapListenErr keeps "address already in use" and drops the repeated op/address.
func unwrapListenErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}
