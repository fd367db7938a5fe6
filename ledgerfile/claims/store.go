package claims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/retrygate/retrygate/ledgerfile"
)

// The state file is one inode for its whole life: it is locked itself (no
// lock file beside it that a cleanup could remove from under a holder) and
// updated in place, never replaced by a rename. Each update appends one
// line, "<crc32c> <json>\n", holding the whole state; the last line whose
// checksum holds is the state, so a writer killed mid-line loses only its
// own update. Now and then the file is compacted to its last line, in an
// order that leaves a whole line readable at every step.
//
// A lock on an inode that was unlinked (the file or its directory deleted,
// as a cleanup might) guards nothing: the next claimer creates a new file
// and locks that. So a claimer checks, after locking and again after
// writing, that the path still names the inode it holds; if not, it starts
// over on the file that is there now, carrying the jobs of the file it
// held (the latest state there was) into it. A grant is therefore only
// given once it is recorded in the file at the path, and no two claimers
// ever update one state at once. Each grant has an id, so copies of a job
// merge exactly. A state deleted while no claimer holds it forgets its
// jobs, as `claim --done` forgets one.

// MaxStateBytes bounds the state file; a bigger file is refused, not read.
const MaxStateBytes = 64 << 20

// maxReopen bounds how often a claimer starts over because the state file
// vanished or was replaced while it waited.
const maxReopen = 10000

// castagnoli is built on first use, not at every start of the binary.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// ErrVanishing is returned when the state file keeps disappearing.
var ErrVanishing = errors.New("the state file keeps being removed or replaced while claiming")

// Update locks the state file at path, reads it, lets fn change it, and
// records the change before returning. fn may run more than once (when the
// file is replaced while it runs); only its last run counts. A missing file
// is an empty state, created only when fn leaves something to keep.
func Update(ctx context.Context, path string, fn func(*State) error) error {
	var carry *State
	for range maxReopen {
		done, err := update(ctx, path, fn, &carry)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("failed to claim in %q: %w", path, ErrVanishing)
}

// update makes one try; done is false when the file at path changed under
// it and the caller should start over. A claimer that finds it holds a
// file no longer at the path still holds that file's last state, the most
// recent there is: it carries those jobs into the file now at the path
// (carry), so a cleanup loses only what no claimer was holding.
func update(ctx context.Context, path string, fn func(*State) error, carry **State) (done bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if st, err := os.Lstat(path); err == nil {
		if !st.Mode().IsRegular() {
			return false, fmt.Errorf("state %q: not a regular file (%s)", path, ledgerfile.FileKind(st.Mode()))
		}
	} else if errors.Is(err, os.ErrNotExist) {
		// Nothing to lock yet. Create the file only if there is something to keep.
		s := emptyState()
		Merge(s, *carry)
		if err := fn(s); err != nil {
			return false, err
		}
		if len(s.Jobs) == 0 {
			return true, nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); errors.Is(err, os.ErrExist) {
			return false, nil // made and removed again while we looked: start over
		} else if err != nil {
			return false, fmt.Errorf("failed to create state dir %q: %w", filepath.Dir(path), err)
		}
	} else {
		return false, fmt.Errorf("state %q: %w", path, err)
	}
	f, err := openState(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // its directory went away between the two steps
	}
	if err != nil {
		return false, fmt.Errorf("failed to open state %q: %w", path, err)
	}
	defer f.Close()
	lock := ledgerfile.NewFileLock(path)
	if err := lock.Lock(ctx); errors.Is(err, os.ErrNotExist) {
		return false, nil // removed since we opened it: start over
	} else if err != nil {
		return false, fmt.Errorf("failed to lock state %q: %w", path, err)
	}
	defer lock.Unlock()
	data, err := readAll(f)
	if err != nil {
		return false, fmt.Errorf("failed to read state %q: %w", path, err)
	}
	s, end, err := decode(data)
	if err != nil {
		return false, fmt.Errorf("failed to read state %q: %w (delete it to start afresh)", path, err)
	}
	if !stillAt(f, path) {
		*carry = Merge(*carry, s)
		return false, nil
	}
	before, _ := json.Marshal(s)
	Merge(s, *carry)
	held, _, _ := decode(data) // what this file held, for carrying if it vanishes
	Merge(held, *carry)
	if err := fn(s); err != nil {
		return false, err
	}
	after, _ := json.Marshal(s)
	if bytes.Equal(before, after) {
		return true, nil
	}
	if err := writeState(f, int64(len(data)), end, after); err != nil {
		return false, fmt.Errorf("failed to write state %q: %w", path, err)
	}
	if end == 0 {
		syncDir(filepath.Dir(path)) // a new file: make its name durable too
	}
	// Written, but to the file at path? If it was removed while we held it,
	// the update went to an inode nobody will read: carry what it held (not
	// fn's change, which is made again) and do it again there.
	if !stillAt(f, path) {
		*carry = Merge(*carry, held)
		return false, nil
	}
	return true, nil
}

// stillAt reports whether path names the inode f holds.
func stillAt(f *os.File, path string) bool {
	fst, err := f.Stat()
	if err != nil {
		return false
	}
	pst, err := os.Lstat(path)
	if err != nil {
		return false
	}
	return os.SameFile(fst, pst)
}

func readAll(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", ledgerfile.FileKind(st.Mode()))
	}
	if st.Size() > MaxStateBytes {
		return nil, fmt.Errorf("larger than %d MiB", MaxStateBytes>>20)
	}
	data, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, MaxStateBytes+1), MaxStateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxStateBytes {
		return nil, fmt.Errorf("larger than %d MiB", MaxStateBytes>>20)
	}
	return data, nil
}

