package script

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/retrygate/retrygate/rehearse/seat"
)

// Never is the Plan.Wait (and Plan.TTFB) of a hang step that has no
// `wait`: its content, and its headers unless `ttfb` is given, never come.
const Never = time.Duration(math.MaxInt64)

// Then says what a script does past its last step.
type Then int

const (
	// Loop starts again at the first step (the default).
	Loop Then = iota
	// Last repeats the last step for ever.
	Last
)

func (t Then) String() string {
	if t == Last {
		return "last"
	}
	return "loop"
}

// Script is a parsed, validated script: a deterministic seat. It is
// immutable and safe for concurrent use.
type Script struct {
	name  string
	model string
	then  Then
	plans []seat.Plan // one per step as written
	// ends[i] is the expanded index one past step i's last use.
	ends  []int
	total int
}

// Open is the one way a script seat is loaded, wherever it is named (a
// config's seats.NAME.script, `seat serve`, a latency model): "builtin:NAME"
// is a built-in script, unless a file of that very name exists; anything
// else is a file, read by Load.
func Open(path string) (*Script, error) {
	if name, ok := strings.CutPrefix(path, "builtin:"); ok {
		if _, err := os.Stat(path); err != nil {
			return Builtin(name)
		}
	}
	return Load(path)
}

// Load reads and parses the script at path; errors name path:line.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err.Error()
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			reason = pe.Err.Error() // Error names the path itself
		}
		return nil, &Error{File: path, Msg: "cannot read script: " + reason, Err: err}
	}
	return Parse(data, path)
}

// PlanFor is what the seat does on its n-th call (0-based, counted across
// every job that uses the seat), with repeats expanded and Then applied
// past the end. n < 0 is treated as 0. It does not allocate.
func (s *Script) PlanFor(n int) seat.Plan {
	if n < 0 {
		n = 0
	}
	if n >= s.total {
		if s.then == Last {
			return s.plans[len(s.plans)-1]
		}
		n %= s.total
	}
	// The first step whose end is past n; BinarySearch finds the first
	// end >= n+1.
	i, _ := slices.BinarySearch(s.ends, n+1)
	return s.plans[i]
}

// Len is the number of calls one pass of the script takes: its steps
// with repeats expanded. It is always at least 1.
func (s *Script) Len() int { return s.total }

// Steps is the number of steps as written, before repeats.
func (s *Script) Steps() int { return len(s.plans) }

// Name is the script's `name`, or its file's base name without the extension.
func (s *Script) Name() string { return s.name }

// Model is the script's `model` ("" when it names none).
func (s *Script) Model() string { return s.model }

// Then is what the script does past its last step.
func (s *Script) Then() Then { return s.then }

// baseName turns "testdata/seats/bad-day.yaml" into "bad-day".
func baseName(file string) string {
	b := filepath.Base(file)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

var _ seat.Planner = (*Script)(nil)
