package cpu

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"ferry/device"
	"ferry/internal/workq"
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

// workerStream runs its work, in order, on a goroutine of its own (a
// workq.Queue); enqueueing never blocks the caller. Like a CUDA stream, it
// remembers the first error its work returned and skips everything after.
type workerStream struct {
	name  string
	delay time.Duration // added to each copy (tests)
	q     *workq.Queue

	mu  sync.Mutex
	err error // first error any task returned; sticky
}

func newWorkerStream(name string, delay time.Duration) *workerStream {
	return &workerStream{name: name, delay: delay, q: workq.New()}
}

func (s *workerStream) Name() string { return s.name }

// errClosed is returned for work enqueued after the device was closed.
var errClosed = errors.New("cpu: the device was closed")

func (s *workerStream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *workerStream) enqueue(run func() error, isCopy bool) error {
	err := s.q.Push(func() {
		if s.failed() != nil {
			return
		}
		if isCopy && s.delay > 0 {
			time.Sleep(s.delay)
		}
		if e := run(); e != nil {
			s.mu.Lock()
			if s.err == nil {
				s.err = e
			}
			s.mu.Unlock()
		}
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.name, errClosed)
	}
	return nil
}

func (s *workerStream) Record() device.Event {
	e := &event{ch: make(chan struct{})}
	if err := s.q.Push(func() { e.complete(s.failed()) }); err != nil {
		e.complete(fmt.Errorf("stream %s: %w", s.name, errClosed)) // nothing will run after it: it has passed, with the reason
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
func (s *workerStream) stop() { s.q.Close() }

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
