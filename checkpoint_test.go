package ferry_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
)

// A small transformer-like stack for checkpoint tests: per layer
// LayerNorm → Linear → GELU(tanh) → Dropout → Linear, plus a residual.
type ckptLayer struct {
	ln         [2]*ferry.Tensor
	fc1, fc2   *nn.Linear
	dropoutKey ferry.DropoutKey
}

func (l *ckptLayer) forward(x *ferry.Tensor) *ferry.Tensor {
	h := ferry.LayerNorm(x, l.ln[0], l.ln[1], 1e-5)
	a := l.fc1.Forward(h)
	h.Release()
	g := ferry.GELUTanh(a)
	a.Release()
	d := ferry.Dropout(g, 0.2, l.dropoutKey)
	g.Release()
	o := l.fc2.Forward(d)
	d.Release()
	y := ferry.Add(x, o)
	o.Release()
	return y
}

func ckptModel(t *testing.T, dev device.Device, layers, width int) ([]*ckptLayer, []*ferry.Tensor) {
	rng := rand.New(rand.NewPCG(5, 6))
	var ls []*ckptLayer
	var params []*ferry.Tensor
	for i := 0; i < layers; i++ {
		fc1, err := nn.NewLinear(dev, width, 2*width, true, rng)
		if err != nil {
			t.Fatal(err)
		}
		fc2, err := nn.NewLinear(dev, 2*width, width, true, rng)
		if err != nil {
			t.Fatal(err)
		}
		l := &ckptLayer{fc1: fc1, fc2: fc2, dropoutKey: ferry.DropoutKey{Seed: 1, Op: uint64(i), Step: 7}}
		l.ln[0] = nn.NewParameter(ferry.Uniform(dev, rng, 0.5, 1.5, width), "ln.weight")
		l.ln[1] = nn.NewParameter(ferry.Uniform(dev, rng, -0.1, 0.1, width), "ln.bias")
		ls = append(ls, l)
		params = append(params, l.ln[0], l.ln[1])
		params = append(params, fc1.Parameters()...)
		params = append(params, fc2.Parameters()...)
	}
	t.Cleanup(func() { releaseAll(params...) })
	return ls, params
}

type ckptRun struct {
	loss         float32
	grads        [][]float32
	afterForward int64
}

// runCkpt trains one step; mode: "none", "checkpoint", "checkpoint-offload".
func runCkpt(t *testing.T, dev device.Device, ls []*ckptLayer, params []*ferry.Tensor, x *ferry.Tensor, mode string) ckptRun {
	t.Helper()
	var r ckptRun
	var off *offload.Offloader
	if mode == "checkpoint-offload" {
		cfg := offload.DefaultConfig()
		cfg.MinBytes = 0
		var err error
		if off, err = offload.New(dev, cfg); err != nil {
			t.Fatal(err)
		}
		defer off.Close()
	}
	err := ferry.Step(func(tape *ferry.Tape) error {
		run := func() *ferry.Tensor {
			h := tape.Input(x)
			for _, l := range ls {
				var next *ferry.Tensor
				if mode == "none" {
					next = l.forward(h)
				} else {
					next = tape.Checkpoint(func(xs ...*ferry.Tensor) *ferry.Tensor { return l.forward(xs[0]) }, h)
				}
				h.Release()
				h = next
			}
			return h
		}
		var y *ferry.Tensor
		if off != nil {
			tape.WithHooks(off.Hooks(), func() { y = run() })
		} else {
			y = run()
		}
		r.afterForward = dev.Allocator().Stats().AllocatedBytes.Current
		loss := ferry.Mean(ferry.Square(y))
		r.loss = loss.Float32s()[0]
		return loss.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range params {
		r.grads = append(r.grads, p.Grad().Float32s())
		p.SetGrad(nil)
	}
	return r
}

func TestCheckpointGradientsAreBitwise(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	ls, params := ckptModel(t, dev, 4, 32)
	x := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), 8, 32)
	defer x.Release()
	base := dev.Allocator().Stats().AllocatedBytes.Current
	plain := runCkpt(t, dev, ls, params, x, "none")
	for _, mode := range []string{"checkpoint", "checkpoint-offload"} {
		got := runCkpt(t, dev, ls, params, x, mode)
		if math.Float32bits(got.loss) != math.Float32bits(plain.loss) {
			t.Errorf("%s: loss %v, plain %v", mode, got.loss, plain.loss)
		}
		for i := range got.grads {
			for j := range got.grads[i] {
				if math.Float32bits(got.grads[i][j]) != math.Float32bits(plain.grads[i][j]) {
					t.Fatalf("%s: gradient %d[%d] = %v, plain %v", mode, i, j, got.grads[i][j], plain.grads[i][j])
				}
			}
		}
		if got.afterForward >= plain.afterForward {
			t.Errorf("%s keeps %d bytes after forward, plain %d: checkpointing saved nothing", mode, got.afterForward-base, plain.afterForward-base)
		}
		t.Logf("%s: after forward %d bytes above the parameters and input, plain %d", mode, got.afterForward-base, plain.afterForward-base)
	}
	if now := dev.Allocator().Stats().AllocatedBytes.Current; now != base {
		t.Errorf("after the steps %d bytes are allocated, before %d", now, base)
	}
}

