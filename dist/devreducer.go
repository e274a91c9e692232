package dist

import (
	"fmt"
	"time"

	"ferry"
	"ferry/device"
)

// DeviceComm is a communicator whose collectives read and write device
// memory and are enqueued on a stream of the device, as NCCL's are
// (ferry/dist/nccl.OnDevice): a call returns once the collective is
// enqueued; work enqueued on the stream after it sees its result. Spans
// are of the device's own memory; counts are float32 elements, and a
// span must hold them. Every rank must make the same calls in the same
// order.
type DeviceComm interface {
	Rank() int
	Size() int
	// AllReduce sums buf's n elements over the ranks, in place.
	AllReduce(buf device.Span, n int, stream device.Stream) error
	// ReduceScatter sums send (Size()·recvCount elements) over the ranks
	// and leaves block Rank() of the sum in recv.
	ReduceScatter(send, recv device.Span, recvCount int, stream device.Stream) error
	// AllGather concatenates every rank's sendCount elements of send into
	// recv, in rank order.
	AllGather(send, recv device.Span, sendCount int, stream device.Stream) error
	// Broadcast copies root's n elements of buf into every rank's buf.
	Broadcast(buf device.Span, n, root int, stream device.Stream) error
}

// DeviceReducer is GradientReducer on device memory (PyTorch DDP on
// NCCL): gradients are packed, as backward completes them, into buckets
// that live on the device (copies on the compute stream), each bucket is
// all-reduced through a DeviceComm on a side stream of its own as soon as
// it is full, so the reduction overlaps the rest of backward, and Wait
// makes the compute stream wait for them, scales each bucket by 1/Size
// and copies the mean gradients back. Nothing passes through host
// memory. Buckets, their order and their use are GradientReducer's; a
// bucket's sum is the DeviceComm's (NCCL's ring or tree: for 2 ranks, and
// for a stand-in summing in rank order, a+b as the host reducer's).
//
// It is used from the goroutine that runs backward.
type DeviceReducer struct {
	dc      DeviceComm
	dev     device.Device
	side    device.Stream // the collectives' stream
	params  []*ferry.Tensor
	index   map[*ferry.Tensor]int
	slots   []slot
	buckets []*devBucket
	next    int
	stepErr error
	stats   ReducerStats
}

type devBucket struct {
	params  []int
	buf     *ferry.Tensor // n float32s on the device
	n       int
	pending int
	ev      device.Event // the collective's completion on side
}

// NewDeviceReducer prepares device buckets for params (float32 tensors on
// dev that require grad; repeats are reduced once) over dc.
func NewDeviceReducer(dc DeviceComm, dev device.Device, params []*ferry.Tensor, opts ReducerOptions) (*DeviceReducer, error) {
	capBytes := opts.BucketBytes
	if capBytes == 0 {
		capBytes = DefaultBucketBytes
	}
	if capBytes < 0 {
		return nil, fmt.Errorf("dist: NewDeviceReducer: BucketBytes %d is negative", capBytes)
	}
	r := &DeviceReducer{dc: dc, dev: dev, index: map[*ferry.Tensor]int{}}
	for _, p := range params {
		if _, dup := r.index[p]; dup {
			continue
		}
		switch {
		case p.DType() != device.Float32:
			return nil, fmt.Errorf("dist: NewDeviceReducer: parameter %d (%q) is %s; gradients are reduced as float32", len(r.params), p.Name(), p.DType())
		case !p.RequiresGrad():
			return nil, fmt.Errorf("dist: NewDeviceReducer: parameter %d (%q) does not require grad", len(r.params), p.Name())
		case p.Device() != dev:
			return nil, fmt.Errorf("dist: NewDeviceReducer: parameter %d (%q) is on %s, the reducer on %s", len(r.params), p.Name(), p.Device().Name(), dev.Name())
		}
		r.index[p] = len(r.params)
		r.params = append(r.params, p)
	}
	var members [][]int
	r.slots, members = bucketLayout(r.params, capBytes)
	for _, m := range members {
		b := &devBucket{params: m}
		for _, i := range m {
			b.n += r.params[i].Numel()
		}
		r.buckets = append(r.buckets, b)
	}
	side, err := dev.NewStream("collectives")
	if err != nil {
		return nil, fmt.Errorf("dist: NewDeviceReducer: %w", err)
	}
	r.side = side
	err = ferry.Catch(func() error {
		for _, b := range r.buckets {
			b.buf = ferry.ZerosAs(dev, device.Gradient, max(b.n, 1))
			b.pending = len(b.params)
		}
		return nil
	})
	if err != nil {
		r.Close()
		return nil, err
	}
	r.stats.Buckets = len(r.buckets)
	return r, nil
}

