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
func Pretend(rank, size int) Comm {
	if size < 1 || rank < 0 || rank >= size {
		panic(fmt.Sprintf("dist.Pretend: rank %d of %d", rank, size))
	}
	return &pretend{rank: rank, size: size}
}

type pretend struct{ rank, size int }

func (p *pretend) Rank() int                            { return p.rank }
func (p *pretend) Size() int                            { return p.size }
func (p *pretend) AllReduce(buf []float32) device.Event { return Done(nil) }
func (p *pretend) ReduceScatter(send, recv []float32) device.Event {
	return Done(CheckLengths("reduce_scatter", p.size, len(send), len(recv)))
}
func (p *pretend) AllGather(send, recv []float32) device.Event {
	return Done(CheckLengths("all_gather", p.size, len(send), len(recv)))
}
func (p *pretend) Broadcast(buf []float32, root int) device.Event {
	return Done(CheckRoot(root, p.size))
}
func (p *pretend) Barrier() error { return nil }
func (p *pretend) Close() error   { return nil }
