// Package claims keeps seed 000's claim state on disk: for each job, when
// its deadline started and how many attempts it has reserved, so that a
// shell or CI retry loop can ask "how long may this attempt take?".
package claims

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gofrs/flock"

	"retrygate/admit"
)

// Job is one job's claim state.
type Job struct {
	Started     time.Time     `json:"started"`
	Deadline    time.Duration `json:"deadline_ns"`
	MaxAttempts int           `json:"max_attempts"`
	Attempts    int           `json:"attempts"`
}

// Ends is when the job's deadline runs out.
func (j Job) Ends() time.Time { return j.Started.Add(j.Deadline) }

// State is the whole file.
type State struct {
	Version int            `json:"version"`
	Jobs    map[string]Job `json:"jobs"`
}

// Grant is one claim's answer.
type Grant struct {
	Decision admit.Decision
	Timeout  time.Duration // what the attempt may use, when admitted
	Job      Job
}

// forgetAfter is how long a job whose deadline has passed is kept, so a
// late claim still refuses with "deadline" rather than starting afresh.
const forgetAfter = 24 * time.Hour

// Claim reserves one attempt of job. The first claim starts the job's
// deadline; every claim is refused once the attempt cap or the deadline
// is spent. The returned timeout is what is left of the deadline, capped
// by hard when hard > 0.
func Claim(s *State, job string, b admit.Budget, hard time.Duration, now time.Time) Grant {
	j, ok := s.Jobs[job]
	if !ok {
		j = Job{Started: now, Deadline: b.Deadline, MaxAttempts: b.MaxAttempts}
	}
	left := j.Ends().Sub(now)
	switch {
	case j.Attempts >= j.MaxAttempts:
		return Grant{Decision: admit.Refuse(admit.ReasonAttemptCap), Job: j}
	case left <= 0:
		return Grant{Decision: admit.Refuse(admit.ReasonDeadline), Job: j}
	}
	j.Attempts++
	s.Jobs[job] = j
	t := left
	if hard > 0 && hard < t {
		t = hard
	}
	return Grant{Decision: admit.Decision{Admit: true}, Timeout: t, Job: j}
}

// Tidy forgets jobs whose deadline ended long ago.
func Tidy(s *State, now time.Time) {
	for id, j := range s.Jobs {
		if now.Sub(j.Ends()) > forgetAfter {
			delete(s.Jobs, id)
		}
	}
}

// Update locks the state file, reads it, lets fn change it, and writes it
// back atomically (temp file, fsync, rename, fsync dir). A missing file is
// an empty state; the file is created only when fn leaves something to keep.
func Update(path string, fn func(*State) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed to create state dir %q: %w", dir, err)
	}
	lk := flock.New(path + ".lock")
	if err := lk.Lock(); err != nil {
		return fmt.Errorf("failed to lock state %q: %w", path, err)
	}
	defer lk.Unlock()
	s, err := read(path)
	if err != nil {
		return err
	}
	before, _ := json.Marshal(s)
	if err := fn(s); err != nil {
		return err
	}
	after, _ := json.Marshal(s)
	if string(before) == string(after) {
		return nil
	}
	return write(path, s)
}

func read(path string) (*State, error) {
	s := &State{Version: 1, Jobs: map[string]Job{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read state %q: %w", path, err)
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("failed to read state %q: %v (delete it to start afresh)", path, err)
	}
	if s.Jobs == nil {
		s.Jobs = map[string]Job{}
	}
	return s, nil
}

func write(path string, s *State) error {
	ids := make([]string, 0, len(s.Jobs))
	for id := range s.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".claims-*.tmp")
	if err != nil {
		return fmt.Errorf("failed to write state %q: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("failed to write state %q: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("failed to write state %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("failed to write state %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("failed to write state %q: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
