package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
)

func TestLinearInitAndNames(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	l1, _ := nn.NewLinear(dev, 100, 50, true, rng)
	l2, _ := nn.NewLinear(dev, 50, 10, false, rng)
	m := nn.NewSequential(l1, nn.ReLU{}, l2, nn.GELU{Tanh: true})
	var names []string
	for _, p := range m.Parameters() {
		names = append(names, p.Name())
		if !p.RequiresGrad() || p.Category() != device.Parameter {
			t.Errorf("%s: requires grad %v, category %v", p.Name(), p.RequiresGrad(), p.Category())
		}
	}
	if want := []string{"0.weight", "0.bias", "2.weight"}; len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Errorf("names %v, want %v", names, want)
	}
	// PyTorch's default: uniform in ±1/√in, for weight and bias.
	bound := 1 / math.Sqrt(100)
	for _, p := range l1.Parameters() {
		v := p.Float32s()
		var maxAbs float64
		for _, x := range v {
			maxAbs = math.Max(maxAbs, math.Abs(float64(x)))
		}
		if maxAbs > bound || maxAbs < 0.8*bound {
			t.Errorf("%s: largest |value| %v, want close to and at most %v", p.Name(), maxAbs, bound)
		}
	}
	if got := nn.ParameterBytes(m); got != 4*(100*50+50+50*10) {
		t.Errorf("ParameterBytes %d", got)
	}
	if _, err := nn.NewLinear(dev, 0, 3, true, rng); err == nil {
		t.Error("a Linear with no inputs was made")
	}
	nn.Release(m)
	if got := dev.Allocator().Allocated(); got != 0 {
		t.Errorf("%d bytes left after Release", got)
	}
}

// Same seed, same layer; and on the meta device nothing is drawn.
func TestSeeding(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	a, _ := nn.NewLinear(dev, 8, 8, true, rand.New(rand.NewPCG(7, 0)))
	b, _ := nn.NewLinear(dev, 8, 8, true, rand.New(rand.NewPCG(7, 0)))
	if !ferry.AllClose(a.Weight, b.Weight, 0, 0) || !ferry.AllClose(a.Bias, b.Bias, 0, 0) {
		t.Error("one seed gave two layers")
	}
}

// Sequential frees each intermediate once the next module has used it:
// after forward, one activation per Linear+ReLU pair is held.
func TestSequentialReleasesIntermediates(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	rng := rand.New(rand.NewPCG(2, 2))
	var ms []nn.Module
	for i := 0; i < 5; i++ {
		l, _ := nn.NewLinear(dev, 64, 64, true, rng)
		ms = append(ms, l, nn.ReLU{})
	}
	m := nn.NewSequential(ms...)
	x := ferry.Ones(dev, 16, 64)
	err := ferry.Step(func(tape *ferry.Tape) error {
		before := dev.Allocator().Allocated()
		y := m.Forward(tape.Input(x))
		if got, want := dev.Allocator().Allocated()-before, int64(5*16*64*4); got != want {
			t.Errorf("forward holds %d bytes, want %d", got, want)
		}
		return ferry.Sum(y).Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLinearFusesWithEpilogues: a Linear fuses with the modules that are
// epilogues the op layer fuses (a ReLU, by value or pointer), giving
// ferry.LinearReLU's values bit for bit, and declines anything else
// without allocating.
func TestLinearFusesWithEpilogues(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	l, _ := nn.NewLinear(dev, 40, 30, true, rng)
	defer nn.Release(l)
	x := ferry.Randn(dev, rng, 9, 40)
	defer x.Release()
	want := ferry.LinearReLU(x, l.Weight, l.Bias)
	defer want.Release()
	for _, next := range []nn.Module{nn.ReLU{}, &nn.ReLU{}} {
		y, ok := l.ForwardFused(x, next, "")
		if !ok {
			t.Fatalf("%T: not fused", next)
		}
		if !ferry.AllClose(y, want, 0, 0) {
			t.Errorf("%T: differs from ferry.LinearReLU", next)
		}
		y.Release()
	}
	before := dev.Allocator().Allocated()
	for _, next := range []nn.Module{nn.GELU{}, nn.Tanh{}, l} {
		if y, ok := l.ForwardFused(x, next, ""); ok || y != nil {
			t.Errorf("%T: fused", next)
		}
	}
	if _, ok := ferry.LinearEpilogue(x, l.Weight, l.Bias, ferry.Epilogue(200), ""); ok { //ferry:discard declined, it returns nil
		t.Error("an unknown epilogue fused")
	}
	if got := dev.Allocator().Allocated(); got != before {
		t.Errorf("declining allocated %d bytes", got-before)
	}
}

// TestLayerConstructors: NewEmbedding and NewLayerNorm make parameters
// initialised as PyTorch does, named "weight" and "bias", and refuse
// sizes below one; Sigmoid and Tanh are their ops as modules.
func TestLayerConstructors(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	defer dev.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	e, err := nn.NewEmbedding(dev, 50, 8, 0.02, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(e)
	var sq float64
	for _, v := range e.Weight.Float32s() {
		sq += float64(v) * float64(v)
	}
	if std := math.Sqrt(sq / 400); std < 0.015 || std > 0.025 {
		t.Errorf("embedding std %v, want about 0.02", std)
	}
	ln, err := nn.NewLayerNorm(dev, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(ln)
	if w, b := ln.Weight.Float32s(), ln.Bias.Float32s(); w[0] != 1 || w[3] != 1 || b[0] != 0 || b[3] != 0 {
		t.Errorf("LayerNorm weight %v, bias %v; want ones and zeros", w, b)
	}
	var got []string
	for _, n := range nn.NewModuleList(e, ln).NamedParameters() {
		got = append(got, n.Name)
		if n.Tensor.Category() != device.Parameter || !n.Tensor.RequiresGrad() {
			t.Errorf("%s is not a parameter", n.Name)
		}
	}
	if want := "[0.weight 1.weight 1.bias]"; fmt.Sprint(got) != want {
		t.Errorf("names %v, want %s", got, want)
	}
	if _, err := nn.NewEmbedding(dev, 0, 8, 1, rng); err == nil {
		t.Error("an embedding of no rows was made")
	}
	if _, err := nn.NewLayerNorm(dev, 0, false); err == nil {
		t.Error("a LayerNorm of width 0 was made")
	}
	x := ferry.FromFloat32s(dev, []float32{-2, 0, 3}, 3)
	defer x.Release()
	for _, c := range []struct {
		m  nn.Module
		op func(*ferry.Tensor) *ferry.Tensor
	}{{nn.Sigmoid{}, ferry.Sigmoid}, {nn.Tanh{}, ferry.Tanh}} {
		y, want := c.m.Forward(x), c.op(x)
		if !ferry.AllClose(y, want, 0, 0) || c.m.Parameters() != nil {
			t.Errorf("%T differs from its op", c.m)
		}
		y.Release()
		want.Release()
	}
}
