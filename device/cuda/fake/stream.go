package fake

import (
	"fmt"
	"sync"

	"ferry/device/cuda/cu"
)

// fstream runs its work in order on a goroutine of its own.
type fstream struct {
	c  *Context
	id cu.Stream

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []func() *cu.Error
	stopped bool
	done    chan struct{}
}

func newStream(c *Context, id cu.Stream) *fstream {
	s := &fstream{c: c, id: id, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s
}

func (s *fstream) enqueue(op func() *cu.Error) {
	s.mu.Lock()
	s.queue = append(s.queue, op)
	s.mu.Unlock()
	s.cond.Signal()
}

func (s *fstream) loop() {
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
		op := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		// After a fault the GPU runs nothing more in this context, but
		// markers (events, synchronisation) still complete.
		if err := op(); err != nil {
			s.c.fault(err)
		}
	}
}

// stop finishes the queued work and ends the goroutine.
func (s *fstream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cond.Broadcast()
	<-s.done
}

// sync waits until the work queued so far has run.
func (s *fstream) sync() {
	ch := make(chan struct{})
	s.enqueue(func() *cu.Error { close(ch); return nil })
	<-ch
}

func (c *Context) stream(call string, h cu.Stream) (*fstream, error) {
	if h == 0 {
		return nil, errorOf(call, cu.ErrInvalidHandle, "the fake driver refuses the legacy default stream: ferry uses streams it created")
	}
	c.mu.Lock()
	s := c.streams[h]
	c.mu.Unlock()
	if s == nil {
		return nil, errorOf(call, cu.ErrInvalidHandle, fmt.Sprintf("stream %#x does not exist", uintptr(h)))
	}
	return s, nil
}

func (c *Context) StreamCreate() (cu.Stream, error) {
	if err := c.enter("cuStreamCreate"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := cu.Stream(c.newID())
	c.streams[h] = newStream(c, h)
	return h, nil
}

func (c *Context) StreamDestroy(h cu.Stream) error {
	const call = "cuStreamDestroy_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	s, err := c.stream(call, h)
	if err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.streams, h)
	c.mu.Unlock()
	s.stop()
	return nil
}

func (c *Context) StreamSynchronize(h cu.Stream) error {
	const call = "cuStreamSynchronize"
	if err := c.enter(call); err != nil {
		return err
	}
	s, err := c.stream(call, h)
	if err != nil {
		return err
	}
	s.sync()
	return c.enter(call)
}

// Synchronize waits for every stream of the context.
func (c *Context) Synchronize() error {
	const call = "cuCtxSynchronize"
	if err := c.enter(call); err != nil {
		return err
	}
	c.mu.Lock()
	var all []*fstream
	for _, s := range c.streams {
		all = append(all, s)
	}
	c.mu.Unlock()
	for _, s := range all {
		s.sync()
	}
	return c.enter(call)
}

// fevent is an event: recorded counts records, completed is the latest
// record that its stream has reached.
type fevent struct {
	mu        sync.Mutex
	cond      *sync.Cond
	recorded  uint64
	completed uint64
}

func (c *Context) event(call string, h cu.Event) (*fevent, error) {
	c.mu.Lock()
	e := c.events[h]
	c.mu.Unlock()
	if e == nil {
		return nil, errorOf(call, cu.ErrInvalidHandle, fmt.Sprintf("event %#x does not exist", uintptr(h)))
	}
	return e, nil
}

func (c *Context) EventCreate() (cu.Event, error) {
	if err := c.enter("cuEventCreate"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := cu.Event(c.newID())
	e := &fevent{}
	e.cond = sync.NewCond(&e.mu)
	c.events[h] = e
	return h, nil
}

func (c *Context) EventDestroy(h cu.Event) error {
	const call = "cuEventDestroy_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	if _, err := c.event(call, h); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.events, h)
	c.mu.Unlock()
	return nil
}

func (c *Context) EventRecord(h cu.Event, s cu.Stream) error {
	const call = "cuEventRecord"
	if err := c.enter(call); err != nil {
		return err
	}
	e, err := c.event(call, h)
	if err != nil {
		return err
	}
	st, err := c.stream(call, s)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.recorded++
	target := e.recorded
	e.mu.Unlock()
	st.enqueue(func() *cu.Error {
		e.mu.Lock()
		if target > e.completed {
			e.completed = target
		}
		e.mu.Unlock()
		e.cond.Broadcast()
		return nil
	})
	return nil
}

func (c *Context) EventQuery(h cu.Event) (bool, error) {
	const call = "cuEventQuery"
	if err := c.enter(call); err != nil {
		return false, err
	}
	e, err := c.event(call, h)
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.completed >= e.recorded, nil
}

// wait blocks until the record target has completed.
func (e *fevent) wait(target uint64) {
	e.mu.Lock()
	for e.completed < target {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

func (c *Context) EventSynchronize(h cu.Event) error {
	const call = "cuEventSynchronize"
	if err := c.enter(call); err != nil {
		return err
	}
	e, err := c.event(call, h)
	if err != nil {
		return err
	}
	e.mu.Lock()
	target := e.recorded
	e.mu.Unlock()
	e.wait(target)
	return c.enter(call)
}

// StreamWaitEvent makes s wait for the event's record as of now.
func (c *Context) StreamWaitEvent(s cu.Stream, h cu.Event) error {
	const call = "cuStreamWaitEvent"
	if err := c.enter(call); err != nil {
		return err
	}
	e, err := c.event(call, h)
	if err != nil {
		return err
	}
	st, err := c.stream(call, s)
	if err != nil {
		return err
	}
	e.mu.Lock()
	target := e.recorded
	e.mu.Unlock()
	st.enqueue(func() *cu.Error { e.wait(target); return nil })
	return nil
}
