package cpu

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"ferry/device"
)

// inlineStream is the compute stream: work runs on the caller's goroutine
// as it is issued, so every event recorded on it has already completed.
type inlineStream struct{}

func (*inlineStream) Name() string         { return "compute" }
func (*inlineStream) Record() device.Event { return doneEvent{} }
func (*inlineStream) Wait(e device.Event)  { _ = e.Synchronize() }
func (*inlineStream) Synchronize() error   { return nil }
func (doneEvent) Done() bool               { return true }
func (doneEvent) Synchronize() error       { return nil }
func float32NaN() float32                  { return float32(math.NaN()) }

type doneEvent struct{}

// workerStream runs its work, in order, on a goroutine of its own. The
// queue is unbounded: enqueueing never blocks the caller.
type workerStream struct {
	name  string
	delay time.Duration // added to each copy (tests)

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []task
	err     error // first error any task returned; sticky, like a CUDA stream's
	stopped bool
	done    chan struct{} // closed when the goroutine has exited
}

type task struct {
	run    func() error
	isCopy bool
	event  *event // non-nil for a marker recorded by Record
}

func newWorkerStream(name string, delay time.Duration) *workerStream {
	s := &workerStream{name: name, delay: delay, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s
}

func (s *workerStream) Name() string { return s.name }

func (s *workerStream) enqueue(run func() error, isCopy bool) error {
	return s.push(task{run: run, isCopy: isCopy})
}

// errClosed is returned for work enqueued after the device was closed.
var errClosed = errors.New("cpu: the device was closed")

func (s *workerStream) push(t task) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return fmt.Errorf("stream %s: %w", s.name, errClosed)
	}
	s.queue = append(s.queue, t)
	s.mu.Unlock()
	s.cond.Signal()
	return nil
}

func (s *workerStream) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.stopped {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		t := s.queue[0]
		s.queue[0] = task{}
		s.queue = s.queue[1:]
		if len(s.queue) == 0 {
			s.queue = s.queue[:0:0] // let the backing array go; it is reallocated small
		}
		err := s.err
		s.mu.Unlock()

		switch {
		case t.event != nil:
			t.event.complete(err)
		case err != nil:
			// A failed stream skips later work, as a CUDA stream does.
		default:
			if t.isCopy && s.delay > 0 {
				time.Sleep(s.delay)
			}
			if e := t.run(); e != nil {
				s.mu.Lock()
				if s.err == nil {
					s.err = e
				}
				s.mu.Unlock()
			}
		}
	}
}

func (s *workerStream) Record() device.Event {
	e := &event{ch: make(chan struct{})}
	if err := s.push(task{event: e}); err != nil {
		e.complete(err) // nothing will run after it: it has passed, with the reason
	}
	return e
}

func (s *workerStream) Wait(e device.Event) {
	if e.Done() {
		return
	}
	_ = s.enqueue(func() error { _ = e.Synchronize(); return nil }, false) // after Close nothing runs to order
}

func (s *workerStream) Synchronize() error { return s.Record().Synchronize() }

// stop drains the queue and ends the goroutine.
func (s *workerStream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cond.Broadcast()
	<-s.done
}

// event completes when its stream's goroutine reaches it.
type event struct {
	ch  chan struct{}
	err error // written before ch is closed
}

func (e *event) complete(err error) {
	e.err = err
	close(e.ch)
}

func (e *event) Done() bool {
	select {
	case <-e.ch:
		return true
	default:
		return false
	}
}

func (e *event) Synchronize() error {
	<-e.ch
	return e.err
}