func emptyState() *State { return &State{Version: 2, Jobs: map[string]Job{}} }

// decode reads the state from the file's bytes and returns where its last
// good line ends (where the next update goes).
func decode(data []byte) (*State, int64, error) {
	s := emptyState()
	if len(bytes.TrimSpace(data)) == 0 {
		return s, 0, nil
	}
	if data[0] == '{' {
		// Version 1: the whole file is one JSON object, replaced by rename.
		if err := json.Unmarshal(data, s); err != nil {
			return nil, 0, err
		}
		for id, j := range s.Jobs {
			if j.SeenWall.IsZero() {
				j.SeenWall = j.Started // no boot clock recorded: measured on the wall clock
			}
			s.Jobs[id] = j
		}
		s.Version = 2
		return s, 0, nil // the next update overwrites it
	}
	end := len(data)
	for end > 0 {
		start := bytes.LastIndexByte(data[:end-1], '\n') + 1
		line := data[start:end]
		if st, ok := decodeLine(line); ok {
			return st, int64(end), nil
		}
		end = start
	}
	return nil, 0, errors.New("no readable state in the file")
}

func decodeLine(line []byte) (*State, bool) {
	body, ok := bytes.CutSuffix(line, []byte("\n"))
	if !ok || len(body) < 10 || body[8] != ' ' {
		return nil, false
	}
	var sum uint32
	if _, err := fmt.Sscanf(string(body[:8]), "%08x", &sum); err != nil {
		return nil, false
	}
	js := body[9:]
	if crc32.Checksum(js, castagnoli()) != sum {
		return nil, false
	}
	s := emptyState()
	if err := json.Unmarshal(js, s); err != nil {
		return nil, false
	}
	if s.Jobs == nil {
		s.Jobs = map[string]Job{}
	}
	return s, true
}

func encodeLine(js []byte) []byte {
	return fmt.Appendf(nil, "%08x %s\n", crc32.Checksum(js, castagnoli()), js)
}

// writeState records js after the last good line (at end), then cuts off
// whatever followed it (a torn line). When the file has grown well past
// one state, it is compacted: the new line is first written at the end and
// synced, then copied to the start, then the file is cut to that one line;
// a crash at any step leaves a good last line.
func writeState(f *os.File, size, end int64, js []byte) error {
	line := encodeLine(js)
	n := int64(len(line))
	if err := writeAt(f, line, end, size); err != nil {
		return err
	}
	if end+n <= 4*n+64<<10 || end == 0 {
		return nil
	}
	if _, err := f.WriteAt(line, 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Truncate(n); err != nil {
		return err
	}
	return f.Sync()
}

func writeAt(f *os.File, line []byte, at, size int64) error {
	if _, err := f.WriteAt(line, at); err != nil {
		return err
	}
	if at+int64(len(line)) < size {
		if err := f.Truncate(at + int64(len(line))); err != nil {
			return err
		}
	}
	return f.Sync()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// ReadFile reads the state at path without locking it (for inspection).
func ReadFile(path string) (*State, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := readAll(f)
	if err != nil {
		return nil, fmt.Errorf("failed to read state %q: %w", path, err)
	}
	s, _, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("failed to read state %q: %w", path, err)
	}
	return s, nil
}
