package cmd

import (
	"context"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// demoScript is the built-in script the no-config demo plays: seed 003.
const demoScript = "free-seat"

// defaultPrompt is a scratch prompt nobody minds throwing away (seed 003).
const defaultPrompt = "Reply with one short sentence: what is a retry budget?"

// maxPromptFile bounds --prompt-file, so a wrong path to a huge file
// fails clearly instead of being sent.
const maxPromptFile = 8 << 20

// maxTokensFlag bounds --max-tokens (time and report take the same bound).
const maxTokensFlag = 1 << 24

// RehearseOptions is one rehearsal: jobs run against a chain of seats
// under a policy, every attempt written to the log.
type RehearseOptions struct {
	IO     *IOStreams
	Ctx    context.Context
	Now    func() time.Time
	Getenv func(string) string

	Policy     rehearse.Policy
	Thresholds []rehearse.Threshold // written on the run's # policy line
	Chain      []seat.Config        // the seats jobs try, in order
	RouteSeats []seat.Config        // the seats only the policy's routes name (for the # policy line)
	Places     keyPlaces            // where each of their keys was written, for errors
	Demo       bool                 // no config at all: seed 003 on the built-in script seat

	Jobs        int // 0 with a time bound: no bound by count
	Concurrency int
	Load        loadShape // --rate, --ramp, --duration
	Prompt      string
	Prompts     []rehearse.Prompt // --prompts: each job sends one
	PromptOrder string
	MaxTokens   int
	LogPath     string
	Holdout     bool
	Seed        uint64
	SeedSet     bool
	JSON        bool
}

func newRehearseCmd(f *Factory, runF func(*RehearseOptions) error) *cobra.Command {
	opts := &RehearseOptions{IO: f.IO}
	var budgetKeys map[string]string
	var seatName, routeModel, promptFile, promptSet string
	c := &cobra.Command{
		Use:   "rehearse",
		Short: "Run scratch jobs against seats under the retry policy, logging every attempt",
		Long: `Run scratch jobs against a seat, or a fallback chain of seats, the way a
careful retry policy would, and append every attempt to the rehearsal log
with the reason it was sent or refused.

For each job the deadline is made once, at its start. Before every
attempt the seat's circuit breaker is asked (open: move to the next seat
in the fallback chain, or refuse: breaker open), then the four-number gate
with a conservative estimate for that seat (the last observed wait, the
last elapsed of an attempt that returned, the last prompt + completion
tokens). Each attempt gets min(timeouts.hard, what is left of the
deadline) and is cut live if no first byte comes within budget.max_wait.
Every attempt carries Idempotency-Key: <job id>.

After a failure: a permanent error (400, 401, 403, 404, 422, context
length, content policy, quota) is refused; a 429's Retry-After wins over
backoff; otherwise full jitter, rand(0, min(max_delay, base_delay*2^(n-1)));
a sleep that would leave too little of the deadline is refused before
sleeping; a timed-out attempt is retried at most retry.timeouts_retried
times, on the next fallback seat when there is one.

With no retrygate.yaml, no --config and no --seat, rehearse runs a
built-in demo: the free-seat demo on a script seat named scratch, on
the virtual clock, with no key and no network.

Seats come from the config's seats: map; --seat NAME runs a chain of
that seat alone, otherwise jobs follow the config's fallback: list. A
chain made only of script seats runs on the virtual clock (at once,
identical rows for identical seeds; --seed defaults to 1); with any live
seat the run is in real time, script seats playing their timings with
real sleeps, and --seed defaults to a random one (printed, and kept in the
log's "# run" line) so parallel rehearsals do not retry in lockstep.

Piped, stdout gets one tab-separated line per attempt as it happens, then
the summary per seat and the jobs' ends. On a terminal a real-time run
draws a progress bar on stderr ("still waiting 6.0s..." once an attempt
passes timeouts.soft), which ends at 100%, and prints the summary tables
when done. With stdout piped (rehearse | tee run.txt) there is no bar:
the rows are the progress, and nothing shares their lines.

When every attempt fails to connect (conn_error: a server that is down,
a wrong port), the run says so on stderr, naming each seat and its base
URL; it still exits 0, as for any failing seat: the rows are the data.

Ctrl-C stops cleanly: attempts in flight are cancelled and written as
outcome cancelled, job_end cancelled; the log stays whole.` + exitStatus(
			"done: every job ran (a seat failing is data in the log, not an error)",
			"interrupted (Ctrl-C) before every job finished (the rows so far are in the log)"),
		Example: `  # the built-in free-seat demo on a script seat, no key, no network
  retrygate rehearse

  # 20 jobs, 4 at a time, through the config's fallback chain
  retrygate rehearse --jobs 20 --concurrency 4 --prompt-file prompt.txt

  # open loop: 5 jobs a second for a minute, arrivals not waiting on answers
  retrygate rehearse --rate 5 --duration 1m

  # find where the wait cap starts refusing: 1, 2, 4, 8 jobs/s, 30s each
  retrygate rehearse --ramp 1,2,4,8/s --ramp-step 30s

  # one seat only, kept out of tuning
  retrygate rehearse --seat cheap --jobs 5 --holdout`,
		Args: cobra.NoArgs,
		RunE: runE(opts, func(c *cobra.Command, _ []string) error {
			return opts.fill(f, c, budgetKeys, seatName, routeModel, promptFile, promptSet)
		}, runF, runRehearse),
	}
	budgetKeys = budgetFlags(c)
	fl := c.Flags()
	fl.StringVar(&seatName, "seat", "", "rehearse this seat alone (a `name` under seats:)")
	fl.StringVar(&routeModel, "route", "", "rehearse the chain the policy's routes give jobs naming this `model`")
	fl.IntVar(&opts.Jobs, "jobs", 1, "run `N` jobs")
	fl.IntVar(&opts.Concurrency, "concurrency", 1, "run `N` jobs at once, each with one attempt in flight")
	addLoadFlags(fl, true)
	fl.StringVar(&opts.Prompt, "prompt", "", "scratch prompt `text` (never logged; rows carry prompt_sha)")
	fl.StringVar(&promptFile, "prompt-file", "", "read the scratch prompt from `file`")
	fl.StringVar(&promptSet, "prompts", "", "prompt set `file`: JSONL, one {prompt|messages, max_tokens, tags} a line; each job sends one")
	fl.StringVar(&opts.PromptOrder, "prompt-order", rehearse.OrderRandom, "which prompt a job sends: random (drawn with --seed) or seq (the file's order)")
	fl.IntVar(&opts.MaxTokens, "max-tokens", 256, "completion `tokens` to ask for")
	fl.StringVar(&opts.LogPath, "log", "", "rehearsal `log` to append to (default rehearsal.log; config log)")
	fl.BoolVar(&opts.Holdout, "holdout", false, "mark every row holdout=true (kept out of tuning)")
	fl.Uint64Var(&opts.Seed, "seed", 0, "jitter `seed` (default 1 on the virtual clock, random in real time)")
	fl.BoolVar(&opts.JSON, "json", false, "print the summary as JSON")
	return c
}

func (o *RehearseOptions) fill(f *Factory, c *cobra.Command, budgetKeys map[string]string, seatName, routeModel, promptFile, promptSet string) error {
	o.Ctx, o.Now, o.Getenv = f.Ctx, f.Now, f.Getenv
	switch {
	case o.Jobs < 1:
		return badInput("--jobs: must be at least 1, got %d", o.Jobs)
	case o.Jobs > 100_000_000:
		return badInput("--jobs: %d is too many for one rehearsal (at most 100000000)", o.Jobs)
	case o.Concurrency < 1:
		return badInput("--concurrency: must be at least 1, got %d", o.Concurrency)
	case o.Concurrency > 10_000:
		return badInput("--concurrency: %d is too many (at most 10000)", o.Concurrency)
	case o.MaxTokens < 1:
		return badInput("--max-tokens: must be at least 1, got %d", o.MaxTokens)
	case o.MaxTokens > maxTokensFlag:
		return badInput("--max-tokens: %d is past any model's output (at most %d)", o.MaxTokens, maxTokensFlag)
	case c.Flags().Changed("seat") && strings.TrimSpace(seatName) == "":
		return badInput("--seat: empty seat name")
	case c.Flags().Changed("route") && strings.TrimSpace(routeModel) == "":
		return badInput("--route: empty model name")
	case seatName != "" && routeModel != "":
		return badInput("--seat and --route: give one or the other")
	case c.Flags().Changed("prompts") && strings.TrimSpace(promptSet) == "":
		return badInput("--prompts: empty path")
	case promptSet != "" && (c.Flags().Changed("prompt") || promptFile != ""):
		return badInput("--prompts and --prompt/--prompt-file: give one or the other")
	case !slices.Contains(rehearse.PromptOrders, o.PromptOrder):
		return badInput("--prompt-order: %q is not one of %s", o.PromptOrder, strings.Join(rehearse.PromptOrders, ", "))
	}
	o.SeedSet = c.Flags().Changed("seed")
	load, err := parseLoadFlags(c)
	if err != nil {
		return err
	}
	o.Load = load
	if load.open() && c.Flags().Changed("concurrency") {
		return badInput("--concurrency and --%s: a run is closed-loop (C jobs at once) or open-loop (arrivals at a rate), not both", map[bool]string{true: "rate", false: "ramp"}[load.Rate > 0])
	}
	if load.timed() && !c.Flags().Changed("jobs") {
		o.Jobs = 0 // bounded by time alone
	}
	if o.Prompt, err = scratchPrompt(c, o.Prompt, promptFile); err != nil {
		return err
	}
	if promptSet != "" {
		set, err := rehearse.LoadPrompts(promptSet, maxTokensFlag)
		if err != nil {
			return badInput("--prompts: %v", unwrapPathErr(err))
		}
		o.Prompts, o.Prompt = set, ""
	}

	cfg, err := loadConfig(f, c, mergeFlags(budgetKeys, map[string]string{"log": "log"}))
	if err != nil {
		return err
	}
	var p rehearse.Policy
	var seats map[string]seat.Config
	if o.LogPath, p, seats, o.Thresholds, err = cfg.runSettings(); err != nil {
		return err
	}
	o.Policy = p
	switch {
	case seatName != "":
		sc, err := cfg.seatNamed(seats, seatName)
		if err != nil {
			return err
		}
		o.Chain = []seat.Config{sc}
	case cfg.file == "":
		// No config at all: the demo, so a fresh checkout shows something.
		o.Demo = true
		o.Chain = []seat.Config{{Name: "scratch", Kind: "script", Script: "builtin:" + demoScript}}
	default:
		for _, name := range p.ChainFor(routeModel) {
			o.Chain = append(o.Chain, seats[name])
		}
		if len(o.Chain) == 0 {
			return withHint(badInput("%s: fallback: no seats to rehearse", cfg.file),
				"list seats under fallback: [a, b] in order, or pick one with --seat NAME")
		}
	}
	o.RouteSeats = routeSeats(p, seats, o.Chain)
	o.Places = cfg.places(o.Chain)
	return nil
}

// seatNamed is --seat's seat; a name under no seat is refused with the
// names there are.
func (c *config) seatNamed(seats map[string]seat.Config, name string) (seat.Config, error) {
	sc, ok := seats[strings.ToLower(name)]
	if !ok {
		hint := seatList(seats)
		if c.file == "" {
			hint = "no retrygate.yaml here and no --config: seats are defined under seats: in one"
		}
		return sc, withHint(badInput("--seat: no seat named %q under seats", name), hint)
	}
	return sc, nil
}

func seatList(seats map[string]seat.Config) string {
	if len(seats) == 0 {
		return "the config has no seats: map; see 'retrygate rehearse --help'"
	}
	return "seats: " + strings.Join(slices.Sorted(maps.Keys(seats)), ", ")
}

// scratchPrompt is the prompt an attempt sends: --prompt, --prompt-file's
// text, or the default prompt when neither is given.
func scratchPrompt(c *cobra.Command, prompt, file string) (string, error) {
	var err error
	switch {
	case c.Flags().Changed("prompt-file") && strings.TrimSpace(file) == "":
		return "", badInput("--prompt-file: empty path")
	case c.Flags().Changed("prompt") && file != "":
		return "", badInput("--prompt and --prompt-file: give one or the other")
	case file != "":
		if prompt, err = readPromptFile(file); err != nil {
			return "", err
		}
	case !c.Flags().Changed("prompt"):
		prompt = defaultPrompt
	}
	if strings.TrimSpace(prompt) == "" {
		return "", badInput("--prompt: empty prompt")
	}
	return prompt, nil
}

func readPromptFile(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", badInput("--prompt-file %q: %v", path, unwrapPathErr(err))
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.IsDir() {
		return "", badInput("--prompt-file %q: is a directory", path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxPromptFile+1))
	if err != nil {
		return "", badInput("--prompt-file %q: %v", path, unwrapPathErr(err))
	}
	if len(data) > maxPromptFile {
		return "", badInput("--prompt-file %q: larger than %d MiB", path, maxPromptFile>>20)
	}
	return string(data), nil
}
