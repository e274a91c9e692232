package dist

import (
	"fmt"
	"math"
	"time"

	"ferry"
	"ferry/device"
)

// ZeRO-3 on device memory (FullShardOptions.Device, NCCL): the same
// collectives in the same order as the host path, on the parameters'
// device, on one side stream. Every collective's input is copied into a
// buffer of the collective's padded size on that stream (a shard into
// per elements, a whole gradient into ranks × per), so that the side
// stream's order makes the buffers' reuse safe and no buffer outlives its
// collective (each is freed right after, its block recorded on the side
// stream). The padding is never read: a gathered parameter's elements
// past n, and a reduced gradient's past a rank's share, are left out.

// devSpan is n float32s of t's storage from element off.
func devSpan(t *ferry.Tensor, off, n int) device.Span {
	b, o := t.Block()
	return device.Span{Block: b, Off: int64(o+off) * 4, Len: int64(n) * 4}
}

// transient is a float32 device tensor of n elements for one collective,
// made before the side stream waits for the compute stream; done frees it
// once the side stream's work on it is enqueued.
func (f *FullShard) transient(n int, cat device.Category) *ferry.Tensor {
	return ferry.ZerosAs(f.dev, cat, n)
}

func (f *FullShard) done(t *ferry.Tensor) {
	if b, _ := t.Block(); b != nil {
		f.dev.Allocator().RecordStream(b, f.side)
	}
	t.Release()
}

// startGatherDevice allocates c's whole block (ranks × per elements, at
// least the copy's bytes) and enqueues, on the side stream after the
// compute stream's work so far, the copy of this rank's shard into a
// padded send buffer and the all-gather into the block. A bfloat16 copy's
// shard is rounded into the send buffer on the compute stream first, and
// gathered as float32 words, two elements to a word.
func (f *FullShard) startGatherDevice(c *fsCopy, prefetched bool) error {
	fp := c.fp
	size, w := f.c.Size(), c.words()
	return ferry.Catch(func() error {
		b, err := f.dev.Allocator().Alloc(4*int64(size*w), device.Parameter)
		if err != nil {
			return fmt.Errorf("dist: FullShard: gathering parameter %d (%q): %w", fp.i, fp.p.Name(), err)
		}
		send := f.transient(w, device.Parameter)
		defer f.done(send)
		k := fp.hi - fp.lo
		shard := fp.shard
		if fp.master != nil && k > 0 {
			// The shard's values are in host memory: up first, on the
			// side stream, into a device buffer the compute stream then
			// reads (for a bfloat16 copy) or the gather sends.
			if err := f.syncMaster(fp); err != nil {
				f.dev.Allocator().Free(b)
				return err
			}
			up := f.transient(k, device.Parameter)
			defer f.done(up)
			f.side.Wait(f.dev.Compute().Record())
			if err := f.dev.Copy(f.side, devSpan(up, 0, k), devSpan(fp.master, 0, k)); err != nil {
				f.dev.Allocator().Free(b)
				return err
			}
			f.dev.Compute().Wait(f.side.Record())
			shard = up
		}
		if c.bf16() && k > 0 {
			sb, _ := send.Block()
			dst := device.View{Block: sb, Shape: []int{k}, Strides: []int{1}, DType: device.BFloat16}
			if err := f.dev.Kernels().(device.ConvertKernels).Convert(dst, shard.View()); err != nil {
				f.dev.Allocator().Free(b)
				return err
			}
		}
		f.side.Wait(f.dev.Compute().Record())
		if !c.bf16() && k > 0 {
			if err := f.dev.Copy(f.side, devSpan(send, 0, k), devSpan(shard, 0, k)); err != nil {
				f.dev.Allocator().Free(b)
				return err
			}
		}
		whole := device.Span{Block: b, Len: 4 * int64(size*w)}
		if err := f.dc.AllGather(devSpan(send, 0, w), whole, w, f.side); err != nil {
			f.dev.Allocator().Free(b)
			return err
		}
		f.dev.Allocator().RecordStream(b, f.side)
		c.block, c.gather = b, f.side.Record()
		f.stats.Gathers++
		f.stats.BytesGathered += 4 * int64(size*w)
		if prefetched {
			f.stats.Prefetched++
		}
		return nil
	})
}

// installDevice makes the compute stream wait for c's gather and
// installs its block as c's storage.
func (f *FullShard) installDevice(c *fsCopy) error {
	start := time.Now()
	f.dev.Compute().Wait(c.gather)
	f.stats.StallTime += time.Since(start)
	c.t.InstallBlock(c.block)
	c.block, c.gather = nil, nil
	c.resident, c.used = true, false
	c.version = c.t.Version()
	return f.noteUse(c)
}

// packDevice marks fp's gradient complete and takes it from the
// parameter (nil: none, zeros are reduced); its reduce-scatter starts in
// its turn (startReady).
func (f *FullShard) packDevice(fp *fsParam) error {
	fp.ready = true
	g := fp.p.Grad()
	if g == nil {
		return nil
	}
	defer fp.p.SetGrad(nil)
	if g.Numel() != fp.n || g.DType() != device.Float32 || !g.IsContiguous() || g.Device() != f.dev {
		return fmt.Errorf("dist: FullShard: parameter %d (%q) has a gradient of shape %v %s on %s, want %v float32, contiguous, on %s",
			fp.i, fp.p.Name(), g.Shape(), g.DType(), g.Device().Name(), fp.p.Shape(), f.dev.Name())
	}
	fp.dgrad = g.Detach()
	return nil
}

