package proxy

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrygate/retrygate/ledgerfile"
	"github.com/retrygate/retrygate/ledgerfile/store"
)

// queue writes rows (and event lines) in the order they were queued, off
// the request path: rows are queued under the proxy's lock (so a job's
// rows keep their order) and one goroutine appends whatever has gathered
// in one go, so a busy proxy takes the log's lock once per batch, not per
// row. The writer is woken by the first row of a batch only and, when
// rows come faster than one a gather, lets the rest gather briefly: a
// goroutine hand-off per row cost a busy proxy more than the row itself.
// A full queue makes its sender wait (a slow disk, or a flood of
// refusals, slows the proxy rather than growing memory).
//
// A write that fails (a full disk, a log replaced by something that is
// no file, a database that does not answer) loses nothing yet: its
// values are held, in order, and written first by every later write,
// and by a retry every retryEvery while nothing new comes, so rows
// resume when the log takes them again. Held values are bounded
// (maxHeld): past it the oldest are dropped, and each dropped value is
// counted lost (lost, with the reason), as are the values still held
// when the queue closes and its last write fails.
type queue[T any] struct {
	write func([]T) error
	fail  func(error)
	// permanent reports whether a write's error will come again for
	// the same values, whatever the log's state: then each is written
	// alone, and those refused are lost, not held.
	permanent func(error) bool
	lost      func([]T, LostReason)
	held      func(int) // the values held after each write (0: none, told once after a failure)
	max       int       // values waiting for the log at most
	maxHeld   int       // values a failed write holds at most
	retry     time.Duration

	mu      sync.Mutex
	room    *sync.Cond // the queue has room again
	pending []T
	waiting bool          // the writer waits for a value
	wake    chan struct{} // the writer's wake-up, buffered 1
	closed  bool
	done    chan struct{}

	// hold is what failed writes left, oldest first: the writer's own.
	hold []T
	// written, dropped count values the log took, and values lost.
	written, dropped atomic.Int64
	holding          atomic.Int64
}

// LostReason says why a row never reached the log.
type LostReason string

const (
	// LostHeldLimit: the log refused writes for so long that the rows
	// held for it passed Options.MaxHeld; the oldest went.
	LostHeldLimit LostReason = "held_limit"
	// LostShutdown: the proxy stopped while its rows were held and the
	// last write failed too.
	LostShutdown LostReason = "shutdown"
	// LostRefused: the log refused the row itself, for good (a value it
	// cannot hold, a job and attempt it already has).
	LostRefused LostReason = "refused"
)

const (
	// maxQueued bounds rows waiting for the log: past it, deciding waits
	// for the writer; maxEventsQueued, event lines.
	maxQueued       = 8192
	maxEventsQueued = 4096
	// DefaultMaxHeld bounds the rows (and, apart, the event lines) held
	// in memory while the log refuses them.
	DefaultMaxHeld = 100_000
	// gather is how long the writer lets a busy proxy's batch gather once
	// its first row came: the log's own batching holds rows longer than
	// this. A row that comes later than gather after the last batch is
	// written at once (a quiet proxy wakes no timer for it).
	gather = time.Millisecond
)

// retryEvery is how often held values are written again while no new
// value comes (a variable: tests shorten it).
var retryEvery = time.Second

func newQueue[T any](write func([]T) error, fail func(error), lost func([]T, LostReason), held func(int), max, maxHeld int) *queue[T] {
	q := &queue[T]{write: write, fail: fail, permanent: refusedForGood, lost: lost, held: held, max: max, maxHeld: maxHeld, retry: retryEvery,
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	q.room = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *queue[T]) add(v *T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.pending) >= q.max && !q.closed {
		q.room.Wait()
	}
	q.pending = append(q.pending, *v)
	if q.waiting {
		q.waiting = false
		q.wake <- struct{}{}
	}
}

