package store

import (
	"context"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
)

// Books keeps one record per key: a job's books, so that whoever decides
// on a job (claim's shell loops, several proxies) shares one budget per
// job on one machine or many. A record is opaque here: its owner encodes
// it, decides on it, and the store only keeps it and serializes its
// updates. FileBooks keeps them in one file, pgstore in PostgreSQL.
//
// Keys are their owners': a proxy's are its job ids (no spaces) and its
// retry budget's record; claim's are ClaimKey(job).
type Books interface {
	// Book runs fn on key's record (nil when there is none yet) while
	// holding the key's lock, which no other holder, on this machine or
	// another, can take meanwhile; now is the store's clock (one for every
	// holder, and never going back for a file's). The Record fn returns
	// replaces the old one (nil Data forgets the key), and its rows are
	// appended to the log in the same transaction: both happen, or neither.
	// fn may run again when the transaction is retried, so its only effect
	// must be its result.
	Book(ctx context.Context, key string, fn func(old []byte, now time.Time) (Record, []ledgerfile.Row, error)) error
	// BookShared is Book with a second record, shared, locked after key's
	// in the same transaction: fn reads and replaces both, and both are
	// stored with the rows, or none is. Every holder locks a key first and
	// the shared record second, so no two wait on each other in a cycle.
	// The shared record is never due.
	BookShared(ctx context.Context, key, shared string, fn func(old, sharedOld []byte, now time.Time) (Record, []byte, []ledgerfile.Row, error)) error
	// Due lists up to n keys whose Due time has passed, soonest first.
	Due(ctx context.Context, n int) ([]string, error)
}

// Record is one key's record and when a sweep should look at it again.
type Record struct {
	Data []byte
	Due  time.Time
	// Expires, when set, is when the store may forget the record without
	// its owner: a file forgets it at its next update past that time (the
	// file stays small); PostgreSQL keeps it until its owner forgets it.
	Expires time.Time
}

// Never is a Due no sweep reaches: a record only its owner looks at.
var Never = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
