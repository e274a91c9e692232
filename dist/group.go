package dist

import (
	"fmt"
	"sync"

	"ferry/device"
)

// NewGroup returns n communicators that are the ranks of one group inside
// this process, for ranks run as goroutines: tests of code built on Comm
// (the GradientReducer) with several ranks and no MPI, and a model of what
// a backend must do. Collectives are matched by the order each rank issues
// them; each returns at once, and its event completes when every rank has
// issued it (the last rank to arrive computes the result for all, summing
// in rank order). Ranks whose n-th collectives differ get an error each,
// never a hang or a read past a buffer. A rank that closes its Comm (as a
// rank that fails does, before it returns) fails every collective its
// peers have issued or will issue that it has not joined, as a real
// backend's job abort does, so that one rank's error never leaves the
// others waiting forever.
func NewGroup(n int) []Comm {
	if n < 1 {
		panic(fmt.Sprintf("dist.NewGroup: %d ranks", n))
	}
	g := &group{n: n, slots: map[int64]*groupSlot{}, gone: -1}
	cs := make([]Comm, n)
	for r := range cs {
		cs[r] = &groupComm{g: g, rank: r}
	}
	return cs
}

type group struct {
	n     int
	mu    sync.Mutex
	slots map[int64]*groupSlot // by sequence number
	// gone is the first rank to close, with the number of collectives it
	// had issued: every later sequence number fails (-1: none closed).
	gone, goneAt int64
}

type groupOp struct {
	kind       string
	send, recv []float32
	root       int
}

type groupSlot struct {
	ops     []*groupOp
	arrived int
	done    chan struct{}
	err     error
}

type groupComm struct {
	g      *group
	rank   int
	seq    int64
	closed bool
}

func (c *groupComm) Rank() int { return c.rank }
func (c *groupComm) Size() int { return c.g.n }

func (c *groupComm) post(o *groupOp) device.Event {
	if c.closed {
		return Done(fmt.Errorf("%w: %s", ErrClosed, o.kind))
	}
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone >= 0 && c.seq >= g.goneAt {
		// A peer closed before joining this collective: it never will.
		c.seq++
		return Done(fmt.Errorf("dist: %s: rank %d closed its communicator after %d collectives; this was collective %d", o.kind, g.gone, g.goneAt, c.seq))
	}
	s := g.slots[c.seq]
	if s == nil {
		s = &groupSlot{ops: make([]*groupOp, g.n), done: make(chan struct{})}
		g.slots[c.seq] = s
	}
	s.ops[c.rank] = o
	s.arrived++
	if s.arrived == g.n {
		delete(g.slots, c.seq)
		s.err = s.run(g.n)
		close(s.done)
	}
	c.seq++
	return &groupEvent{s: s, rank: c.rank}
}

// run computes the collective for every rank, or says how the ranks'
// calls disagree.
func (s *groupSlot) run(n int) error {
	o0 := s.ops[0]
	for r, o := range s.ops {
		if o.kind != o0.kind || len(o.send) != len(o0.send) || len(o.recv) != len(o0.recv) || o.root != o0.root {
			return fmt.Errorf("dist: ranks disagree: rank 0 called %s(send %d, recv %d, root %d), rank %d called %s(send %d, recv %d, root %d)",
				o0.kind, len(o0.send), len(o0.recv), o0.root, r, o.kind, len(o.send), len(o.recv), o.root)
		}
	}
	switch o0.kind {
	case "all_reduce", "reduce_scatter":
		src := func(o *groupOp) []float32 {
			if o.kind == "all_reduce" {
				return o.recv
			}
			return o.send
		}
		sum := append([]float32(nil), src(s.ops[0])...)
		for _, o := range s.ops[1:] {
			for i, v := range src(o) {
				sum[i] += v
			}
		}
		for r, o := range s.ops {
			if o.kind == "all_reduce" {
				copy(o.recv, sum)
			} else {
				copy(o.recv, sum[r*len(o.recv):])
			}
		}
	case "all_gather":
		all := make([]float32, 0, n*len(o0.send))
		for _, o := range s.ops {
			all = append(all, o.send...)
		}
		for _, o := range s.ops {
			copy(o.recv, all)
		}
	case "broadcast":
		src := append([]float32(nil), s.ops[o0.root].recv...)
		for _, o := range s.ops {
			copy(o.recv, src)
		}
	case "barrier":
	}
	return nil
}

type groupEvent struct {
	s    *groupSlot
	rank int
}

func (e *groupEvent) Done() bool {
	select {
	case <-e.s.done:
		return true
	default:
		return false
	}
}

func (e *groupEvent) Synchronize() error {
	<-e.s.done
	if e.s.err != nil {
		return fmt.Errorf("rank %d: %w", e.rank, e.s.err)
	}
	return nil
}

func (c *groupComm) AllReduce(buf []float32) device.Event {
	return c.post(&groupOp{kind: "all_reduce", recv: buf})
}

func (c *groupComm) ReduceScatter(send, recv []float32) device.Event {
	if err := CheckLengths("reduce_scatter", c.g.n, len(send), len(recv)); err != nil {
		return Done(err)
	}
	return c.post(&groupOp{kind: "reduce_scatter", send: send, recv: recv})
}

func (c *groupComm) AllGather(send, recv []float32) device.Event {
	if err := CheckLengths("all_gather", c.g.n, len(send), len(recv)); err != nil {
		return Done(err)
	}
	return c.post(&groupOp{kind: "all_gather", send: send, recv: recv})
}

func (c *groupComm) Broadcast(buf []float32, root int) device.Event {
	if err := CheckRoot(root, c.g.n); err != nil {
		return Done(err)
	}
	return c.post(&groupOp{kind: "broadcast", recv: buf, root: root})
}

func (c *groupComm) Barrier() error { return c.post(&groupOp{kind: "barrier"}).Synchronize() }

func (c *groupComm) Close() error {
	if c.closed {
		return fmt.Errorf("%w: close called twice", ErrClosed)
	}
	c.closed = true
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone < 0 {
		g.gone, g.goneAt = int64(c.rank), c.seq
	}
	// Collectives the peers issued that this rank did not join fail now.
	for seq, s := range g.slots {
		if seq >= c.seq && s.err == nil {
			s.err = fmt.Errorf("dist: %s: rank %d closed its communicator after %d collectives; this was collective %d", s.first().kind, c.rank, c.seq, seq+1)
			close(s.done)
			delete(g.slots, seq)
		}
	}
	return nil
}

// first is the operation of the lowest rank that has issued the slot's
// collective.
func (s *groupSlot) first() *groupOp {
	for _, o := range s.ops {
		if o != nil {
			return o
		}
	}
	return &groupOp{kind: "collective"}
}