func (q *queue[T]) run() {
	defer close(q.done)
	var spare []T
	var last time.Time
	for {
		q.mu.Lock()
		if len(q.pending) == 0 && !q.closed {
			q.waiting = true
			q.mu.Unlock()
			// Woken by a value, or by the retry of what is held.
			if q.sleep() {
				if now := time.Now(); now.Sub(last) < gather {
					time.Sleep(gather)
				}
				last = time.Now()
			}
			q.mu.Lock()
		}
		closing := q.closed && len(q.pending) == 0
		cur := q.pending
		q.pending = spare[:0]
		q.room.Broadcast()
		q.mu.Unlock()
		spare = q.flush(cur)
		if closing {
			if len(q.hold) > 0 {
				q.drop(len(q.hold), LostShutdown)
			}
			return
		}
	}
}

// sleep waits for a value (true); with values held, only until the next
// retry is due (false).
func (q *queue[T]) sleep() bool {
	if len(q.hold) == 0 {
		<-q.wake
		return true
	}
	t := time.NewTimer(q.retry)
	defer t.Stop()
	select {
	case <-q.wake:
		return true
	case <-t.C:
	}
	q.mu.Lock()
	if !q.waiting {
		<-q.wake // a value came as the timer fired: its wake-up is spent here
	}
	q.waiting = false
	q.mu.Unlock()
	return false
}

// flush writes what is held, then cur, in one write; it returns a slice
// the next batch may reuse.
func (q *queue[T]) flush(cur []T) (spare []T) {
	batch := cur
	if len(q.hold) > 0 {
		batch = append(q.hold, cur...)
	}
	if len(batch) == 0 {
		return cur
	}
	err := q.write(batch)
	if err == nil {
		q.written.Add(int64(len(batch)))
	} else if q.permanent(err) {
		// A value the log will never take (a row it cannot hold, one it
		// already has) must not hold back the rest: each is written
		// alone, and those refused for good are lost.
		batch, err = q.sift(batch)
	}
	if err != nil {
		q.hold = batch
		if over := len(q.hold) - q.maxHeld; over > 0 {
			q.drop(over, LostHeldLimit)
		}
		q.holding.Store(int64(len(q.hold)))
		q.held(len(q.hold))
		q.fail(err)
		if len(cur) > 0 && len(batch) > 0 && &batch[len(batch)-1] == &cur[len(cur)-1] {
			return nil // cur is held now
		}
		return cur
	}
	if len(q.hold) > 0 {
		clear(q.hold)
		q.hold = q.hold[:0]
		q.holding.Store(0)
		q.held(0)
	}
	return cur
}

// sift writes batch's values one at a time after a write failed for
// good: those refused for good are lost (LostRefused); at the first
// other failure, the values from there on are returned, to be held.
func (q *queue[T]) sift(batch []T) ([]T, error) {
	for i := range batch {
		err := q.write(batch[i : i+1])
		switch {
		case err == nil:
			q.written.Add(1)
		case q.permanent(err):
			q.dropped.Add(1)
			q.lost(batch[i:i+1], LostRefused)
			q.fail(err)
		default:
			return batch[i:], err
		}
	}
	return nil, nil
}

// drop loses the n oldest held values.
func (q *queue[T]) drop(n int, why LostReason) {
	gone := q.hold[:n:n]
	q.hold = q.hold[n:]
	q.dropped.Add(int64(n))
	q.lost(gone, why)
	q.holding.Store(int64(len(q.hold)))
}

// close writes every queued value (and what is held), then stops.
func (q *queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.room.Broadcast()
	if q.waiting {
		q.waiting = false
		q.wake <- struct{}{}
	}
	q.mu.Unlock()
	<-q.done
}

// refusedForGood is an error writing again cannot mend: a row or event
// line the log cannot hold, a value PostgreSQL cannot store, a job and
// attempt the log already has.
func refusedForGood(err error) bool {
	var le *ledgerfile.LineError
	return errors.Is(err, ledgerfile.ErrCannotHold) || errors.Is(err, store.ErrDuplicate) || errors.As(err, &le)
}
