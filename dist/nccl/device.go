package nccl

import (
	"fmt"

	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/dist"
)

// DeviceComm is a Comm on a CUDA device's memory and streams: a
// dist.DeviceComm, which dist.DeviceReducer (and train.Config.DeviceComm)
// reduce gradients through without a host round trip.
type DeviceComm struct {
	c   *Comm
	dev *cuda.Device
	// Settle, if set, is called after each collective is enqueued, with
	// its stream, and the stream is synchronized before: for a stand-in
	// of NCCL that does not order its work on the device's streams
	// (dist/nccl/standin on the fake driver, whose Wait it is). Real
	// NCCL leaves it nil: the stream orders everything.
	Settle func(s cu.Stream) error
}

var _ dist.DeviceComm = (*DeviceComm)(nil)

// OnDevice is c on dev: spans of dev's memory become device pointers and
// dev's streams CUDA streams.
func OnDevice(c *Comm, dev *cuda.Device) *DeviceComm { return &DeviceComm{c: c, dev: dev} }

// Rank is this rank's place in the clique.
func (d *DeviceComm) Rank() int { return d.c.Rank() }

// Size is the number of ranks.
func (d *DeviceComm) Size() int { return d.c.Size() }

// ptrs resolves spans to device pointers, each holding n float32s.
func (d *DeviceComm) ptrs(op string, n []int, spans ...device.Span) ([]cu.DevicePtr, error) {
	out := make([]cu.DevicePtr, len(spans))
	for i, sp := range spans {
		if sp.Len < 4*int64(n[i]) {
			return nil, fmt.Errorf("dist/nccl: %s: a span of %d bytes for %d float32s", op, sp.Len, n[i])
		}
		p, err := d.dev.DevicePointer(sp)
		if err != nil {
			return nil, fmt.Errorf("dist/nccl: %s: %w", op, err)
		}
		out[i] = p
	}
	return out, nil
}

// run enqueues call on s, with Settle's ordering around it if set.
func (d *DeviceComm) run(s device.Stream, call func(cu.Stream) error) error {
	h, err := cuda.StreamHandle(s)
	if err != nil {
		return err
	}
	if d.Settle != nil {
		if err := s.Synchronize(); err != nil {
			return err
		}
	}
	if err := call(h); err != nil {
		return err
	}
	if d.Settle != nil {
		return d.Settle(h)
	}
	return nil
}

// AllReduce sums buf's n float32s over the ranks, in place, on s.
func (d *DeviceComm) AllReduce(buf device.Span, n int, s device.Stream) error {
	p, err := d.ptrs("all_reduce", []int{n}, buf)
	if err != nil {
		return err
	}
	return d.run(s, func(h cu.Stream) error { return d.c.AllReduce(p[0], p[0], n, Float32, Sum, h) })
}

// ReduceScatter sums send's Size()·recvCount float32s over the ranks and
// leaves this rank's block in recv, on s.
func (d *DeviceComm) ReduceScatter(send, recv device.Span, recvCount int, s device.Stream) error {
	p, err := d.ptrs("reduce_scatter", []int{recvCount * d.Size(), recvCount}, send, recv)
	if err != nil {
		return err
	}
	return d.run(s, func(h cu.Stream) error { return d.c.ReduceScatter(p[0], p[1], recvCount, Float32, Sum, h) })
}

// AllGather gathers every rank's sendCount float32s into recv, on s.
func (d *DeviceComm) AllGather(send, recv device.Span, sendCount int, s device.Stream) error {
	p, err := d.ptrs("all_gather", []int{sendCount, sendCount * d.Size()}, send, recv)
	if err != nil {
		return err
	}
	return d.run(s, func(h cu.Stream) error { return d.c.AllGather(p[0], p[1], sendCount, Float32, h) })
}

// Broadcast copies root's n float32s of buf to every rank, on s.
func (d *DeviceComm) Broadcast(buf device.Span, n, root int, s device.Stream) error {
	p, err := d.ptrs("broadcast", []int{n}, buf)
	if err != nil {
		return err
	}
	return d.run(s, func(h cu.Stream) error { return d.c.Broadcast(p[0], p[0], n, Float32, root, h) })
}
