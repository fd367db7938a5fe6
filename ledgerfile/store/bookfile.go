package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/retrygate/retrygate/ledgerfile"
)

// FileBooks is Books in one file: every key's record in one state, read
// and replaced under a lock on the file itself, measured on the file's
// own clock (fileClock). It is where `claim --state FILE` keeps its jobs,
// and it can keep a proxy's shared books beside a file log (Log).
//
// The file is one inode for its whole life: it is locked itself (no lock
// file beside it that a cleanup could remove from under a holder) and
// updated in place, never replaced by a rename, which would replace a
// file another holder had just made. Each update appends one line,
// "<crc32c> <json>\n", holding the whole state; the last line whose
// checksum holds is the state, so a writer killed mid-line loses only its
// own update. Now and then the file is compacted to its last line, in an
// order that leaves a whole line readable at every step.
//
// A lock on an inode that was unlinked (the file or its directory deleted,
// as a cleanup might) guards nothing: the next holder creates a new file
// and locks that. So a holder checks, after locking and again after
// writing, that the path still names the inode it holds; if not, it starts
// over on the file that is there now, carrying the records of the file it
// held (the latest state there was) into it. An update is therefore only
// done once it is recorded in the file at the path, and no two holders
// ever update one state at once. A state deleted while no holder holds it
// forgets its records.
type FileBooks struct {
	Path  string
	Clock Clock // nil: SystemClock
	// Log is where the rows a Book returns go. They are kept in the state
	// with the books they go with (one write: both or neither), then
	// appended to the log under its lock, once: a holder checks the log
	// for rows a holder before it kept and did not get to append. Nil: a
	// Book that returns rows fails.
	Log *ledgerfile.Writer

	mu sync.Mutex // this process's holders wait here, not on the file
}

// MaxStateBytes bounds the books file; a bigger file is refused, not read.
const MaxStateBytes = 64 << 20

// maxReopen bounds how often a holder starts over because the file
// vanished or was replaced while it waited.
const maxReopen = 10000

// ErrVanishing is returned when the books file keeps disappearing.
var ErrVanishing = errors.New("the state file keeps being removed or replaced while updating it")

// castagnoli is built on first use, not at every start of the binary.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// stateVersion is the books' format: 1 and 2 were claim's own state
// (legacy.go reads them).
const stateVersion = 3

// bookState is the whole file.
type bookState struct {
	Version int                   `json:"version"`
	Clock   fileClock             `json:"clock"`
	Books   map[string]fileRecord `json:"books"`
	// Outbox holds rows kept with the books whose append to the log is
	// not known to have happened.
	Outbox []outRows `json:"outbox,omitempty"`
	// Jobs is claim's state before the books (versions 1 and 2): each job
	// becomes a claim's record at the next update.
	Jobs map[string]legacyJob `json:"jobs,omitempty"`
}

// fileRecord is one key's record. Data that is JSON as encoding/json
// writes it is kept as it is (a person can read the file); other data as
// base64.
type fileRecord struct {
	JSON    json.RawMessage `json:"json,omitempty"`
	Bytes   []byte          `json:"bytes,omitempty"`
	Due     time.Time       `json:"due"`
	Expires time.Time       `json:"expires,omitzero"`
	Rev     int64           `json:"rev"` // updates so far: of two copies, the one updated more wins
}

// outRows are rows kept for a log: its path, its size when they were
// kept (they are appended after that), and their lines.
type outRows struct {
	Log   string   `json:"log"`
	At    int64    `json:"at"`
	Lines []string `json:"lines"`
}

func emptyState() *bookState {
	return &bookState{Version: stateVersion, Books: map[string]fileRecord{}}
}

func (r fileRecord) data() []byte {
	if r.JSON != nil {
		return r.JSON
	}
	return r.Bytes
}

func (r fileRecord) record() Record {
	return Record{Data: slices.Clone(r.data()), Due: r.Due, Expires: r.Expires}
}

// put replaces key's record with rec (nil Data forgets the key).
func (s *bookState) put(key string, rec Record) {
	old, had := s.Books[key]
	if len(rec.Data) == 0 {
		delete(s.Books, key)
		return
	}
	f := fileRecord{Due: rec.Due, Expires: rec.Expires, Rev: old.Rev}
	if js, err := json.Marshal(json.RawMessage(rec.Data)); err == nil && bytes.Equal(js, rec.Data) {
		f.JSON = js
	} else {
		f.Bytes = slices.Clone(rec.Data)
	}
	if !had || !bytes.Equal(old.data(), rec.Data) || !old.Due.Equal(rec.Due) || !old.Expires.Equal(rec.Expires) {
		f.Rev++
	}
	s.Books[key] = f
}

