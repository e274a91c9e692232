// Package user calls the stub ferry API rightly and wrongly; the comments
// say what ferrydiscard should report.
package user

import (
	"ferry"
	"ferry/nn"
)

// origin is the origin mistake: To used as if it moved prev.
func origin(host ferry.Device, layers []*nn.Linear, x *ferry.Tensor) *ferry.Tensor {
	prev := x
	for _, l := range layers {
		x = ferry.ReLU(l.Forward(prev))
		prev.To(host) // want `^prev\.To returns a copy and does not move prev; the discarded copy leaks\. To move saved tensors off the device, push an offloader's hooks on the tape: tape\.WithHooks\(off\.Hooks\(\), f\) with off from offload\.New \(or offload\.NewHostSaver\(dev\)\); to move prev yourself, assign the result and Release the original$`
		prev = x
	}
	return x
}

func discarded(dev ferry.Device, x *ferry.Tensor, l *nn.Linear) {
	x.Contiguous()         // want `^result of x\.Contiguous is discarded; the new tensor leaks — assign it, or Release it$`
	x.Clone()              // want `result of x\.Clone is discarded`
	(x.Detach())           // want `result of x\.Detach is discarded`
	ferry.ReLU(x)          // want `result of ferry\.ReLU is discarded`
	ferry.Add(x, x)        // want `result of ferry\.Add is discarded`
	x.Split(2, 0)          // want `result of x\.Split is discarded`
	l.Forward(x)           // want `result of l\.Forward is discarded`
	func() *ferry.Tensor { // want `result of a function literal is discarded`
		return x.Clone()
	}()
	_ = x.Clone()                 // want `result of x\.Clone is discarded`
	_ = ferry.Zeros(dev, 3)       // want `result of ferry\.Zeros is discarded`
	_, err := ferry.Load("w.bin") // want `result of ferry\.Load is discarded`
	_ = err
	a, _ := x.To(dev), x.Clone() // want `result of x\.Clone is discarded`
	a.Release()
	var _ = x.Reshape(3) // want `result of x\.Reshape is discarded`
}

// Deferred and go'd calls lose their results too: reported, with a note.
func deferred(dev ferry.Device, x *ferry.Tensor) {
	defer x.To(dev)  // want `^x\.To returns a copy and does not move x; the discarded copy leaks \(a deferred call's results are lost\)\. `
	defer x.Clone()  // want `^result of x\.Clone is discarded \(a deferred call's results are lost\); the new tensor leaks`
	go ferry.ReLU(x) // want `^result of ferry\.ReLU is discarded \(a go statement's results are lost\);`
	defer x.Release()
}

// Chains are reported once, at the call whose result is lost.
func chained(dev ferry.Device, x *ferry.Tensor) {
	x.Contiguous().To(dev)                         // want `^x\.Contiguous\(\)\.To returns a copy and does not move x\.Contiguous\(\)`
	x.Reshape(2, 3).Clone().SetName("c")           // want `result of x\.Reshape\(2, 3\)\.Clone is discarded`
	ferry.Zeros(dev, 3).RequireGrad().SetName("z") // want `result of ferry\.Zeros is discarded`
}

// Setters return their receiver for chaining: dropping that is normal. So
// are tensors the caller already holds.
func setters(tape *ferry.Tape, x, batch *ferry.Tensor, l *nn.Linear) {
	x.SetName("x")
	x.SetCategory(1).RequireGrad()
	x.RequireGrad().SetName("w")
	tape.Adopt(batch)
	x.Grad()
	l.Parameters()
	nn.NewParameter(ferry.Zeros(nil, 3), "bias")
	_ = x.SetName("x")
}

// correct moves a tensor by assigning the copy and releasing the original,
// and leaves offloading to hooks.
func correct(tape *ferry.Tape, host ferry.Device, x *ferry.Tensor, l *nn.Linear) (*ferry.Tensor, error) {
	y := x.To(host)
	x.Release()
	var z *ferry.Tensor
	tape.WithHooks(nil, func() { z = l.Forward(tape.Input(y)) })
	parts := y.Split(1, 0)
	for _, p := range parts {
		p.Release()
	}
	_ = x.Numel()
	if err := z.Backward(); err != nil {
		return nil, err
	}
	w, err := ferry.Load("w.bin")
	return ferry.Add(w, z), err
}

// meant discards on purpose, and says so.
func meant(tape *ferry.Tape, x *ferry.Tensor, l *nn.Linear) {
	tape.WithHooks(nil, func() { l.Forward(x) }) //ferry:discard the tape owns the output
	//ferry:discard
	x.Clone()
	//ferry:discarded is not the directive
	x.Clone() // want `result of x\.Clone is discarded`
	x.Clone() // ferry:discard (with a space) is not the directive either // want `result of x\.Clone is discarded`
}
