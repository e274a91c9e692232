package main

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// A command's stdout is a checkedWriter: writes are queued and written by
// a goroutine of their own, so that a reader that stops reading (a
// stalled pager: ferry train … | less) blocks no command and, with it, no
// signal. Before, a progress line blocked on a full pipe held the training
// goroutine inside a step, and one Ctrl-C never reached the step boundary.
//
// The queue holds at most queueLimit bytes; a writer beyond it waits for
// the reader, as a pipe would make it, until a signal asks the process to
// stop: from then on nothing waits for stdout. Flush waits for the queue
// to drain; after a signal, for flushGrace at most, and what the reader
// did not take is then dropped with an error. The first write error is
// kept, and every write after it fails, so that text written with
// fmt.Fprintf, its errors unread, still turns a failed write into exit 1
// (run flushes and checks after the command).
type checkedWriter struct {
	w io.Writer // the real stdout

	mu      sync.Mutex
	cond    *sync.Cond // broadcast on every change of the fields below
	queue   []byte     // written by the command, not yet by the goroutine
	writing bool       // the goroutine holds a chunk taken from queue
	closed  bool       // no more writes: the goroutine ends once idle
	err     error
	started bool
}

const (
	queueLimit = 16 << 20
	flushGrace = 2 * time.Second
)

// errStalled is Flush's error when a signal came and the reader still did
// not take the output within flushGrace.
var errStalled = errors.New("stdout is not being read")

// signalled is set by the first signal interruptions catches; the
// checkedWriters alive then are woken, so that none keeps a command or a
// Flush waiting for a reader.
var (
	signalled   atomic.Bool
	writersMu   sync.Mutex
	liveWriters = map[*checkedWriter]bool{}
)

// noteSignal records that a signal asked this process to stop.
func noteSignal() {
	signalled.Store(true)
	writersMu.Lock()
	defer writersMu.Unlock()
	for c := range liveWriters {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

func newCheckedWriter(w io.Writer) *checkedWriter {
	c := &checkedWriter{w: w}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && len(c.queue) > 0 && len(c.queue)+len(p) > queueLimit && !signalled.Load() {
		c.cond.Wait() // the reader is behind: wait, as a pipe would, until a signal
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.closed {
		return 0, io.ErrClosedPipe
	}
	c.queue = append(c.queue, p...)
	if !c.started {
		c.started = true
		writersMu.Lock()
		liveWriters[c] = true
		writersMu.Unlock()
		go c.drain()
	}
	c.cond.Broadcast()
	return len(p), nil
}

// drain writes the queue to w, chunk by chunk, until closed and empty or
// a write fails.
func (c *checkedWriter) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.queue) == 0 && !c.closed && c.err == nil {
			c.cond.Wait()
		}
		if c.err != nil || len(c.queue) == 0 {
			break // failed, or closed with nothing left
		}
		chunk := c.queue
		c.queue, c.writing = nil, true
		c.mu.Unlock()
		n, err := c.w.Write(chunk) // may block on the reader: nobody waits for it after a signal
		if err == nil && n < len(chunk) {
			err = io.ErrShortWrite
		}
		c.mu.Lock()
		c.writing = false
		if err != nil && c.err == nil {
			c.err = err
		}
		c.cond.Broadcast()
	}
	writersMu.Lock()
	delete(liveWriters, c)
	writersMu.Unlock()
}

// Flush waits until everything written has reached w, and returns the
// first write error. After a signal it waits flushGrace at most, then
// drops what is left and returns errStalled.
func (c *checkedWriter) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var timer *time.Timer
	expired := false
	for (len(c.queue) > 0 || c.writing) && c.err == nil {
		if signalled.Load() && timer == nil {
			timer = time.AfterFunc(flushGrace, func() {
				c.mu.Lock()
				expired = true
				c.cond.Broadcast()
				c.mu.Unlock()
			})
		}
		if expired {
			c.err = fmt.Errorf("%w: %d bytes of output dropped %v after the signal", errStalled, len(c.queue), flushGrace)
			c.queue = nil
			break
		}
		c.cond.Wait()
	}
	if timer != nil {
		timer.Stop()
	}
	return c.err
}

// Close flushes and ends the goroutine.
func (c *checkedWriter) Close() error {
	err := c.Flush()
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return err
}
