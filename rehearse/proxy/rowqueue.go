package proxy

import (
	"sync"
	"time"

	"retrygate/ledgerfile"
)

// rowQueue writes rows in the order they were decided, off the request
// path: rows are queued under the proxy's lock (so a job's rows keep
// their order) and one goroutine appends whatever has gathered in one
// go, so a busy proxy takes the log's lock once per batch, not per row.
// The writer is woken by the first row of a batch only and, when rows
// come faster than one a gather, lets the rest gather briefly: a
// goroutine hand-off per row cost a busy proxy more than the row itself.
type rowQueue struct {
	write func([]ledgerfile.Row) error
	fail  func(error)

	mu      sync.Mutex
	room    *sync.Cond // the queue has room again
	pending []ledgerfile.Row
	waiting bool          // the writer waits for a row
	wake    chan struct{} // the writer's wake-up, buffered 1
	closed  bool
	done    chan struct{}
}

const (
	// maxQueued bounds rows waiting for the log: past it, deciding waits
	// for the writer (a slow disk slows the proxy rather than growing
	// memory).
	maxQueued = 8192
	// gather is how long the writer lets a busy proxy's batch gather once
	// its first row came: the log's own batching holds rows longer than
	// this. A row that comes later than gather after the last batch is
	// written at once (a quiet proxy wakes no timer for it).
	gather = time.Millisecond
)

func newRowQueue(write func([]ledgerfile.Row) error, fail func(error)) *rowQueue {
	q := &rowQueue{write: write, fail: fail, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	q.room = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *rowQueue) add(r *ledgerfile.Row) {
	q.mu.Lock()
	for len(q.pending) >= maxQueued && !q.closed {
		q.room.Wait()
	}
	q.pending = append(q.pending, *r)
	if q.waiting {
		q.waiting = false
		q.wake <- struct{}{}
	}
	q.mu.Unlock()
}

func (q *rowQueue) run() {
	defer close(q.done)
	var batch []ledgerfile.Row
	var last time.Time
	for {
		q.mu.Lock()
		if len(q.pending) == 0 && !q.closed {
			q.waiting = true
			q.mu.Unlock()
			<-q.wake
			if now := time.Now(); now.Sub(last) < gather {
				time.Sleep(gather)
			}
			last = time.Now()
			q.mu.Lock()
		}
		if len(q.pending) == 0 && q.closed {
			q.mu.Unlock()
			return
		}
		batch, q.pending = q.pending, batch[:0]
		q.room.Broadcast()
		q.mu.Unlock()
		if len(batch) > 0 {
			if err := q.write(batch); err != nil {
				q.fail(err)
			}
		}
	}
}

// close writes every queued row, then stops.
func (q *rowQueue) close() {
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
