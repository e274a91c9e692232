package cuda

import (
	"fmt"
	"runtime"
	"sync"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// stream is a CUDA stream created by the device (non-blocking: it never
// synchronises with the legacy default stream).
type stream struct {
	d    *Device
	name string
	h    cu.Stream

	mu  sync.Mutex
	err error // first error of an enqueue that had no caller to return it to (Wait)
}

func (s *stream) Name() string { return s.name }

func (s *stream) note(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *stream) pending() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Record returns an event that completes when the work enqueued on s so far
// has. If recording fails (a broken context), the event is already done and
// carries the error.
func (s *stream) Record() device.Event {
	d := s.d
	if d.closed.Load() {
		return doneEvent{fmt.Errorf("%s: Record on stream %s of a closed device", d.name, s.name)}
	}
	h, err := d.getEvent()
	if err == nil {
		err = d.ctx.EventRecord(h, s.h)
		if err != nil {
			d.putEvent(h)
		}
	}
	if err != nil {
		return doneEvent{fmt.Errorf("%s: record on stream %s: %w", d.name, s.name, err)}
	}
	c := &eventCell{d: d, h: h}
	e := &event{c: c}
	// An event nobody observes to completion gives its handle back when it
	// is garbage. This recycles a CUevent, never memory (docs/design.md, decision 3).
	runtime.AddCleanup(e, func(c *eventCell) { c.release() }, c)
	return e
}

// Wait makes work enqueued on s after the call wait for e. An event of this
// device becomes cuStreamWaitEvent; any other event (a CPU stream's) is
// waited for here, on the caller's goroutine, since a CUDA stream cannot
// wait for Go code without a host callback.
func (s *stream) Wait(e device.Event) {
	switch ev := e.(type) {
	case *event:
		if ev.c.d == s.d {
			if err := ev.c.waitOn(s); err != nil {
				s.note(err)
			}
			return
		}
	case doneEvent:
		if ev.err != nil {
			s.note(ev.err)
		}
		return
	}
	if err := e.Synchronize(); err != nil {
		s.note(err)
	}
}

// Synchronize waits for s and returns the first error of its work (or of
// the context, for a kernel fault).
func (s *stream) Synchronize() error {
	if err := s.d.ctx.StreamSynchronize(s.h); err != nil {
		return fmt.Errorf("%s: stream %s: %w", s.d.name, s.name, err)
	}
	if err := s.pending(); err != nil {
		return err
	}
	if s == s.d.compute {
		s.d.mu.Lock()
		err := s.d.asyncErr
		s.d.mu.Unlock()
		return err
	}
	return nil
}

// event wraps an eventCell so that the cell can outlive it (see Record).
type event struct{ c *eventCell }

func (e *event) Done() bool         { return e.c.done() }
func (e *event) Synchronize() error { return e.c.synchronize() }

// eventCell owns one CUevent handle until the event is known complete;
// then the handle goes back to the device's pool for reuse. Reuse is safe
// for streams that waited on it: cuStreamWaitEvent captures the event as
// recorded at the time of the call.
type eventCell struct {
	d *Device

	mu       sync.Mutex
	h        cu.Event // 0 once given back
	finished bool
	err      error
	waiters  int // goroutines blocked in cuEventSynchronize on h
}

// release gives the handle back once nobody is blocked on it. Called with
// c.mu held, or by the cleanup (when no one can hold it).
func (c *eventCell) releaseLocked() {
	if c.h != 0 && c.waiters == 0 {
		c.d.putEvent(c.h)
		c.h = 0
	}
}

func (c *eventCell) release() {
	c.mu.Lock()
	c.releaseLocked()
	c.mu.Unlock()
}

func (c *eventCell) done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return true
	}
	if c.d.closed.Load() {
		c.finished, c.err = true, fmt.Errorf("%s: event of a closed device", c.d.name)
		return true
	}
	ok, err := c.d.ctx.EventQuery(c.h)
	if err != nil {
		c.finished, c.err = true, fmt.Errorf("%s: %w", c.d.name, err)
	} else if ok {
		c.finished = true
	}
	if c.finished {
		c.releaseLocked()
	}
	return c.finished
}

func (c *eventCell) synchronize() error {
	c.mu.Lock()
	if c.finished {
		defer c.mu.Unlock()
		return c.err
	}
	if c.d.closed.Load() {
		c.finished, c.err = true, fmt.Errorf("%s: event of a closed device", c.d.name)
		c.mu.Unlock()
		return c.err
	}
	h := c.h
	c.waiters++
	c.mu.Unlock()

	err := c.d.ctx.EventSynchronize(h)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters--
	if !c.finished {
		c.finished = true
		if err != nil {
			c.err = fmt.Errorf("%s: %w", c.d.name, err)
		}
	}
	c.releaseLocked()
	return c.err
}

// waitOn enqueues a wait for the event on s (nothing if it is known done).
func (c *eventCell) waitOn(s *stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return c.err
	}
	if err := c.d.ctx.StreamWaitEvent(s.h, c.h); err != nil {
		return fmt.Errorf("%s: stream %s waits for an event: %w", c.d.name, s.name, err)
	}
	return nil
}

// doneEvent is an event that completed before it was made (a failed
// Record).
type doneEvent struct{ err error }

func (doneEvent) Done() bool           { return true }
func (e doneEvent) Synchronize() error { return e.err }

// getEvent takes a recycled event handle, or creates one.
func (d *Device) getEvent() (cu.Event, error) {
	d.mu.Lock()
	if n := len(d.evFree); n > 0 {
		h := d.evFree[n-1]
		d.evFree = d.evFree[:n-1]
		d.mu.Unlock()
		return h, nil
	}
	d.mu.Unlock()
	h, err := d.ctx.EventCreate()
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	if d.evAll == nil { // closed meanwhile
		d.mu.Unlock()
		return 0, fmt.Errorf("%s: device closed", d.name)
	}
	d.evAll[h] = true
	d.mu.Unlock()
	return h, nil
}

// putEvent returns a handle to the pool; after Close (which destroyed every
// handle) it does nothing.
func (d *Device) putEvent(h cu.Event) {
	d.mu.Lock()
	if d.evAll != nil && d.evAll[h] {
		d.evFree = append(d.evFree, h)
	}
	d.mu.Unlock()
}
