package cmd

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"retrygate/admit"
	"retrygate/rehearse"
)

// flagMeta is what help and completion show for a flag's value: one word
// from a small vocabulary, and the values it takes when they are a fixed set.
type flagMeta struct {
	placeholder string
	values      []string
	seats       bool // complete with the seat names of the config
	files       bool // complete with file names
}

// The placeholder vocabulary: every flag's value is one of these words (or,
// for a fixed set, the set itself, "{a|b|c}").
const (
	phDuration = "duration" // 45s, 1500ms, or bare seconds
	phN        = "n"        // a plain number: a count, a seed, a factor
	phUSD      = "usd"      // an amount in US dollars
	phRate     = "rate"     // a share: 0.05 or 5%
	phFile     = "file"
	phDir      = "dir"
	phName     = "name"
	phID       = "id"
	phText     = "text"
	phTime     = "time" // RFC 3339, or a duration back
	phAddr     = "addr" // host:port
	phLayers   = "name=n,..."
	phSpec     = "spec" // a latency model
	phRates    = "n,n,.../s"
)

var placeholders = []string{phDuration, phN, phUSD, phRate, phFile, phDir, phName, phID, phText, phTime, phAddr, phLayers, phSpec, phRates}

// flagVocabulary maps a flag's name to its meta, the same under every
// command; flagOverrides holds the few that mean something else under one
// command ("<command path> --<flag>").
var flagVocabulary = map[string]flagMeta{
	"config": {placeholder: phFile, files: true}, "log": {placeholder: phFile, files: true},
	"state": {placeholder: phFile, files: true}, "prompt-file": {placeholder: phFile, files: true},
	"policy": {placeholder: phFile, files: true}, "vs": {placeholder: phFile, files: true},
	"script": {placeholder: phFile, files: true}, "junit": {placeholder: phFile, files: true}, "prompts": {placeholder: phFile, files: true},
	"html": {placeholder: phFile, files: true},
	"svg":  {placeholder: phDir, files: true}, "png": {placeholder: phDir, files: true},

	"deadline": {placeholder: phDuration}, "max-wait": {placeholder: phDuration},
	"hard-timeout": {placeholder: phDuration}, "wait-cap": {placeholder: phDuration},
	"wait": {placeholder: phDuration}, "elapsed": {placeholder: phDuration}, "ttfb": {placeholder: phDuration},
	"duration": {placeholder: phDuration}, "ramp-step": {placeholder: phDuration},
	"next-wait": {placeholder: phDuration}, "next-elapsed": {placeholder: phDuration}, "spent": {placeholder: phDuration},

	"token-ceiling": {placeholder: phN}, "max-attempts": {placeholder: phN}, "next-tokens": {placeholder: phN},
	"spent-tokens": {placeholder: phN}, "used": {placeholder: phN}, "tokens": {placeholder: phN},
	"prompt-tokens": {placeholder: phN}, "completion-tokens": {placeholder: phN}, "http-status": {placeholder: phN},
	"jobs": {placeholder: phN}, "concurrency": {placeholder: phN}, "call": {placeholder: phN},
	"max-tokens": {placeholder: phN}, "seed": {placeholder: phN}, "retries": {placeholder: phN},
	"rate": {placeholder: phN}, "slots": {placeholder: phN}, "margin": {placeholder: phN}, "attempts-per-success": {placeholder: phN},

	"max-spend": {placeholder: phUSD}, "next-usd": {placeholder: phUSD}, "spent-usd": {placeholder: phUSD},
	"cost": {placeholder: phUSD}, "fallback-cost": {placeholder: phUSD},

	"fail-rate": {placeholder: phRate}, "timeout-rate": {placeholder: phRate},

	"seat": {placeholder: phName, seats: true}, "model": {placeholder: phName},
	"job": {placeholder: phID}, "prompt": {placeholder: phText}, "note": {placeholder: phText},
	"ts": {placeholder: phTime}, "since": {placeholder: phTime}, "addr": {placeholder: phAddr},
	"layers": {placeholder: phLayers}, "ramp": {placeholder: phRates},
	"listen": {placeholder: phAddr}, "metrics": {placeholder: phAddr}, "max-body": {placeholder: phN}, "max-concurrent": {placeholder: phN},
	"max-jobs": {placeholder: phN}, "max-client-jobs": {placeholder: phN}, "job-retention": {placeholder: phDuration},
	"max-body-total": {placeholder: phN}, "max-conns": {placeholder: phN},
}