// Stats returns the reducer's counters.
func (r *DeviceReducer) Stats() ReducerStats { return r.stats }

// GradReady is the ferry.BackwardOptions.GradReady hook: it copies p's
// gradient into its bucket on the compute stream and starts, in order,
// the collectives of the buckets that are full.
func (r *DeviceReducer) GradReady(p *ferry.Tensor) {
	i, ok := r.index[p]
	if !ok {
		return
	}
	if err := r.pack(i); err != nil {
		r.noteErr(err)
		return
	}
	r.startReady(false)
}

func (r *DeviceReducer) noteErr(err error) {
	if r.stepErr == nil {
		r.stepErr = err
	}
}

func (r *DeviceReducer) pack(i int) error {
	s := &r.slots[i]
	p := r.params[i]
	if s.packed {
		return fmt.Errorf("dist: DeviceReducer: the gradient of parameter %d (%q) was reported twice in one step: call Wait after each backward", i, p.Name())
	}
	b := r.buckets[s.bucket]
	s.packed = true
	b.pending--
	return ferry.Catch(func() error {
		g := p.Grad()
		if g == nil || p.Numel() == 0 {
			if p.Numel() > 0 {
				z := b.buf.AsStrided([]int{p.Numel()}, []int{1}, s.off)
				z.FillInPlace(0) // an unused parameter contributes zeros
				z.Release()
			}
			return nil
		}
		if g.Numel() != p.Numel() || g.DType() != device.Float32 || !g.IsContiguous() || g.Device() != r.dev {
			return fmt.Errorf("dist: DeviceReducer: parameter %d (%q) has a gradient of shape %v %s on %s, want %v float32, contiguous, on %s",
				i, p.Name(), g.Shape(), g.DType(), g.Device().Name(), p.Shape(), r.dev.Name())
		}
		g.View() // brings a paged gradient in; the copy reads its block
		return r.dev.Copy(r.dev.Compute(), devSpan(b.buf, s.off, p.Numel()), devSpan(g, 0, p.Numel()))
	})
}

// startReady starts, in bucket order, every bucket whose gradients are
// all packed: the side stream waits for the compute stream's copies, and
// the all-reduce is enqueued on it.
func (r *DeviceReducer) startReady(atWait bool) {
	for r.next < len(r.buckets) && r.buckets[r.next].pending == 0 {
		b := r.buckets[r.next]
		r.side.Wait(r.dev.Compute().Record())
		if err := r.dc.AllReduce(devSpan(b.buf, 0, b.n), b.n, r.side); err != nil {
			r.noteErr(err)
		}
		b.ev = r.side.Record()
		r.stats.BytesReduced += int64(b.n) * 4
		if atWait {
			r.stats.StartedAtWait++
		} else {
			r.stats.StartedInReverse++
		}
		r.next++
	}
}

