package dist

import (
	"fmt"
	"sync"
	"sync/atomic"

	"ferry/device"
)

// Local returns a communicator of one rank: all-reduce and broadcast leave
// the buffer as it is, reduce-scatter and all-gather copy send to recv.
// Every event it returns is already complete. With it, code written for
// many ranks runs unchanged in one process.
func Local() Comm { return &local{} }

type local struct{ closed atomic.Bool }

func (l *local) Rank() int { return 0 }
func (l *local) Size() int { return 1 }

func (l *local) check(op string) error {
	if l.closed.Load() {
		return fmt.Errorf("%w: %s", ErrClosed, op)
	}
	return nil
}

func (l *local) AllReduce(buf []float32) device.Event { return Done(l.check("all_reduce")) }

func (l *local) ReduceScatter(send, recv []float32) device.Event {
	if err := l.check("reduce_scatter"); err != nil {
		return Done(err)
	}
	if err := CheckLengths("reduce_scatter", 1, len(send), len(recv)); err != nil {
		return Done(err)
	}
	copy(recv, send)
	return Done(nil)
}

func (l *local) AllGather(send, recv []float32) device.Event {
	if err := l.check("all_gather"); err != nil {
		return Done(err)
	}
	if err := CheckLengths("all_gather", 1, len(send), len(recv)); err != nil {
		return Done(err)
	}
	copy(recv, send)
	return Done(nil)
}

func (l *local) Broadcast(buf []float32, root int) device.Event {
	if err := l.check("broadcast"); err != nil {
		return Done(err)
	}
	return Done(CheckRoot(root, 1))
}

func (l *local) Barrier() error { return l.check("barrier") }

func (l *local) Close() error {
	if l.closed.Swap(true) {
		return fmt.Errorf("%w: close called twice", ErrClosed)
	}
	return nil
}

// onceErr runs a function once and remembers its error.
type onceErr struct {
	once sync.Once
	err  error
}

func (o *onceErr) do(f func() error) error {
	o.once.Do(func() { o.err = f() })
	return o.err
}
