package cmd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// DefaultConfigFile is read from the working directory when --config is not given.
const DefaultConfigFile = "retrygate.yaml"

// defaultLog is the log's default, the embedded file store.
const defaultLog = "rehearsal.log"

func envName(key string) string {
	return "RETRYGATE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// config resolves every key of rehearse.Keys through viper as flags >
// environment > config file > defaults, and remembers the file's lines so
// an error can name the flag, the variable, or the file and line a value
// came from.
type config struct {
	v     *viper.Viper
	file  string                 // the config file read, "" when none
	lines map[string]int         // dotted key (lowercase) → line in the file
	flags map[string]*pflag.Flag // dotted key → the flag bound to it

	resolved *resolved // decoded on first use (resolve)
	err      error
}

// newConfig is a viper with every environment variable of the table, and
// no file yet. Defaults are the default policy's, kept where no layer
// sets a key (resolve).
func newConfig() *config {
	v := viper.New()
	v.SetEnvPrefix("RETRYGATE")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	for _, k := range rehearse.Keys {
		if k.Env {
			_ = v.BindEnv(k.Name)
		}
	}
	return &config{v: v, lines: map[string]int{}, flags: map[string]*pflag.Flag{}}
}

// loadConfig reads the config file (--config, or ./retrygate.yaml when it
// exists) and binds the given flags (dotted key → flag name). The whole
// file is checked here, before any command writes anything.
func loadConfig(f *Factory, cmd *cobra.Command, flags map[string]string) (*config, error) {
	if f.Environ != nil {
		if err := checkEnviron(f.Environ()); err != nil {
			return nil, err
		}
	}
	c := newConfig()
	for key, name := range flags {
		// A flag not given sets nothing: viper would take its default,
		// "", as a value.
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			_ = c.v.BindPFlag(key, fl)
			c.flags[key] = fl
		}
	}
	path := f.ConfigFile
	explicit := path != ""
	if !explicit {
		path = DefaultConfigFile
	}
	if _, err := os.Stat(path); err == nil || explicit {
		if err := c.readFile(f.Ctx, path); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// where names the source of key's value for an error message: the flag,
// the environment variable, the file and line, or the default.
func (c *config) where(key string) string {
	if fl := c.flags[key]; fl != nil && fl.Changed {
		return "--" + fl.Name
	}
	if k := rehearse.KeyNamed(key); k != nil && k.Env && os.Getenv(envName(key)) != "" {
		return envName(key)
	}
	if c.v.InConfig(key) || c.lines[key] > 0 {
		return c.fileRef(key)
	}
	return key + " (default)"
}

func (c *config) fileRef(key string) string { return ref(c.file, c.lines[key], key) }

// ref is the one shape of a config error's place: file:line: key.
func ref(file string, line int, key string) string {
	switch {
	case line > 0 && key != "":
		return fmt.Sprintf("%s:%d: %s", file, line, key)
	case line > 0:
		return fmt.Sprintf("%s:%d", file, line)
	case key != "":
		return fmt.Sprintf("%s: %s", file, key)
	}
	return file
}

func (c *config) str(key string) (string, error) {
	r, err := c.resolve()
	if err != nil {
		return "", err
	}
	if key == rehearse.KeyLog {
		return r.log, nil
	}
	return "", fmt.Errorf("config: %s is no text key", key)
}

func (c *config) duration(key string) (time.Duration, error) {
	r, err := c.resolve()
	if err != nil {
		return 0, err
	}
	if k := rehearse.KeyNamed(key); k != nil && k.Field != nil {
		if d, ok := k.Field(&r.policy).(*time.Duration); ok {
			return *d, nil
		}
	}
	return 0, fmt.Errorf("config: %s is no duration", key)
}

// number is a budget key's value as a plain number: seconds for a
// duration, the count for a count.
func (c *config) number(key string) (float64, error) {
	r, err := c.resolve()
	if err != nil {
		return 0, err
	}
	if k := rehearse.KeyNamed(key); k != nil && k.Field != nil {
		switch v := k.Field(&r.policy).(type) {
		case *time.Duration:
			return v.Seconds(), nil
		case *int64:
			return float64(*v), nil
		case *int:
			return float64(*v), nil
		case *float64:
			return *v, nil
		}
	}
	return 0, fmt.Errorf("config: %s is no number", key)
}

// seatConfigs is the seats section as decoded (seats come from the file only).
func (c *config) seatConfigs() map[string]seat.Config {
	r, err := c.resolve()
	if err != nil {
		return nil
	}
	return r.seats
}

// logFiles is the logs a reading command reads: its arguments, or the
// config's log (default rehearsal.log) when it has none.
func logFiles(c *config, args []string) ([]string, error) {
	if len(args) > 0 {
		return args, nil
	}
	name, err := c.str(rehearse.KeyLog)
	if err != nil {
		return nil, err
	}
	return []string{name}, nil
}
