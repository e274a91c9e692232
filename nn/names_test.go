package nn_test

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"ferry"
	"ferry/nn"
)

func names(ns []nn.Named) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func labels(ps []*ferry.Tensor) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name())
	}
	return out
}

// TestNamedParametersNestAndRewrap: names are paths computed from the
// structure, as PyTorch's named_parameters() gives them for
// nn.Sequential(nn.Sequential(Linear, ReLU, Linear), ReLU, Linear); nesting
// prefixes once per level, wrapping the same modules again changes
// nothing, and a child's own names never change.
func TestNamedParametersNestAndRewrap(t *testing.T) {
	dev := cpuDev(t)
	rng := rand.New(rand.NewPCG(4, 4))
	l1, _ := nn.NewLinear(dev, 3, 4, true, rng)
	l2, _ := nn.NewLinear(dev, 4, 4, false, rng)
	l3, _ := nn.NewLinear(dev, 4, 2, true, rng)
	inner := nn.NewSequential(l1, nn.ReLU{}, l2)
	wantInner := []string{"0.weight", "0.bias", "2.weight"}
	if got := names(nn.NamedParameters(inner)); !slices.Equal(got, wantInner) {
		t.Fatalf("inner names %v, want %v", got, wantInner)
	}
	outer := nn.NewSequential(inner, nn.ReLU{}, l3)
	defer nn.Release(outer)
	wantOuter := []string{"0.0.weight", "0.0.bias", "0.2.weight", "2.weight", "2.bias"}
	if got := names(nn.NamedParameters(outer)); !slices.Equal(got, wantOuter) {
		t.Errorf("outer names %v, want %v", got, wantOuter)
	}
	// The labels (Tensor.Name) are the names in the model built last.
	if got := labels(outer.Parameters()); !slices.Equal(got, wantOuter) {
		t.Errorf("labels %v, want %v", got, wantOuter)
	}
	// Building the outer model renamed nothing the inner one lists.
	if got := names(nn.NamedParameters(inner)); !slices.Equal(got, wantInner) {
		t.Errorf("inner names after nesting %v, want %v", got, wantInner)
	}
	if got := names(nn.NamedParameters(l1)); !slices.Equal(got, []string{"weight", "bias"}) {
		t.Errorf("Linear's own names %v", got)
	}
	// Wrapping again, or twice over, gives the same names: never "0.0.0.weight".
	for range 2 {
		again := nn.NewSequential(inner.Modules...)
		if got := names(nn.NamedParameters(again)); !slices.Equal(got, wantInner) {
			t.Errorf("rewrapped names %v, want %v", got, wantInner)
		}
		if got := labels(again.Parameters()); !slices.Equal(got, wantInner) {
			t.Errorf("rewrapped labels %v, want %v", got, wantInner)
		}
	}
	// A module in two containers has a name in each.
	a, b := nn.NewSequential(l3), nn.NewSequential(nn.ReLU{}, nn.ReLU{}, l3)
	if got := names(nn.NamedParameters(a)); !slices.Equal(got, []string{"0.weight", "0.bias"}) {
		t.Errorf("first container %v", got)
	}
	if got := names(nn.NamedParameters(b)); !slices.Equal(got, []string{"2.weight", "2.bias"}) {
		t.Errorf("second container %v", got)
	}
	// ModuleList and Checkpoint name as Sequential does.
	if got := names(nn.NewModuleList(l2, nn.Checkpoint{Module: inner}).NamedParameters()); !slices.Equal(got, []string{"0.weight", "1.0.weight", "1.0.bias"}) {
		t.Errorf("module list names %v", got)
	}
}

// TestSafetensorsNestedNames: a nested model saves and loads under its
// qualified names, whatever containers its modules were put in since.
func TestSafetensorsNestedNames(t *testing.T) {
	dev := cpuDev(t)
	build := func(seed uint64) (*nn.Sequential, *nn.Linear) {
		rng := rand.New(rand.NewPCG(seed, 9))
		l1, _ := nn.NewLinear(dev, 3, 4, true, rng)
		l2, _ := nn.NewLinear(dev, 4, 2, true, rng)
		m := nn.NewSequential(nn.NewSequential(l1, nn.ReLU{}), l2)
		t.Cleanup(func() { nn.Release(m) })
		return m, l1
	}
	m, l1 := build(1)
	nn.NewSequential(l1) // relabels l1's tensors "0.weight", "0.bias"
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := nn.SaveSafetensors(path, m); err != nil {
		t.Fatal(err)
	}
	ts, _, err := nn.LoadTensors(path, dev)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for n, x := range ts {
		got = append(got, n)
		x.Release()
	}
	slices.Sort(got)
	if want := []string{"0.0.bias", "0.0.weight", "1.bias", "1.weight"}; !slices.Equal(got, want) {
		t.Errorf("file holds %v, want %v", got, want)
	}
	m2, _ := build(2)
	if err := nn.LoadSafetensors(path, m2); err != nil {
		t.Fatal(err)
	}
	for i, p := range m.Parameters() {
		if !ferry.AllClose(p, m2.Parameters()[i], 0, 0) {
			t.Errorf("parameter %d differs after the round trip", i)
		}
	}
}

// TestGPTNamedParameters: the GPT's names come from its structure and are
// PyTorch's, in nanoGPT's order.
func TestGPTNamedParameters(t *testing.T) {
	dev := cpuDev(t)
	m := newGPT(t, dev, 1)
	want := nn.GPTParameterNames(stGPTConfig)
	if got := names(nn.NamedParameters(m)); !slices.Equal(got, want) {
		t.Errorf("names %v\nwant %v", got, want)
	}
	if got := labels(m.Parameters()); !slices.Equal(got, want) {
		t.Errorf("labels %v\nwant %v", got, want)
	}
}

// affine is a module of one's own that does not implement
// nn.ParameterNamer: its parameters are named by their tensors' names.
type affine struct{ a, b *ferry.Tensor }

func (m affine) Forward(x *ferry.Tensor) *ferry.Tensor { return x.Contiguous() }
func (m affine) Parameters() []*ferry.Tensor           { return []*ferry.Tensor{m.a, m.b} }

// TestNamedParametersOfForeignModule: a module without ParameterNamer is
// named by its tensors' own names, prefixed by each container, and never
// relabelled, so nesting or re-wrapping it cannot prefix twice.
func TestNamedParametersOfForeignModule(t *testing.T) {
	dev := cpuDev(t)
	m := affine{nn.NewParameter(ferry.Ones(dev, 2), "a"), nn.NewParameter(ferry.Zeros(dev, 2), "b")}
	defer nn.Release(m)
	for range 2 {
		s := nn.NewSequential(nn.ReLU{}, m)
		if got := names(nn.NamedParameters(s)); !slices.Equal(got, []string{"1.a", "1.b"}) {
			t.Errorf("names %v, want [1.a 1.b]", got)
		}
		outer := nn.NewSequential(s)
		if got := names(nn.NamedParameters(outer)); !slices.Equal(got, []string{"0.1.a", "0.1.b"}) {
			t.Errorf("nested names %v, want [0.1.a 0.1.b]", got)
		}
	}
	if got := labels(m.Parameters()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("labels %v, want [a b]", got)
	}
}
