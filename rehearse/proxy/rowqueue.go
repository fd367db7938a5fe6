package proxy

import (
	"sync"
	"time"
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
type queue[T any] struct {
	write func([]T) error
	fail  func(error)
	max   int // values waiting for the log at most

	mu      sync.Mutex
	room    *sync.Cond // the queue has room again
	pending []T
	waiting bool          // the writer waits for a value
	wake    chan struct{} // the writer's wake-up, buffered 1
	closed  bool
	done    chan struct{}
}

const (
	// maxQueued bounds rows waiting for the log: past it, deciding waits
	// for the writer; maxEventsQueued, event lines.
	maxQueued       = 8192
	maxEventsQueued = 4096
	// gather is how long the writer lets a busy proxy's batch gather once
	// its first row came: the log's own batching holds rows longer than
	// this. A row that comes later than gather after the last batch is
	// written at once (a quiet proxy wakes no timer for it).
	gather = time.Millisecond
)

func newQueue[T any](write func([]T) error, fail func(error), max int) *queue[T] {
	q := &queue[T]{write: write, fail: fail, max: max, done: make(chan struct{}), wake: make(chan struct{}, 1)}
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
	var batch []T
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

// close writes every queued value, then stops.
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
