package ferry_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

// runAddLayerNorm runs one step of LayerNorm(x + r), fused or not, with
// the norm in scope "ln_2", under hooks that log what is saved; it returns
// the sum, the output, the gradients of x, r, weight and bias, the saves
// and the allocator's events.
func runAddLayerNorm(t *testing.T, dev device.Device, shape []int, affine, fused bool) (sum, out []float32, grads [][]float32, saves []ferry.SaveInfo, events []device.AllocEvent) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, uint64(len(shape))))
	C := shape[len(shape)-1]
	x := ferry.Randn(dev, rng, shape...).RequireGrad()
	r := ferry.Randn(dev, rng, shape...).RequireGrad()
	defer x.Release()
	defer r.Release()
	var w, b *ferry.Tensor
	if affine {
		w = ferry.Randn(dev, rng, C).RequireGrad()
		b = ferry.Randn(dev, rng, C).RequireGrad()
		defer w.Release()
		defer b.Release()
	}
	G := ferry.Randn(dev, rng, shape...)
	G2 := ferry.Randn(dev, rng, shape...)
	defer G.Release()
	defer G2.Release()
	hooks := &ferry.SavedTensorHooks{
		Pack:   func(t *ferry.Tensor, info ferry.SaveInfo) any { saves = append(saves, info); return t },
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	dev.Allocator().Observe(func(e device.AllocEvent) { events = append(events, e) })
	defer dev.Allocator().Observe(nil)
	err := ferry.Step(func(tape *ferry.Tape) error {
		xi, ri := tape.Input(x), tape.Input(r)
		tape.PushHooks(hooks)
		tape.PushModule("h.0")
		var s, y *ferry.Tensor
		if fused {
			s, y = ferry.AddLayerNorm(xi, ri, w, b, 1e-5, "ln_2")
		} else {
			s = ferry.Add(xi, ri)
			tape.PushModule("ln_2")
			y = ferry.LayerNorm(s, w, b, 1e-5)
			tape.PopModule()
		}
		tape.PopModule()
		tape.PopHooks()
		if device.HasData(dev) {
			sum, out = s.Float32s(), y.Float32s()
		}
		// The sum feeds the next residual too: both gradients reach it.
		l := ferry.Add(ferry.Sum(ferry.Mul(y, G)), ferry.Sum(ferry.Mul(s, G2)))
		return l.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*ferry.Tensor{x, r, w, b} {
		if p == nil {
			continue
		}
		if device.HasData(dev) {
			grads = append(grads, p.Grad().Float32s())
		}
		p.SetGrad(nil)
	}
	return sum, out, grads, saves, events
}

// TestAddLayerNormMatchesUnfused: AddLayerNorm gives Add-then-LayerNorm's
// bits (sum, output, gradients), saves the same tensors in the same
// scopes, and allocates and frees the same blocks in the same order, on
// the CPU device and on the meta device (which has no fused kernel).
func TestAddLayerNormMatchesUnfused(t *testing.T) {
	same := func(t *testing.T, what string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d] = %v, unfused %v: not the same bits", what, i, got[i], want[i])
			}
		}
	}
	for _, dev := range []device.Device{newCPU(t, device.Options{PoisonFreed: true}), meta.New(device.Options{}, nil)} {
		for _, shape := range [][]int{{3, 7}, {2, 5, 300}, {1, 1025}, {0, 4}} {
			for _, affine := range []bool{true, false} {
				s0, y0, g0, v0, e0 := runAddLayerNorm(t, dev, shape, affine, false)
				s1, y1, g1, v1, e1 := runAddLayerNorm(t, dev, shape, affine, true)
				same(t, "sum", s1, s0)
				same(t, "output", y1, y0)
				for i := range g0 {
					same(t, "gradient", g1[i], g0[i])
				}
				if !slices.Equal(v0, v1) {
					t.Errorf("%s %v: saves:\n fused   %+v\n unfused %+v", dev.Name(), shape, v1, v0)
				}
				if !slices.Equal(e0, e1) {
					t.Errorf("%s %v: allocations:\n fused   %+v\n unfused %+v", dev.Name(), shape, e1, e0)
				}
			}
		}
	}
}