// flagOverrides are per command: a fixed set of values belongs to one
// command's flag (a new --format elsewhere needs its own entry).
var flagOverrides = map[string]flagMeta{
	"simulate --model":    {placeholder: phSpec},
	"cost --prices":       {placeholder: phLayers},
	"cost --usage":        {placeholder: phLayers},
	"report --by":         {values: []string{"seat", "model", "job", "outcome"}},
	"report --hist":       {values: []string{"wait", "elapsed", "tokens", "cdf"}},
	"seat serve --format": {values: []string{"openai", "anthropic", "ollama"}},
	"check --format":      {values: checkFormats},
	"record --outcome":    {values: outcomeNames()},

	"rehearse --prompt-order": {values: rehearse.PromptOrders},
}

func outcomeNames() []string {
	out := make([]string, len(admit.Outcomes))
	for i, o := range admit.Outcomes {
		out[i] = string(o)
	}
	return out
}

func metaFor(c *cobra.Command, name string) (flagMeta, bool) {
	path := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
	if m, ok := flagOverrides[path+" --"+name]; ok {
		return m, true
	}
	m, ok := flagVocabulary[name]
	return m, ok
}

// placeholderValue shows a flag's value in help as its vocabulary word;
// parsing is the wrapped value's.
type placeholderValue struct {
	pflag.Value
	word string
}

func (p placeholderValue) Type() string { return p.word }

// decorateFlags gives every flag of the tree its placeholder and its
// completion, from one table.
func decorateFlags(root *cobra.Command, f *Factory) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(fl *pflag.Flag) {
				m, ok := metaFor(c, fl.Name)
				if !ok || fl.Value.Type() == "bool" {
					return
				}
				if _, done := fl.Value.(placeholderValue); done {
					return
				}
				word := m.placeholder
				if len(m.values) > 0 {
					word = "{" + strings.Join(m.values, "|") + "}"
				}
				fl.Usage = strings.ReplaceAll(fl.Usage, "`", "")
				fl.Value = placeholderValue{Value: fl.Value, word: word}
				registerCompletion(c, fl.Name, m, f)
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func registerCompletion(c *cobra.Command, name string, m flagMeta, f *Factory) {
	var fn cobra.CompletionFunc
	switch {
	case len(m.values) > 0:
		fn = cobra.FixedCompletions(m.values, cobra.ShellCompDirectiveNoFileComp)
	case m.seats:
		fn = func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return seatCompletions(f, c), cobra.ShellCompDirectiveNoFileComp
		}
	case m.files:
		fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveDefault
		}
	default:
		fn = cobra.NoFileCompletions
	}
	_ = c.RegisterFlagCompletionFunc(name, fn)
}

// seatCompletions lists the seat names of the config in effect (--config,
// or ./retrygate.yaml); none when it cannot be read.
func seatCompletions(f *Factory, c *cobra.Command) []cobra.Completion {
	quiet := *f
	quiet.Environ = nil
	cfg, err := loadConfig(&quiet, c, nil)
	if err != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(cfg.seatMap()))
}

// flagError turns pflag's errors into retrygate's: the flag named, a
// plain reason, and a "did you mean" for a mistyped name.
func flagError(c *cobra.Command, err error) error {
	var nx *pflag.NotExistError
	if errors.As(err, &nx) && !strings.HasPrefix(err.Error(), "unknown shorthand") {
		name := nx.GetSpecifiedName()
		var names []string
		c.Flags().VisitAll(func(fl *pflag.Flag) {
			if !fl.Hidden {
				names = append(names, fl.Name)
			}
		})
		e := badInput("unknown flag: --%s", name)
		if s, ok := admit.Closest(name, names); ok {
			return withHint(e, fmt.Sprintf("did you mean --%s?", s))
		}
		return withHint(e, fmt.Sprintf("see '%s --help'", c.CommandPath()))
	}
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		fl := iv.GetFlag()
		typ := fl.Value.Type()
		if p, ok := fl.Value.(placeholderValue); ok {
			typ = p.Value.Type()
		}
		what := "bad value"
		switch {
		case strings.HasPrefix(typ, "int"), strings.HasPrefix(typ, "uint"):
			what = "not a whole number"
		case strings.HasPrefix(typ, "float"):
			what = "not a number"
		case typ == "bool":
			what = "not true or false"
		}
		return badInput("--%s: %s %q", fl.Name, what, iv.GetValue())
	}
	return badInput("%v", err)
}

// unknownCommand adds "did you mean" to an unknown command.
func unknownCommand(root *cobra.Command, err error) error {
	msg := err.Error()
	if !strings.HasPrefix(msg, "unknown command ") {
		return nil
	}
	var name string
	if _, err := fmt.Sscanf(strings.TrimPrefix(msg, "unknown command "), "%q", &name); err != nil {
		return nil
	}
	var names []string
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	e := badInput("unknown command %q", name)
	if s, ok := admit.Closest(name, names); ok {
		return withHint(e, fmt.Sprintf("did you mean %s?", s))
	}
	return withHint(e, "see 'retrygate --help'")
}
