// Package claims keeps the claim state of jobs on disk: for each job, how
// much of its deadline is gone and how many attempts it has reserved, so
// that a shell or CI retry loop can ask "how long may this attempt take?".
//
// Time is measured on the boot-time clock (see Reading), so setting the
// wall clock back or forward neither gives a job time back nor forgets it.
// The gate itself is admit.Decide; this package only keeps its inputs.
package claims

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"

	"retrygate/admit"
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

// Grant is one claim's answer.
type Grant struct {
	Decision admit.Decision
	Timeout  time.Duration // what the attempt may use, when admitted
	Job      Job
}

// forgetAfter is how long a job whose deadline has passed is kept, so a
// late claim still refuses with "deadline" rather than starting afresh.
// It is measured like the deadline, so a wall clock set forward forgets
// nothing.
const forgetAfter = 24 * time.Hour

// minGrant is the least an attempt can be given: claim prints whole
// milliseconds, and a grant of 0 ms is no grant.
const minGrant = time.Millisecond

// Claim reserves one attempt of job through the gate (admit.Decide). The
// first claim starts the job's deadline and fixes its attempt cap; every
// claim is refused once the attempt cap or the deadline is spent. The
// returned timeout is what is left of the deadline, capped by hard when
// hard > 0.
func Claim(s *State, job string, b admit.Budget, hard time.Duration, now Reading) Grant {
	j, ok := s.Jobs[job]
	if !ok {
		j = Job{Started: now.Wall, Deadline: b.Deadline, MaxAttempts: b.MaxAttempts}
		j.see(now)
	}
	// Claim keeps only the deadline and the attempt cap; the gate's other
	// numbers are left wide open so that they never decide.
	gb := admit.Budget{
		Deadline:     j.Deadline,
		TokenCeiling: admit.MaxTokens,
		MaxAttempts:  j.MaxAttempts,
		MaxWait:      admit.MaxDuration,
	}
	used := j.Used(now)
	d := admit.Decide(gb, admit.Spent{Time: used, Attempts: j.Attempts}, admit.Next{Wait: minGrant})
	if !d.Admit {
		return Grant{Decision: d, Job: j}
	}
	j.Spent = used
	j.see(now)
	j.Attempts++
	j.Grants = append(slices.Clip(j.Grants), grantID())
	s.Jobs[job] = j
	t := j.Deadline - used
	if hard > 0 && hard < t {
		t = hard
	}
	return Grant{Decision: d, Timeout: t, Job: j}
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
