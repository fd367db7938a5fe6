package store

import (
	"context"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
)

// Books keeps one record per key: the proxy's job books, so that several
// proxies in front of one database share one budget per job. A record is
// opaque here: its owner encodes it, decides on it, and the store only
// keeps it and serializes its updates.
type Books interface {
	// Book runs fn on key's record (nil when there is none yet) while
	// holding the key's lock, which no other holder, on this machine or
	// another, can take meanwhile; now is the store's clock (one for every
	// holder). The Record fn returns replaces the old one (nil Data
	// forgets the key), and its rows are appended to the log in the same
	// transaction: both happen, or neither. fn may run again when the
	// transaction is retried, so its only effect must be its result.
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
}
