package dist

import (
	"fmt"

	"ferry"
	"ferry/device"
)

// ZeRO-2 on device memory (ReducerOptions.Device): the scatterer's
// buckets, in the host path's layout, are device tensors; gradients are
// copied in on the compute stream, each full bucket is reduced (a
// reduce-scatter, or an all-reduce for an unbalanced one) on a side
// stream, and Wait scales and copies the owned parameters' means back on
// the compute stream.

// packDevice copies p's gradient g (zeros without one) into its place in
// b's send tensor, on the compute stream.
func (s *GradientScatterer) packDevice(i int, b *scatterBucket, g *ferry.Tensor) error {
	p, off := s.params[i], s.slots[i].off
	n := p.Numel()
	if n == 0 {
		return nil
	}
	return ferry.Catch(func() error {
		if g == nil {
			z := b.dsend.AsStrided([]int{n}, []int{1}, off)
			z.FillInPlace(0)
			z.Release()
			return nil
		}
		if g.Numel() != n || g.DType() != device.Float32 || !g.IsContiguous() || g.Device() != s.dev {
			return fmt.Errorf("dist: GradientScatterer: parameter %d (%q) has a gradient of shape %v %s on %s, want %v float32, contiguous, on %s",
				i, p.Name(), g.Shape(), g.DType(), g.Device().Name(), p.Shape(), s.dev.Name())
		}
		g.View() // resident
		return s.dev.Copy(s.dev.Compute(), devSpan(b.dsend, off, n), devSpan(g, 0, n))
	})
}

// startDevice enqueues b's reduction on the side stream, after the
// compute stream's copies.
func (s *GradientScatterer) startDevice(b *scatterBucket) {
	s.side.Wait(s.dev.Compute().Record())
	var err error
	if b.allReduce {
		err = s.dc.AllReduce(devSpan(b.dsend, 0, b.dsend.Numel()), b.dsend.Numel(), s.side)
	} else {
		err = s.dc.ReduceScatter(devSpan(b.dsend, 0, b.dsend.Numel()), devSpan(b.drecv, 0, b.block), b.block, s.side)
	}
	if err != nil && s.stepErr == nil {
		s.stepErr = err
	}
	b.ev = s.side.Record()
	s.stats.BytesSent += int64(b.dsend.Numel()) * 4
}

// unpackOwnedDevice divides each bucket's result by the ranks and copies
// the owned parameters' gradients out of it, on the compute stream.
func (s *GradientScatterer) unpackOwnedDevice() error {
	me := s.c.Rank()
	f := 1 / float32(s.c.Size())
	return ferry.Catch(func() error {
		for _, b := range s.buckets {
			res := b.drecv
			if b.allReduce {
				res = b.dsend
			}
			if f != 1 {
				res.ScaleInPlace(f)
			}
		}
		for i, p := range s.params {
			if s.owner[i] != me || p.Numel() == 0 {
				continue
			}
			sl := s.slots[i]
			b := s.buckets[sl.bucket]
			src := devSpan(b.dsend, sl.off, p.Numel())
			if !b.allReduce {
				src = devSpan(b.drecv, sl.off-me*b.block, p.Numel())
			}
			g := p.Grad()
			if g == nil {
				g = ferry.ZerosAs(p.Device(), device.Gradient, p.Shape()...)
				p.SetGrad(g)
			}
			g.View()
			if err := s.dev.Copy(s.dev.Compute(), devSpan(g, 0, p.Numel()), src); err != nil {
				return fmt.Errorf("dist: GradientScatterer: writing the gradient of parameter %d (%q): %w", i, p.Name(), err)
			}
			ferry.BumpVersion(g, "dist.scatter_gradients")
		}
		return nil
	})
}

// broadcastOnDevice copies root's values of params to every rank, each in
// place on side through dc, the compute stream waiting for each.
func broadcastOnDevice(dc DeviceComm, side device.Stream, params []*ferry.Tensor, root int) error {
	if err := CheckRoot(root, dc.Size()); err != nil {
		return err
	}
	return ferry.Catch(func() error {
		for _, p := range params {
			if p.Numel() == 0 {
				continue
			}
			dev := p.Device()
			p.View() // resident
			side.Wait(dev.Compute().Record())
			if err := dc.Broadcast(devSpan(p, 0, p.Numel()), p.Numel(), root, side); err != nil {
				return err
			}
			dev.Compute().Wait(side.Record())
			ferry.BumpVersion(p, "dist.broadcast_parameters")
		}
		if len(params) > 0 {
			return params[0].Device().Compute().Synchronize()
		}
		return nil
	})
}
