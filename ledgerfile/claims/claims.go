// Package claims keeps the claim state of jobs on disk: for each job, how
// much of its deadline is gone and how many attempts it has reserved, so
// that a shell or CI retry loop can ask "how long may this attempt take?".
//
// Time is measured on the boot-time clock (see Reading), so setting the
// wall clock back or forward neither gives a job time back nor forgets it.
// The decision is store.Decide's (the gate, admit.Decide), made for this
// file and for PostgreSQL alike; this package only keeps its inputs.
package claims

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// Reading is one look at the clocks a claim is measured on. Boot is the
// machine's boot-time clock (Linux CLOCK_BOOTTIME: monotonic, counts
// suspend, and no wall-clock change moves it); BootID names the boot it
// belongs to ("" when the system has none, then only Wall is used).
type Reading struct {
	Wall   time.Time
	Boot   time.Duration
	BootID string
}

// Clock reads the clocks. SystemClock is the real one; tests pass their own.
type Clock func() (Reading, error)

// Job is one job's claim state. Spent is how much of the deadline was gone
// when the job was last seen; the time since then is measured on the boot
// clock when the boot is the same, and on the wall clock otherwise.
type Job struct {
	Started     time.Time     `json:"started"` // wall clock, for people reading the file
	Deadline    time.Duration `json:"deadline_ns"`
	MaxAttempts int           `json:"max_attempts"`
	Attempts    int           `json:"attempts"`
	Grants      []string      `json:"grants,omitempty"` // one id per attempt granted, so two copies of a job merge exactly
	Spent       time.Duration `json:"spent_ns"`
	SeenWall    time.Time     `json:"seen"`
	SeenBoot    time.Duration `json:"seen_boot_ns"`
	BootID      string        `json:"boot_id"`
}

// Since is the time from the job's last claim to now.
//
// On the boot that made that claim, it is the boot clock's difference,
// which no wall-clock jump moves. After a reboot, or when the state file
// is shared by machines (a different boot id), the boot clocks cannot be
// compared, so the wall clock measures it; a wall clock that reads earlier
// than the last claim counts as no time passed, never as time given back.
// A job never gets more of its deadline back than it had at its last claim.
func (j Job) Since(now Reading) time.Duration {
	if j.BootID != "" && j.BootID == now.BootID {
		return admit.ClampDuration(now.Boot - j.SeenBoot)
	}
	return admit.ClampDuration(now.Wall.Sub(j.SeenWall))
}

// Used is how much of the job's deadline is gone at now.
func (j Job) Used(now Reading) time.Duration { return admit.AddDuration(j.Spent, j.Since(now)) }

// State is the whole file.
type State struct {
	Version int            `json:"version"`
	Jobs    map[string]Job `json:"jobs"`
}

// forgetAfter is how long a job whose deadline has passed is kept, so a
// late claim still refuses with "deadline" rather than starting afresh.
// It is measured like the deadline, so a wall clock set forward forgets
// nothing.
const forgetAfter = 24 * time.Hour

// Job is job id's claim state at now: as kept, or, for a job not seen
// yet, a new one whose deadline starts now, with b's deadline and attempt
// cap (kept only once Take records a grant). The decision on it is the
// claim store's (store.Decide, the gate); this package keeps its inputs.
func (s *State) Job(id string, b admit.Budget, now Reading) Job {
	j, ok := s.Jobs[id]
	if !ok {
		j = Job{Started: now.Wall, Deadline: b.Deadline, MaxAttempts: b.MaxAttempts}
		j.see(now)
	}
	return j
}

// Take keeps one more attempt granted to job id, whose state at now is j
// (State.Job): the deadline it has used so far is kept, measured from
// now on, and the grant gets an id. It returns the job as kept.
func (s *State) Take(id string, j Job, now Reading) Job {
	j.Spent = j.Used(now)
	j.see(now)
	j.Attempts = min(j.Attempts+1, admit.MaxAttempts)
	j.Grants = append(slices.Clip(j.Grants), grantID())
	s.Jobs[id] = j
	return j
}

func (j *Job) see(now Reading) {
	j.SeenWall, j.SeenBoot, j.BootID = now.Wall, now.Boot, now.BootID
}

// Tidy forgets jobs whose deadline ended more than a day ago.
func Tidy(s *State, now Reading) {
	for id, j := range s.Jobs {
		if j.Used(now)-j.Deadline > forgetAfter {
			delete(s.Jobs, id)
		}
	}
}

func grantID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Merge adds src's jobs into dst (a new state when dst is nil) and returns
// it. A job in both keeps every grant of either, counted once (grants
// without an id, from version 1, count as many as the larger side has),
// the stricter deadline and cap, and the timing of the copy that started
// first or has spent more: merging never gives a job time or attempts back.
func Merge(dst, src *State) *State {
	if src == nil {
		return dst
	}
	if dst == nil {
		dst = emptyState()
	}
	for id, sj := range src.Jobs {
		dj, ok := dst.Jobs[id]
		if !ok {
			sj.Grants = slices.Clone(sj.Grants)
			dst.Jobs[id] = sj
			continue
		}
		grants := slices.Clone(dj.Grants)
		for _, g := range sj.Grants {
			if !slices.Contains(grants, g) {
				grants = append(grants, g)
			}
		}
		anon := max(dj.Attempts-len(dj.Grants), sj.Attempts-len(sj.Grants), 0)
		m := dj
		if sj.Started.Before(dj.Started) || (sj.Started.Equal(dj.Started) && sj.Spent > dj.Spent) {
			m = sj
		}
		m.Grants = grants
		m.Attempts = min(len(grants)+anon, admit.MaxAttempts)
		m.Deadline = min(dj.Deadline, sj.Deadline)
		m.MaxAttempts = min(dj.MaxAttempts, sj.MaxAttempts)
		dst.Jobs[id] = m
	}
	return dst
}