func TestCheckpointWithOptimizerInBackward(t *testing.T) {
	for _, ckpt := range []bool{false, true} {
		dev := newCPU(t, device.Options{})
		ls, params := ckptModel(t, dev, 2, 16)
		x := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), 4, 16)
		before := params[2].Float32s()
		opt := optim.NewSGD(params, 0.1)
		err := ferry.Step(func(tape *ferry.Tape) error {
			h := tape.Input(x)
			for _, l := range ls {
				var next *ferry.Tensor
				if ckpt {
					next = tape.Checkpoint(func(xs ...*ferry.Tensor) *ferry.Tensor { return l.forward(xs[0]) }, h)
				} else {
					next = l.forward(h)
				}
				h.Release()
				h = next
			}
			opts, upd := optim.InBackward(opt)
			if err := ferry.Mean(ferry.Square(h)).BackwardWith(opts); err != nil {
				return err
			}
			return upd.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		after := params[2].Float32s()
		if after[0] == before[0] {
			t.Errorf("checkpoint=%v: a parameter used only inside a segment was not updated", ckpt)
		}
		x.Release()
	}
}

func TestCheckpointMisuse(t *testing.T) {
	dev := newCPU(t, device.Options{})
	w := nn.NewParameter(ferry.Ones(dev, 4, 4), "w")
	defer w.Release()
	x := ferry.Ones(dev, 2, 4)
	defer x.Release()
	// Nested segments are an error.
	err := ferry.Step(func(tape *ferry.Tape) error {
		tape.Checkpoint(func(xs ...*ferry.Tensor) *ferry.Tensor { //ferry:discard the tape owns the segment's output
			return tape.Checkpoint(func(ys ...*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(ys[0], w) }, xs[0])
		}, tape.Input(x))
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "nest") {
		t.Errorf("nested checkpoint: got %v", err)
	}
	// A function that computes something else when recomputed.
	calls := 0
	err = ferry.Step(func(tape *ferry.Tape) error {
		y := tape.Checkpoint(func(xs ...*ferry.Tensor) *ferry.Tensor {
			calls++
			h := ferry.MatMul(xs[0], w)
			if calls > 1 {
				h2 := ferry.Tanh(h)
				h.Release()
				h = h2
			}
			return ferry.Sigmoid(h)
		}, tape.Input(x))
		return ferry.Sum(y).Backward()
	})
	if err == nil || !strings.Contains(err.Error(), "same ops") {
		t.Errorf("a segment that changes when recomputed: got %v", err)
	}
	w.SetGrad(nil)
	// A segment whose output backward never reaches: fine, nothing leaks.
	base := dev.Allocator().Stats().AllocatedBytes.Current
	err = ferry.Step(func(tape *ferry.Tape) error {
		xi := tape.Input(x)
		tape.Checkpoint(func(xs ...*ferry.Tensor) *ferry.Tensor { return ferry.Tanh(ferry.MatMul(xs[0], w)) }, xi) //ferry:discard the tape owns the segment's output
		return ferry.Sum(ferry.MatMul(xi, w)).Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	w.SetGrad(nil)
	if now := dev.Allocator().Stats().AllocatedBytes.Current; now != base {
		t.Errorf("unused segment: %d bytes allocated after the step, %d before", now, base)
	}
}
