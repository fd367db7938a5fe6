package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"slices"

	"github.com/retrygate/retrygate/ledgerfile"
)

// File is a log in one file: ledgerfile's writer (append-only, locked)
// and reader, unchanged.
type File struct {
	w *ledgerfile.Writer
}

// OpenFile prepares the log at path; nothing is created before the first
// write.
func OpenFile(path string, fsync bool) *File {
	return &File{w: ledgerfile.NewWriter(path, fsync)}
}

// Writer is the file's writer, for callers that need the file itself.
func (f *File) Writer() *ledgerfile.Writer { return f.w }

func (f *File) Name() string { return f.w.Path() }

func (f *File) Append(_ context.Context, rows ...ledgerfile.Row) error {
	return f.w.Append(rows...)
}

func (f *File) AppendJob(_ context.Context, job string, fn func([]ledgerfile.Row) ([]ledgerfile.Row, error)) error {
	return f.w.Locked(func() ([]ledgerfile.Row, error) {
		earlier, err := ledgerfile.ReadJob(f.w.Path(), job)
		if err != nil {
			return nil, err
		}
		return fn(earlier)
	})
}

func (f *File) CommentLocked(ctx context.Context, fn func([]string) (string, error)) error {
	return f.w.CommentLocked(func() (string, error) {
		var comments []string
		err := f.Scan(ctx, func(e Entry) error {
			if e.Row == nil {
				comments = append(comments, e.Comment)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		return fn(comments)
	})
}

func (f *File) ReadJob(_ context.Context, job string) ([]ledgerfile.Row, error) {
	return ledgerfile.ReadJob(f.w.Path(), job)
}

// Scan reads the file strictly, opened as every reader of a log opens it
// (ledgerfile.OpenLog); a missing file has no entries.
func (f *File) Scan(ctx context.Context, fn func(Entry) error) error {
	fh, err := ledgerfile.OpenLog(f.w.Path())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	return ReadEntries(fh, f.w.Path(), func(e Entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(e)
	})
}

func (f *File) Close() error { return f.w.Close() }

// Import appends entries' rows to the file under its lock, all or none:
// a (job, attempt) the file already holds, or that entries hold twice, is
// refused as ErrDuplicate before anything is written. Comments are not
// copied (the file writer appends comments apart from rows). The rows are
// held in memory until they are written.
func (f *File) Import(ctx context.Context, entries iter.Seq2[Entry, error]) (n int64, err error) {
	err = f.w.Locked(func() ([]ledgerfile.Row, error) {
		have, err := ledgerfile.ReadJob(f.w.Path(), "")
		if err != nil {
			return nil, err
		}
		type key struct {
			job     string
			attempt int
		}
		seen := map[key]bool{}
		for _, r := range have {
			if r.Job != "" && r.Attempt > 0 {
				seen[key{r.Job, r.Attempt}] = true
			}
		}
		var rows []ledgerfile.Row
		for e, err := range entries {
			if err != nil {
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if e.Row == nil {
				continue
			}
			r := *e.Row
			r.Extra = slices.Clone(r.Extra)
			if k := (key{r.Job, r.Attempt}); r.Job != "" && r.Attempt > 0 {
				if seen[k] {
					return nil, fmt.Errorf("%w already in %s: (%s, %d)", ErrDuplicate, f.w.Path(), r.Job, r.Attempt)
				}
				seen[k] = true
			}
			r.Line = 0
			rows = append(rows, r)
		}
		n = int64(len(rows))
		return rows, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
