package main

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/models"
	"ferry/nn"
	"ferry/train"
)

// ferry eval and sample allocate by the user's numbers (--batch and
// --batches; --n) as train does, and check their memory the same way,
// with train.Preflight, before any data is read or weights are loaded: a
// size that cannot fit is refused in a moment, naming the memory it needs
// and the flags to lower, rather than swapping for minutes.

// availableMemory is the machine's free memory: what the preflights hold
// an uncapped CPU device to (tests set it).
var availableMemory = cpu.AvailableMemory

// inferenceStep measures one evaluation step of f's language model at
// sizes s (rows × seq tokens) on the meta device, which allocates as the
// CPU does and computes nothing, so that the figure is exact and costs
// no memory: batches pairs of [rows, seq] token ids held beside the model
// (ferry eval keeps its validation batches on the device), the forward
// pass, and the loss when loss is set (eval; sample takes the logits). It
// returns the parameter count and the bytes the step reserves beyond the
// parameters, at its peak.
func inferenceStep(f models.LanguageFamily, s models.Sizes, rows, batches int, loss bool) (params, stepBytes int64, err error) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	err = ferry.Catch(func() error {
		g, err := f.LanguageModel(dev, s, 1)
		if err != nil {
			return err
		}
		defer nn.Release(g)
		nn.SetTraining(g, false)
		for _, p := range g.Parameters() {
			params += int64(p.Numel())
		}
		base := dev.Allocator().Stats().ReservedBytes.Current
		seq := s.Int("seq")
		var held []*ferry.Tensor
		defer func() {
			for _, t := range held {
				t.Release()
			}
		}()
		for range max(batches, 1) {
			held = append(held, ferry.ZerosOf(dev, device.Int32, device.Activation, rows, seq),
				ferry.ZerosOf(dev, device.Int32, device.Activation, rows, seq))
		}
		err = ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				logits := g.Forward(tape.Input(held[0]))
				if loss {
					ferry.CrossEntropy(logits, tape.Input(held[1]))
				}
			})
			return nil
		})
		stepBytes = dev.Allocator().Stats().ReservedBytes.Peak - base
		return err
	})
	return params, stepBytes, err
}

// inferencePreflight refuses an evaluation step of f at sizes s that
// cannot fit on dev (inferenceStep's figure, checked by train.Preflight);
// hostBytes is what the command holds in host memory beside it, advice
// names the flags to lower.
func inferencePreflight(dev device.Device, f models.LanguageFamily, s models.Sizes, rows, batches int, loss bool, hostBytes int64, advice string) error {
	params, step, err := inferenceStep(f, s, rows, batches, loss)
	if err != nil {
		return fmt.Errorf("sizing the run: %w: %s", err, advice)
	}
	return train.Preflight(dev, train.Footprint{Params: params, StepBytes: step, BatchBytes: hostBytes, Inference: true}, availableMemory(), advice)
}