// Wait finishes the step as GradientReducer.Wait does: it packs what
// backward did not report, starts the remaining buckets, makes the
// compute stream wait for every collective, divides each bucket by the
// ranks and copies the mean gradients into each parameter's Grad (a zero
// gradient made first where a parameter had none). Every rank calls it
// once per step; it returns the step's first error.
func (r *DeviceReducer) Wait() error {
	err := r.stepErr
	for i := range r.slots {
		if !r.slots[i].packed {
			if e := r.pack(i); e != nil && err == nil {
				err = e
			}
		}
	}
	r.startReady(true)
	t0 := time.Now()
	comp := r.dev.Compute()
	for _, b := range r.buckets {
		if b.ev != nil {
			comp.Wait(b.ev)
		}
	}
	if err == nil {
		err = ferry.Catch(func() error {
			f := 1 / float32(r.dc.Size())
			for _, b := range r.buckets {
				if f != 1 {
					b.buf.ScaleInPlace(f)
				}
			}
			for i, p := range r.params {
				if p.Numel() == 0 {
					continue
				}
				s := r.slots[i]
				g := p.Grad()
				if g == nil {
					g = ferry.ZerosAs(p.Device(), device.Gradient, p.Shape()...)
					p.SetGrad(g)
				}
				g.View()
				if err := r.dev.Copy(comp, devSpan(g, 0, p.Numel()), devSpan(r.buckets[s.bucket].buf, s.off, p.Numel())); err != nil {
					return fmt.Errorf("dist: DeviceReducer: writing the gradient of parameter %d (%q): %w", i, p.Name(), err)
				}
				ferry.BumpVersion(g, "dist.reduce_gradients")
			}
			return nil
		})
	}
	r.stats.WaitTime += time.Since(t0)
	for i := range r.slots {
		r.slots[i].packed = false
	}
	for _, b := range r.buckets {
		b.pending, b.ev = len(b.params), nil
	}
	r.next, r.stepErr = 0, nil
	r.stats.Steps++
	return err
}

// Broadcast copies root's parameter values to every rank, bucket by
// bucket on the device. Call it on every rank, outside a step.
func (r *DeviceReducer) Broadcast(root int) error {
	if err := CheckRoot(root, r.dc.Size()); err != nil {
		return err
	}
	return ferry.Catch(func() error {
		comp := r.dev.Compute()
		for _, b := range r.buckets {
			for _, i := range b.params {
				p, s := r.params[i], r.slots[i]
				if p.Numel() == 0 {
					continue
				}
				p.View()
				if err := r.dev.Copy(comp, devSpan(b.buf, s.off, p.Numel()), devSpan(p, 0, p.Numel())); err != nil {
					return err
				}
			}
			r.side.Wait(comp.Record())
			if err := r.dc.Broadcast(devSpan(b.buf, 0, b.n), b.n, root, r.side); err != nil {
				return err
			}
			comp.Wait(r.side.Record())
			for _, i := range b.params {
				p, s := r.params[i], r.slots[i]
				if p.Numel() == 0 {
					continue
				}
				if err := r.dev.Copy(comp, devSpan(p, 0, p.Numel()), devSpan(b.buf, s.off, p.Numel())); err != nil {
					return err
				}
				ferry.BumpVersion(p, "dist.broadcast_parameters")
			}
		}
		return comp.Synchronize()
	})
}

// CheckParameters is GradientReducer.CheckParameters through the
// DeviceComm: each parameter's FNV-1a hash, all-gathered on the device.
// Every rank gets the same answer. Call it on every rank, outside a step.
func (r *DeviceReducer) CheckParameters() error {
	mine, err := paramHashes(r.params)
	if err != nil || len(mine) == 0 {
		return err
	}
	var all []float32
	err = ferry.Catch(func() error {
		send := ferry.FromFloat32s(r.dev, mine, len(mine))
		defer send.Release()
		recv := ferry.ZerosAs(r.dev, device.Gradient, len(mine)*r.dc.Size())
		defer recv.Release()
		r.side.Wait(r.dev.Compute().Record())
		if err := r.dc.AllGather(devSpan(send, 0, len(mine)), devSpan(recv, 0, recv.Numel()), len(mine), r.side); err != nil {
			return err
		}
		r.dev.Compute().Wait(r.side.Record())
		all = recv.Float32s()
		return nil
	})
	if err != nil {
		return err
	}
	return compareHashes(r.params, all, r.dc.Size())
}

// Close waits for the collectives in flight and frees the buckets.
func (r *DeviceReducer) Close() error {
	var err error
	if r.side != nil {
		err = r.side.Synchronize()
	}
	for _, b := range r.buckets {
		if b.buf != nil {
			b.buf.Release()
			b.buf = nil
		}
	}
	return err
}
