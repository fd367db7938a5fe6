package cmd

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
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

// flagWords gives each word the flags whose value it names, the same
// under every command (a file or dir completes with file names, --seat
// with the config's seats); a flag that sets a policy key takes its word
// from the key's kind (keyWords); flagOverrides holds the few that mean
// something else under one command ("<command path> --<flag>").
var flagWords = map[string][]string{
	phFile: {"config", "log", "state", "prompt-file", "policy", "vs", "script", "junit", "prompts", "html"},
	phDir:  {"svg", "png"},
	phDuration: {"hard-timeout", "wait-cap", "wait", "elapsed", "ttfb", "duration", "ramp-step",
		"next-wait", "next-elapsed", "spent", "job-retention"},
	phN: {"next-tokens", "spent-tokens", "used", "tokens", "prompt-tokens",
		"max-client-concurrent", "client-prefix-v4", "client-prefix-v6",
		"completion-tokens", "http-status", "jobs", "concurrency", "call", "max-tokens", "seed", "retries", "rate",
		"slots", "margin", "attempts-per-success", "max-body", "max-concurrent", "max-jobs", "max-client-jobs",
		"max-body-total", "max-conns", "max-held"},
	phUSD:    {"next-usd", "spent-usd", "cost", "fallback-cost"},
	phRate:   {"fail-rate", "timeout-rate"},
	phName:   {"seat", "model", "route"},
	phID:     {"job"},
	phText:   {"prompt", "note"},
	phTime:   {"ts", "since"},
	phAddr:   {"addr", "listen", "metrics"},
	phLayers: {"layers"},
	phRates:  {"ramp"},
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

// keyWords is the word for the value of a flag that sets a policy key.
var keyWords = map[rehearse.Kind]string{rehearse.Duration: phDuration, rehearse.Count: phN, rehearse.USD: phUSD,
	rehearse.Amount: phN, rehearse.Rate: phRate}

func metaFor(path, name string) (flagMeta, bool) {
	if m, ok := flagOverrides[path+" --"+name]; ok {
		return m, true
	}
	// A scan, not an index: most runs decorate a handful of flags.
	for _, k := range rehearse.Keys {
		if w, ok := keyWords[k.Kind]; ok && k.Flag == name {
			return flagMeta{placeholder: w}, true
		}
	}
	for word, names := range flagWords {
		if slices.Contains(names, name) {
			return flagMeta{placeholder: word, files: word == phFile || word == phDir, seats: name == "seat"}, true
		}
	}
	return flagMeta{}, false
}

// placeholderValue shows a flag's value in help as its vocabulary word;
// parsing is the wrapped value's.
type placeholderValue struct {
	pflag.Value
	word string
}

func (p placeholderValue) Type() string { return p.word }

// decorateFlags gives every flag of the tree its placeholder and, when
// complete is set, its completion, from one table.
func decorateFlags(root *cobra.Command, f *Factory, complete bool) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		// c.Flags() holds c's own flags until cobra merges its parents'
		// persistent ones in, at parse time; LocalNonPersistentFlags
		// would copy and sort them each time.
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(fl *pflag.Flag) {
				m, ok := metaFor(path, fl.Name)
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
				if complete {
					registerCompletion(c, fl.Name, m, f)
				}
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
	return slices.Sorted(maps.Keys(cfg.seatConfigs()))
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
