// Package workq runs functions in order on a goroutine of its own: the
// engine under the CPU device's side streams and the offloader's disk I/O.
package workq

import (
	"errors"
	"sync"
)

// ErrClosed is returned by Push after Close.
var ErrClosed = errors.New("workq: closed")

// Queue runs pushed functions one at a time, in the order pushed, on its
// goroutine. The queue is unbounded: Push never blocks. It is safe for
// concurrent use.
type Queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	tasks  []func()
	closed bool
	done   chan struct{} // closed when the goroutine has exited
}

// New starts a queue.
func New() *Queue {
	q := &Queue{done: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	go q.loop()
	return q
}

// Push queues f, or returns ErrClosed after Close.
func (q *Queue) Push(f func()) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.tasks = append(q.tasks, f)
	q.mu.Unlock()
	q.cond.Signal()
	return nil
}

func (q *Queue) loop() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.tasks) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.tasks) == 0 {
			q.mu.Unlock()
			return
		}
		f := q.tasks[0]
		q.tasks[0] = nil
		q.tasks = q.tasks[1:]
		if len(q.tasks) == 0 {
			q.tasks = nil // let the backing array go
		}
		q.mu.Unlock()
		f()
	}
}

// Close runs what is queued, stops the goroutine and returns when it has
// stopped. Closing twice is allowed.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
	<-q.done
}