// content is the state as compared before and after an update: the clock
// moves on every read and is only worth a write with a change.
func (s *bookState) content() []byte {
	c := *s
	c.Clock = fileClock{}
	js, _ := json.Marshal(&c)
	return js
}

// Name is the books file's path.
func (b *FileBooks) Name() string { return b.Path }

// Book runs fn on key's record under the file's lock (see Books).
func (b *FileBooks) Book(ctx context.Context, key string, fn func(old []byte, now time.Time) (Record, []ledgerfile.Row, error)) error {
	return b.book(ctx, key, "", func(old, _ []byte, now time.Time) (Record, []byte, []ledgerfile.Row, error) {
		rec, rows, err := fn(old, now)
		return rec, nil, rows, err
	})
}

// BookShared is Book with a second record: both live in the one state,
// so both are replaced in the one write.
func (b *FileBooks) BookShared(ctx context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (Record, []byte, []ledgerfile.Row, error)) error {
	return b.book(ctx, key, shared, fn)
}

func (b *FileBooks) book(ctx context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (Record, []byte, []ledgerfile.Row, error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var mine *outRows
	err := b.update(ctx, func(s *bookState, now time.Time) error {
		mine = nil
		var sharedOld []byte
		if shared != "" {
			sharedOld = s.Books[shared].record().Data
		}
		rec, sharedRec, rows, err := fn(s.Books[key].record().Data, sharedOld, now)
		if err != nil {
			return err
		}
		if len(rows) > 0 {
			if mine, err = b.keep(rows); err != nil {
				return err
			}
			s.Outbox = append(s.Outbox, *mine)
		}
		s.put(key, rec)
		if shared != "" {
			s.put(shared, Record{Data: sharedRec, Due: Never})
		}
		return nil
	})
	if err != nil || mine == nil {
		return err
	}
	if _, err := b.deliver(*mine); err != nil {
		return fmt.Errorf("books %q kept; their rows wait for the next update to reach log %q: %w", b.Path, b.Log.Path(), err)
	}
	return nil
}

// keep encodes rows for the outbox, refusing what the log cannot hold.
func (b *FileBooks) keep(rows []ledgerfile.Row) (*outRows, error) {
	if b.Log == nil {
		return nil, fmt.Errorf("books %q keep no log: %d rows have nowhere to go", b.Path, len(rows))
	}
	out := &outRows{Log: b.Log.Path(), Lines: make([]string, 0, len(rows))}
	for i := range rows {
		n := rows[i]
		ledgerfile.Normalize(&n)
		if err := ledgerfile.Check(&n); err != nil {
			return nil, fmt.Errorf("refusing to keep a row the log cannot hold: %w", err)
		}
		out.Lines = append(out.Lines, ledgerfile.FormatRow(&n))
	}
	if st, err := os.Stat(out.Log); err == nil {
		out.At = st.Size()
	}
	return out, nil
}

// deliver appends p's rows to the log unless they are there already,
// under the log's lock, so no two holders append them both. It reports
// whether p is done with (false: another log's, which this holder does
// not write).
func (b *FileBooks) deliver(p outRows) (bool, error) {
	if b.Log == nil || p.Log != b.Log.Path() || len(p.Lines) == 0 {
		return len(p.Lines) == 0, nil
	}
	err := b.Log.LockedTail(func(log io.ReaderAt, size int64) ([]ledgerfile.Row, error) {
		at := p.At
		if at > size {
			at = 0 // the log is not the one the rows were kept for: look at all of it
		}
		if hasLine(io.NewSectionReader(log, at, size-at), p.Lines[0]) {
			return nil, nil
		}
		rows := make([]ledgerfile.Row, len(p.Lines))
		for i, line := range p.Lines {
			if err := ledgerfile.ParseLine([]byte(line), &rows[i]); err != nil {
				return nil, fmt.Errorf("a kept row does not read back: %w", err)
			}
		}
		return rows, nil
	})
	if err == nil {
		err = b.Log.Flush()
	}
	return err == nil, err
}

// hasLine reports whether r holds line, whole, as one of its lines.
func hasLine(r io.Reader, line string) bool {
	br := bufio.NewReaderSize(r, max(len(line)+1, 4096))
	for {
		l, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) { // longer than line: not it
			l = nil
			_, err = br.ReadSlice('\n')
		}
		if l != nil && string(bytes.TrimSuffix(l, []byte("\n"))) == line {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// Due lists up to n keys whose due time has passed by the file's clock,
// soonest first. It reads the file's last good state without locking it.
func (b *FileBooks) Due(_ context.Context, n int) ([]string, error) {
	s, err := readBooks(b.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := b.clock()()
	if err != nil {
		return nil, err
	}
	now := s.Clock.at(r)
	var keys []string
	for k, rec := range s.Books {
		if !rec.Due.After(now) && (rec.Expires.IsZero() || now.Before(rec.Expires)) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := s.Books[a].Due.Compare(s.Books[b].Due); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a), []byte(b))
	})
	return keys[:min(len(keys), max(n, 0))], nil
}

// ReadFileBooks reads the records of the books file at path without
// locking it, for inspection.
func ReadFileBooks(path string) (map[string]Record, error) {
	s, err := readBooks(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Record, len(s.Books))
	for k, r := range s.Books {
		out[k] = r.record()
	}
	return out, nil
}

func (b *FileBooks) clock() Clock {
	if b.Clock == nil {
		return SystemClock
	}
	return b.Clock
}

// update locks the file, reads it, runs fn on its state at the file's
// clock (records past their Expires gone, rows kept before delivered),
// and records the change before returning. fn may run more than once
// (when the file is replaced while it runs); only its last run counts. A
// missing file is an empty state, created only when fn leaves something
// to keep.
func (b *FileBooks) update(ctx context.Context, fn func(*bookState, time.Time) error) error {
	var carry *bookState
	for range maxReopen {
		done, err := b.try(ctx, fn, &carry)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("failed to update state %q: %w", b.Path, ErrVanishing)
}

// apply is one run of fn on s: the clock, the records past their
// Expires, the rows kept before (their append checked), then fn.
func (b *FileBooks) apply(s *bookState, fn func(*bookState, time.Time) error) error {
	r, err := b.clock()()
	if err != nil {
		return err
	}
	now := s.Clock.at(r)
	s.upgrade(r, now)
	for k, rec := range s.Books {
		if !rec.Expires.IsZero() && !now.Before(rec.Expires) {
			delete(s.Books, k)
		}
	}
	kept := s.Outbox[:0:0]
	for _, p := range s.Outbox {
		if done, err := b.deliver(p); err != nil || !done {
			kept = append(kept, p)
		}
	}
	s.Outbox = kept
	return fn(s, now)
}

// try makes one update; done is false when the file at the path changed
// under it and the caller should start over. A holder that finds it
// holds a file no longer at the path still holds that file's last state,
// the most recent there is: it carries those records into the file now
// at the path (carry), so a cleanup loses only what no holder was holding.
func (b *FileBooks) try(ctx context.Context, fn func(*bookState, time.Time) error, carry **bookState) (done bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	path := b.Path
	if st, err := os.Lstat(path); err == nil {
		if !st.Mode().IsRegular() {
			return false, fmt.Errorf("state %q: not a regular file (%s)", path, ledgerfile.FileKind(st.Mode()))
		}
	} else if errors.Is(err, os.ErrNotExist) {
		// Nothing to lock yet. Create the file only if there is something to keep.
		s := mergeState(emptyState(), *carry)
		if err := b.apply(s, fn); err != nil {
			return false, err
		}
		if len(s.Books) == 0 && len(s.Outbox) == 0 {
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
	fl := ledgerfile.NewFileLock(path, flock.SetFlag(stateFlags), flock.SetPermissions(0o600))
	if err := fl.Lock(ctx); errors.Is(err, os.ErrNotExist) {
		return false, nil // its directory went away between the two steps
	} else if err != nil {
		return false, fmt.Errorf("failed to lock state %q: %w", path, err)
	}
	defer fl.Unlock()
	f, err := os.OpenFile(path, stateFlags, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("failed to open state %q: %w", path, err)
	}
	defer f.Close()
	if lst, err := fl.Stat(); err != nil || !sameFile(f, lst) {
		return false, nil // replaced between the lock's open and ours
	}
	data, err := readAll(f)
	if err != nil {
		return false, fmt.Errorf("failed to read state %q: %w", path, err)
	}
	s, end, err := decode(data)
	if err != nil {
		return false, fmt.Errorf("failed to read state %q: %w (delete it to start afresh)", path, err)
	}
	if !stillAt(f, path) {
		*carry = mergeState(*carry, s)
		return false, nil
	}
	before := s.content()
	mergeState(s, *carry)
	held, _, _ := decode(data) // what this file held, for carrying if it vanishes
	mergeState(held, *carry)
	if err := b.apply(s, fn); err != nil {
		return false, err
	}
	if bytes.Equal(before, s.content()) && s.Version == stateVersion {
		return true, nil
	}
	s.Version = stateVersion
	js, err := json.Marshal(s)
	if err != nil {
		return false, err
	}
	if err := writeState(f, int64(len(data)), end, js); err != nil {
		return false, fmt.Errorf("failed to write state %q: %w", path, err)
	}
	if end == 0 {
		syncDir(filepath.Dir(path)) // a new file: make its name durable too
	}
	// Written, but to the file at path? If it was removed while we held it,
	// the update went to an inode nobody will read: carry what it held (not
	// fn's change, which is made again) and do it again there.
	if !stillAt(f, path) {
		*carry = mergeState(*carry, held)
		return false, nil
	}
	return true, nil
}

func sameFile(f *os.File, st os.FileInfo) bool {
	fst, err := f.Stat()
	return err == nil && os.SameFile(fst, st)
}

// stillAt reports whether path names the inode f holds.
func stillAt(f *os.File, path string) bool {
	pst, err := os.Lstat(path)
	return err == nil && sameFile(f, pst)
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
	data, err := io.ReadAll(io.NewSectionReader(f, 0, MaxStateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxStateBytes {
		return nil, fmt.Errorf("larger than %d MiB", MaxStateBytes>>20)
	}
	return data, nil
}

// readBooks reads the state at path without locking it.
func readBooks(path string) (*bookState, error) {
	f, err := os.OpenFile(path, readFlags, 0)
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

// decode reads the state from the file's bytes and returns where its last
// good line ends (where the next update goes).
func decode(data []byte) (*bookState, int64, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return emptyState(), 0, nil
	}
	if data[0] == '{' {
		// Version 1: the whole file is one JSON object, replaced by rename;
		// the next update overwrites it.
		s, err := decodeJSON(data)
		return s, 0, err
	}
	end := len(data)
	for end > 0 {
		start := bytes.LastIndexByte(data[:end-1], '\n') + 1
		if s, err := decodeLine(data[start:end]); err == nil {
			return s, int64(end), nil
		} else if errors.Is(err, errNewer) {
			return nil, 0, err
		}
		end = start
	}
	return nil, 0, errors.New("no readable state in the file")
}

// errNewer is a state a newer retrygate wrote.
var errNewer = errors.New("newer than this retrygate reads")

func decodeJSON(js []byte) (*bookState, error) {
	s := emptyState()
	if err := json.Unmarshal(js, s); err != nil {
		return nil, err
	}
	if s.Version > stateVersion {
		return nil, fmt.Errorf("version %d is %w (%d): upgrade retrygate", s.Version, errNewer, stateVersion)
	}
	if s.Books == nil {
		s.Books = map[string]fileRecord{}
	}
	return s, nil
}

// errBadLine is a line whose checksum does not hold (a torn update).
var errBadLine = errors.New("not a whole state line")

func decodeLine(line []byte) (*bookState, error) {
	body, ok := bytes.CutSuffix(line, []byte("\n"))
	if !ok || len(body) < 10 || body[8] != ' ' {
		return nil, errBadLine
	}
	var sum uint32
	if _, err := fmt.Sscanf(string(body[:8]), "%08x", &sum); err != nil {
		return nil, errBadLine
	}
	js := body[9:]
	if crc32.Checksum(js, castagnoli()) != sum {
		return nil, errBadLine
	}
	return decodeJSON(js)
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

// mergeState adds src's records into dst (a new state when dst is nil)
// and returns it. A key in both is merged by its owner's rule where it
// has one (a claim's: every grant of either, counted once), else the copy
// updated more often wins. The clock that is further on is kept: merging
// never gives a record time back.
func mergeState(dst, src *bookState) *bookState {
	if src == nil {
		return dst
	}
	if dst == nil {
		dst = emptyState()
	}
	if src.Clock.Now.After(dst.Clock.Now) {
		dst.Clock = src.Clock
	}
	for k, r := range src.Books {
		d, ok := dst.Books[k]
		switch {
		case !ok:
			r.JSON, r.Bytes = slices.Clone(r.JSON), slices.Clone(r.Bytes)
			dst.Books[k] = r
		case isClaimKey(k):
			if m, err := mergeClaim(d.data(), r.data()); err == nil {
				d.JSON, d.Bytes = m, nil
				d.Expires = claimExpires(m, d.Expires)
				d.Rev = max(d.Rev, r.Rev) + 1
				dst.Books[k] = d
			}
		case r.Rev > d.Rev:
			r.JSON, r.Bytes = slices.Clone(r.JSON), slices.Clone(r.Bytes)
			dst.Books[k] = r
		}
	}
	for _, p := range src.Outbox {
		if !slices.ContainsFunc(dst.Outbox, func(q outRows) bool { return q.Log == p.Log && slices.Equal(q.Lines, p.Lines) }) {
			dst.Outbox = append(dst.Outbox, p)
		}
	}
	for id, j := range src.Jobs {
		if dst.Jobs == nil {
			dst.Jobs = map[string]legacyJob{}
		}
		dst.Jobs[id] = mergeLegacy(dst.Jobs[id], j)
	}
	return dst
}

var _ Books = (*FileBooks)(nil)