// reduceScatterDevice enqueues fp's reduce-scatter on the side stream:
// the whole gradient copied into a padded send buffer, reduce-scattered
// into a buffer of per elements, this rank's share copied into its
// shard's gradient (made here, zero, if it has none). The gradient and
// the buffers are freed once enqueued. Errors are kept for Wait.
func (f *FullShard) reduceScatterDevice(fp *fsParam) {
	size := f.c.Size()
	err := ferry.Catch(func() error {
		send := f.transient(size*fp.per, device.Gradient) // zeros: a parameter without a gradient reduces them
		defer f.done(send)
		recv := f.transient(fp.per, device.Gradient)
		defer f.done(recv)
		k := fp.hi - fp.lo
		var sg *ferry.Tensor
		if fp.shard != nil {
			if sg = fp.shard.Grad(); sg == nil {
				// In host memory where the optimizer steps there (the
				// shards beside the device, or in host memory): copied
				// down on the side stream (landing: fp.rs).
				on := f.dev
				if f.beside != nil || f.onHost {
					on = f.dev.Host()
				}
				sg = ferry.ZerosAs(on, device.Gradient, k)
				fp.shard.SetGrad(sg)
			}
		}
		f.side.Wait(f.dev.Compute().Record())
		if g := fp.dgrad; g != nil {
			fp.dgrad = nil
			defer f.done(g)
			if err := f.dev.Copy(f.side, devSpan(send, 0, fp.n), devSpan(g, 0, fp.n)); err != nil {
				return err
			}
		}
		if err := f.dc.ReduceScatter(devSpan(send, 0, size*fp.per), devSpan(recv, 0, fp.per), fp.per, f.side); err != nil {
			return err
		}
		if sg != nil {
			if err := f.dev.Copy(f.side, devSpan(sg, 0, k), devSpan(recv, 0, k)); err != nil {
				return err
			}
			if sg.Device() != f.dev {
				fp.rs = f.side.Record()
			}
		}
		return nil
	})
	if err != nil {
		f.noteErr(err)
	}
	f.stats.ReduceScatters++
	f.stats.BytesScattered += 4 * int64(size*fp.per)
}

// finishDevice makes the compute stream wait for the side stream's
// reductions and divides each shard's gradient by the ranks there (the
// host path's scaling, bit for bit: a float32 multiply by 1/ranks).
func (f *FullShard) finishDevice() error {
	f.dev.Compute().Wait(f.side.Record())
	factor := 1 / float32(f.c.Size())
	return ferry.Catch(func() error {
		for _, fp := range f.params {
			if fp.dgrad != nil { // never reduced (an error before its turn)
				f.done(fp.dgrad)
				fp.dgrad = nil
			}
			if fp.shard == nil || fp.finished {
				continue // (a landed share may be stepping beside: not to be read)
			}
			if g := fp.shard.Grad(); g != nil && g.Device() != f.dev {
				if err := f.finishGradDevice(fp); err != nil {
					return err
				}
			} else if g != nil && factor != 1 {
				g.ScaleInPlace(factor)
			}
		}
		return nil
	})
}

// finishGradDevice waits for the copy of fp's share of the reduced
// gradient into host memory and scales it there by 1/ranks (the same
// float32 multiply), once per step.
func (f *FullShard) finishGradDevice(fp *fsParam) error {
	if write, err := fp.land(); !write || err != nil {
		return err
	}
	if g := fp.shard.Grad(); g != nil && f.c.Size() > 1 {
		return ferry.Catch(func() error { g.ScaleInPlace(1 / float32(f.c.Size())); return nil })
	}
	return nil
}

// gradNormDevice is GradNorm with the gradients gathered on the device.
func (f *FullShard) gradNormDevice() (float64, error) {
	var sumSq float64
	size := f.c.Size()
	err := ferry.Catch(func() error {
		for _, fp := range f.params {
			if fp.n == 0 {
				continue
			}
			send := f.transient(fp.per, device.Gradient)
			whole := f.transient(size*fp.per, device.Gradient)
			f.side.Wait(f.dev.Compute().Record())
			var err error
			if k := fp.hi - fp.lo; k > 0 && fp.shard.Grad() != nil {
				err = f.dev.Copy(f.side, devSpan(send, 0, k), devSpan(fp.shard.Grad(), 0, k))
			}
			if err == nil {
				err = f.dc.AllGather(devSpan(send, 0, fp.per), devSpan(whole, 0, size*fp.per), fp.per, f.side)
			}
			f.done(send)
			if err != nil {
				f.done(whole)
				return err
			}
			f.dev.Compute().Wait(f.side.Record())
			g := whole.AsStrided(fp.p.Shape(), rowMajor(fp.p.Shape()), 0)
			sq := ferry.Square(g)
			s := ferry.Sum(sq)
			sumSq += float64(s.Item())
			s.Release()
			sq.Release()
			g.Release()
			f.done(whole)
		}
		return nil
	})
	return math.Sqrt(sumSq), err
}

// broadcastDevice is Broadcast on the device: each whole parameter from
// root, in place, on the side stream.
func (f *FullShard) broadcastDevice(root int) error {
	return broadcastOnDevice(f.dc, f.side, f.Params(), root)
}

// rowMajor is the contiguous strides of shape.
func rowMajor(shape []int) []int {
	st := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = n
		n *= shape[i]
	}
	return st
}
