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
// no memory: one pair of [rows, seq] token ids (ferry eval's validation
// batches wait in host memory, and each goes to the device for its own
// forward), the forward pass, and the loss when loss is set (eval;
// sample takes the logits). It returns the parameter count and the bytes
// the step reserves beyond the parameters, at its peak.
func inferenceStep(f models.LanguageFamily, s models.Sizes, rows int, loss bool) (params, stepBytes int64, err error) {
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
		err = ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(ferry.ZerosOf(dev, device.Int32, device.Activation, rows, seq))
			y := tape.Adopt(ferry.ZerosOf(dev, device.Int32, device.Activation, rows, seq))
			tape.NoGrad(func() {
				logits := g.Forward(x)
				if loss {
					ferry.CrossEntropy(logits, y).Release()
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
func inferencePreflight(dev device.Device, f models.LanguageFamily, s models.Sizes, rows int, loss bool, hostBytes int64, advice string) error {
	params, step, err := inferenceStep(f, s, rows, loss)
	if err != nil {
		return fmt.Errorf("sizing the run: %w: %s", err, advice)
	}
	return train.Preflight(dev, train.Footprint{Params: params, StepBytes: step, BatchBytes: hostBytes, Inference: true}, availableMemory(), advice)
}
