package optim

import (
	"fmt"

	"ferry"
	"ferry/device"
)

// State that visits the device (StateVisits).
//
// A visiting parameter's state lives in host tensors (paramState.tensors,
// on the device's Host: pinned memory on a GPU) made at its first update
// or by SetState. Each update:
//
//	up:      waits for compute's work so far and for the last update's
//	         copy down (paramState.down), then copies each slot into a
//	         new device tensor;
//	compute: waits for up, runs the device's update (Engine.update) on
//	         the parameter, its gradient and those tensors;
//	down:    waits for compute, copies each slot back into its host
//	         tensor and records paramState.down.
//
// The device tensors are freed once down has read them (the allocator's
// RecordStream), so the device holds the state from the copy up to the
// copy down only, and compute goes on to what follows (the next forward)
// while the state goes down. Whoever reads or replaces the host tensors
// waits for down first (settleVisits: State, SetState, Release).
//
// The update is the device's, on the same values, so it is bitwise the
// update with the state on the device; on the CPU device that is also the
// host's (OnHost's note).

// visitStreams returns the side streams the state goes up and down on,
// made on dev at the first call.
func (e *Engine) visitStreams(dev device.Device) (up, down device.Stream, err error) {
	if e.up == nil {
		if e.up, err = dev.NewStream("h2d-optimizer-state"); err != nil {
			return nil, nil, fmt.Errorf("optim: %w", err)
		}
	}
	if e.down == nil {
		if e.down, err = dev.NewStream("d2h-optimizer-state"); err != nil {
			return nil, nil, fmt.Errorf("optim: %w", err)
		}
	}
	return e.up, e.down, nil
}

// visitingState returns p's state, in host tensors made now (zero) if it
// did not exist, and whether it was.
func (e *Engine) visitingState(p *ferry.Tensor) (*paramState, bool) {
	if s := e.stateOf(p); s != nil {
		return s, false
	}
	s := &paramState{layout: e.alg.Layout(p.Shape())}
	for _, sl := range s.layout.Slots {
		s.tensors = append(s.tensors, ferry.ZerosOf(p.Device().Host(), sl.DType, device.OptimizerState, sl.Shape...))
	}
	e.setStateOf(p, s)
	return s, true
}

// visitStep is step for a parameter whose state visits the device (the
// file's comment).
func (e *Engine) visitStep(p, g *ferry.Tensor, lr float32) error {
	return ferry.Catch(func() error {
		s, fresh := e.visitingState(p)
		s.step++
		if p.Numel() == 0 {
			return nil
		}
		dev := p.Device()
		up, down, err := e.visitStreams(dev)
		if err != nil {
			return err
		}
		onDevice := make([]*ferry.Tensor, 0, len(s.tensors))
		defer func() {
			for _, t := range onDevice {
				if b, _ := t.Block(); b != nil {
					dev.Allocator().RecordStream(b, down)
				}
				t.Release()
			}
		}()
		// The new blocks may have been compute's until now, and the host
		// tensors down's.
		up.Wait(dev.Compute().Record())
		if s.down != nil {
			up.Wait(s.down)
		}
		for _, h := range s.tensors {
			t := ferry.EmptyOf(dev, h.DType(), device.OptimizerState, h.Shape()...)
			onDevice = append(onDevice, t)
			if err := copyWhole(dev, up, t, h); err != nil {
				return err
			}
		}
		dev.Compute().Wait(up.Record())
		visit := &paramState{step: s.step, layout: s.layout, tensors: onDevice}
		if err := e.update(p, g, visit, KernelUpdate{LR: lr, Step: s.step, Fresh: fresh}); err != nil {
			return err
		}
		down.Wait(dev.Compute().Record())
		for i, h := range s.tensors {
			if err := copyWhole(dev, down, h, onDevice[i]); err != nil {
				return err
			}
			ferry.BumpVersion(h, e.alg.Name()+"_step")
		}
		s.down = down.Record()
		ferry.BumpVersion(p, e.alg.Name()+"_step")
		return pageOut(p)
	})
}

// copyWhole enqueues on stream a copy of src's bytes into dst, tensors of
// one size on dev or its host (nothing for no elements).
func copyWhole(dev device.Device, stream device.Stream, dst, src *ferry.Tensor) error {
	db, doff := dst.Block()
	sb, soff := src.Block()
	if db == nil || sb == nil {
		return nil
	}
	size := int64(src.DType().Size())
	return dev.Copy(stream, device.Span{Block: db, Off: int64(doff) * size, Len: dst.Bytes()},
		device.Span{Block: sb, Off: int64(soff) * size, Len: src.Bytes()})
}

// settleVisits waits for the copies of visiting state down to the host
// (the file's comment), returning the first error they met.
func (e *Engine) settleVisits() error {
	var first error
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	for _, s := range e.state {
		if s.down == nil {
			continue
		}
		if err := s.down.Synchronize(); err != nil && first == nil {
			first = err
		}
		s.down = nil
	}
	return first
}
