package dist

import (
	"fmt"

	"ferry/device"
)

// Pretend returns a communicator that says it is rank of size ranks but
// moves nothing: every collective checks its lengths and completes at
// once, leaving the buffers as they are. It is for planning one rank's
// memory on the meta device (ferry plan --ranks), where the code that
// trains runs and only the values are fictitious; training with it would
// let the ranks drift apart.
func Pretend(rank, size int) Comm { return PretendOn(rank, size, nil) }

// CollectiveClock times collectives that move nothing: the meta device
// (meta.Device.SimulateCollective) charges each to its interconnect and
// returns the event of its end.
type CollectiveClock interface {
	SimulateCollective(op string, bytes int64, ranks int) device.Event
}

// PretendOn is Pretend whose collectives take the time clock gives them
// (nil: none), so that a planned step pays for its communication.
func PretendOn(rank, size int, clock CollectiveClock) Comm {
	if size < 1 || rank < 0 || rank >= size {
		panic(fmt.Sprintf("dist.Pretend: rank %d of %d", rank, size))
	}
	return &pretend{rank: rank, size: size, clock: clock}
}

type pretend struct {
	rank, size int
	clock      CollectiveClock
}

// done is a collective of n float32s that checked as err: it ends at
// once on an error or without a clock, else when the clock says.
func (p *pretend) done(op string, n int, err error) device.Event {
	if err != nil || p.clock == nil {
		return Done(err)
	}
	return p.clock.SimulateCollective(op, 4*int64(n), p.size)
}

func (p *pretend) Rank() int                            { return p.rank }
func (p *pretend) Size() int                            { return p.size }
func (p *pretend) AllReduce(buf []float32) device.Event { return p.done("all_reduce", len(buf), nil) }
func (p *pretend) ReduceScatter(send, recv []float32) device.Event {
	return p.done("reduce_scatter", len(send), CheckLengths("reduce_scatter", p.size, len(send), len(recv)))
}
func (p *pretend) AllGather(send, recv []float32) device.Event {
	return p.done("all_gather", len(recv), CheckLengths("all_gather", p.size, len(send), len(recv)))
}
func (p *pretend) Broadcast(buf []float32, root int) device.Event {
	return p.done("broadcast", len(buf), CheckRoot(root, p.size))
}
func (p *pretend) Barrier() error { return nil }
func (p *pretend) Close() error   { return nil }
