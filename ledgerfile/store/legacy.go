package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/retrygate/retrygate/admit"
)

// legacyJob is a job of claim's own state file, versions 1 and 2 (before
// the books): how much of its deadline was gone when it was last seen, on
// which clocks, and its grants. A file of those versions is read, and its
// jobs become claims' records at the next update, with the time they had
// used and the attempts they had taken.
type legacyJob struct {
	Started     time.Time     `json:"started"`
	Deadline    time.Duration `json:"deadline_ns"`
	MaxAttempts int           `json:"max_attempts"`
	Attempts    int           `json:"attempts"`
	Grants      []string      `json:"grants,omitempty"`
	Spent       time.Duration `json:"spent_ns"`
	SeenWall    time.Time     `json:"seen"`
	SeenBoot    time.Duration `json:"seen_boot_ns"`
	BootID      string        `json:"boot_id"`
}

// used is how much of the job's deadline was gone at r, by the rule those
// versions kept: the boot clock since the job was last seen on the same
// boot, else the wall clock, never less than nothing.
func (j legacyJob) used(r Reading) time.Duration {
	seen := j.SeenWall
	if seen.IsZero() {
		seen = j.Started // version 1 kept no clock reading
	}
	since := r.Wall.Sub(seen)
	if j.BootID != "" && j.BootID == r.BootID {
		since = r.Boot - j.SeenBoot
	}
	return admit.AddDuration(admit.ClampDuration(j.Spent), admit.ClampDuration(since))
}

// upgrade makes each legacy job a claim's record at the file's time now
// (reading r). The file kept only deadlines and attempts, so the budget's
// other numbers are left open, as they were.
func (s *bookState) upgrade(r Reading, now time.Time) {
	for id, j := range s.Jobs {
		start := now.Add(-j.used(r))
		c := ClaimBook{
			Budget: admit.Budget{Deadline: j.Deadline, MaxAttempts: j.MaxAttempts,
				TokenCeiling: admit.MaxTokens, MaxWait: admit.MaxDuration},
			Job: admit.JobState{Start: start, Deadline: start.Add(j.Deadline)},
		}
		ids := j.Grants
		for len(ids) < j.Attempts {
			ids = append(ids, fmt.Sprintf("v1-%d", len(ids)+1)) // version 1 kept no grant ids
		}
		for _, g := range ids {
			c.grant(HeldAttempt{ID: g}) // no timeout kept: taken as spent
		}
		data, err := json.Marshal(c)
		if err != nil {
			continue
		}
		key := ClaimKey(id)
		if old, ok := s.Books[key]; ok {
			if m, err := mergeClaim(old.data(), data); err == nil {
				data = m
			}
		}
		s.put(key, Record{Data: data, Due: Never, Expires: claimExpires(data, time.Time{})})
	}
	s.Jobs = nil
}

// mergeLegacy keeps, of two copies of a legacy job, the one that took more
// attempts: a carried copy only arises from a file removed mid-update.
func mergeLegacy(d, s legacyJob) legacyJob {
	if s.Attempts > d.Attempts {
		return s
	}
	return d
}
