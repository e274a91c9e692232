package optim

import (
	"fmt"
	"slices"

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
//	         new device tensor (with StateVisitsAhead, gradComplete has
//	         done so some gradients before: paramState.early);
//	compute: waits for up, runs the device's update (Engine.update) on
//	         the parameter, its gradient and those tensors;
//	down:    waits for compute, copies each slot back into its host
//	         tensor and records paramState.down.
//
// The device tensors are freed once down has read them (the allocator's
// RecordStream), so the device holds the state from the copy up to the
// copy down only, and compute goes on to what follows (the next forward)
// while the state goes down. The parameter stays on the device after its
// update: a streamed one is written back when its pager next pages it
// out (offload.Streamer keeps the next step's first uses). Whoever reads or replaces the host tensors
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
		onDevice, ready := s.early, s.earlyReady
		s.early, s.earlyReady = nil, nil
		defer func() {
			for _, t := range onDevice {
				if b, _ := t.Block(); b != nil {
					dev.Allocator().RecordStream(b, down)
				}
				t.Release()
			}
		}()
		if onDevice == nil {
			var err error
			if onDevice, err = e.bringUp(s, dev, up); err != nil {
				return err
			}
			ready = up.Record()
		}
		dev.Compute().Wait(ready)
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
		// p stays on the device (streamed, it is written back when its
		// pager next pages it out): a visiting parameter is one whose
		// next use is the next forward's first.
		ferry.BumpVersion(p, e.alg.Name()+"_step")
		return nil
	})
}

// bringUp allocates s's state on dev and starts its copy up on up.
func (e *Engine) bringUp(s *paramState, dev device.Device, up device.Stream) (onDevice []*ferry.Tensor, err error) {
	// The new blocks may have been compute's until now, and the host
	// tensors down's.
	up.Wait(dev.Compute().Record())
	if s.down != nil {
		up.Wait(s.down)
	}
	for _, h := range s.tensors {
		var t *ferry.Tensor
		if err := ferry.Catch(func() error {
			t = ferry.EmptyOf(dev, h.DType(), device.OptimizerState, h.Shape()...)
			return nil
		}); err != nil {
			for _, t := range onDevice {
				t.Release()
			}
			return nil, err
		}
		onDevice = append(onDevice, t)
		if err := copyWhole(dev, up, t, h); err != nil {
			for _, t := range onDevice {
				t.Release()
			}
			return nil, err
		}
	}
	return onDevice, nil
}

// gradComplete is InBackward's ferry.BackwardOptions.GradComplete, on
// the goroutine running backward: p's gradient is complete. With
// StateVisitsAhead, it starts the copies up of the visiting states whose
// parameters' gradients completed at most ahead after p's in the last
// backward.
func (e *Engine) gradComplete(p *ferry.Tensor) {
	if e.ahead == 0 || e.host == nil || len(e.visiting) == 0 {
		return
	}
	if slices.Contains(e.completing, p) { // the next backward
		e.completed, e.completing, e.at = e.completing, e.completed[:0], 0
	}
	e.completing = append(e.completing, p)
	i := e.at
	for i < len(e.completed) && e.completed[i] != p {
		i++
	}
	if i == len(e.completed) {
		return // not where the last backward had it: no guess
	}
	e.at = i + 1
	for _, q := range e.completed[i+1 : min(len(e.completed), i+1+e.ahead)] {
		s := e.stateOf(q)
		if !e.visits(q) || s == nil || s.early != nil || q.Numel() == 0 {
			continue // (a fresh state is made at the update)
		}
		dev := q.Device()
		up, _, err := e.visitStreams(dev)
		if err != nil {
			return
		}
		if s.early, err = e.bringUp(s, dev, up); err != nil {
			return // out of memory ahead of the update: the update will ask again
		}
		s.earlyReady = up.Record()
	}
}

// dropEarly frees state brought up ahead of an update that did not come.
func (s *paramState) dropEarly() {
	if s.early != nil {
		_ = s.earlyReady.Synchronize()
		for _, t := range s.early {
			t.Release()
		}
		s.early, s.earlyReady = nil, nil
	}
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
