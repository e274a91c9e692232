package nn_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"ferry"
	"ferry/nn"
)

// TestSetTrainingAndStepReachChildren: SetTraining and SetStep on a
// container reach the dropout inside it (and do nothing to modules without
// a mode or a step).
func TestSetTrainingAndStepReachChildren(t *testing.T) {
	dev := cpuDev(t)
	rng := rand.New(rand.NewPCG(5, 5))
	l, _ := nn.NewLinear(dev, 8, 8, true, rng)
	state := &nn.DropoutState{Seed: 1, Training: true}
	drop := &nn.Dropout{P: 0.5, Op: nn.OpID("2"), State: state}
	m := nn.NewSequential(l, nn.ReLU{}, nn.Checkpoint{Module: nn.NewSequential(drop)})
	defer nn.Release(m)
	x := ferry.Randn(dev, rng, 4, 8)
	defer x.Release()
	run := func() []float32 {
		y := m.Forward(x)
		defer y.Release()
		return y.Float32s()
	}
	nn.SetStep(m, 1)
	a := run()
	nn.SetStep(m, 2)
	b := run()
	if state.Step != 2 || slices.Equal(a, b) {
		t.Errorf("step %d; steps 1 and 2 drew the same mask: %v", state.Step, slices.Equal(a, b))
	}
	nn.SetTraining(m, false)
	if state.Training {
		t.Fatal("SetTraining(false) did not reach the dropout")
	}
	c := run()
	plain := nn.NewSequential(l, nn.ReLU{}).Forward(x)
	defer plain.Release()
	if !slices.Equal(c, plain.Float32s()) {
		t.Error("in eval mode the dropout changed the output")
	}
	nn.SetTraining(nn.ReLU{}, true) // no mode: nothing happens
	nn.SetStep(l, 3)
	if state.Step != 2 || state.Training {
		t.Error("a module without a mode changed the state")
	}
	nn.SetTraining(m, true)
	if !state.Training {
		t.Error("SetTraining(true) did not reach the dropout")
	}
}

// scaleThen is a Fuser that is not a Linear: Sequential fuses through the
// interface, not by type.
type scaleThen struct{ fused *int }

func (scaleThen) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Scale(x, 2) }
func (scaleThen) Parameters() []*ferry.Tensor           { return nil }
func (s scaleThen) ForwardFused(x *ferry.Tensor, next nn.Module, scope string) (*ferry.Tensor, bool) {
	if scope != "1" {
		return nil, false
	}
	*s.fused++
	h := ferry.Scale(x, 2)
	defer h.Release()
	return next.Forward(h), true
}

func TestSequentialFusesThroughFuser(t *testing.T) {
	dev := cpuDev(t)
	x := ferry.FromFloat32s(dev, []float32{-1, 2}, 2)
	defer x.Release()
	n := 0
	m := nn.NewSequential(scaleThen{&n}, nn.ReLU{}, scaleThen{&n})
	y := m.Forward(x)
	defer y.Release()
	if got := y.Float32s(); n != 1 || !slices.Equal(got, []float32{0, 8}) {
		t.Errorf("fused %d times (want 1: the last module has no successor); output %v, want [0 8]", n, got)
	}
}
