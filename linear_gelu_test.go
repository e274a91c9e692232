package ferry_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

// runLinearGELU runs one step of GELUTanh(Linear) fused or not, under hooks
// that log what is saved, and returns the output, the gradients of x,
// weight and bias, the saves and the allocator's events. The linear op
// runs in scope "mlp.c_fc" and the GELU in "mlp", as nn.MLP records them.
func runLinearGELU(t *testing.T, dev device.Device, c linearReLUCase, fused bool) (out []float32, grads [][]float32, saves []ferry.SaveInfo, events []device.AllocEvent) {
	t.Helper()
	rng := rand.New(rand.NewPCG(13, uint64(c.in*1000+c.out)))
	xs := append(slices.Clone(c.lead), c.in)
	if c.transposed {
		xs = []int{c.in, c.lead[0]}
	}
	x := ferry.Randn(dev, rng, xs...).RequireGrad()
	w := ferry.Randn(dev, rng, c.out, c.in).RequireGrad()
	var b *ferry.Tensor
	if !c.noBias {
		b = ferry.Randn(dev, rng, c.out).RequireGrad()
		defer b.Release()
	}
	defer x.Release()
	defer w.Release()
	G := ferry.Randn(dev, rng, append(slices.Clone(c.lead), c.out)...)
	defer G.Release()
	hooks := &ferry.SavedTensorHooks{
		Pack:   func(t *ferry.Tensor, info ferry.SaveInfo) any { saves = append(saves, info); return t },
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	dev.Allocator().Observe(func(e device.AllocEvent) { events = append(events, e) })
	defer dev.Allocator().Observe(nil)
	err := ferry.Step(func(tape *ferry.Tape) error {
		in := tape.Input(x)
		if c.transposed {
			in = in.T()
		}
		tape.PushHooks(hooks)
		tape.PushModule("mlp")
		tape.PushModule("c_fc")
		var y *ferry.Tensor
		if fused {
			var ok bool
			if y, ok = ferry.LinearEpilogue(in, w, b, ferry.EpilogueGELUTanh, ferry.EpilogueParentScope); !ok {
				t.Fatal("no fused Linear+GELUTanh")
			}
			tape.PopModule()
		} else {
			z := ferry.Linear(in, w, b)
			tape.PopModule()
			y = ferry.GELUTanh(z)
			z.Release()
		}
		tape.PopModule()
		tape.PopHooks()
		if device.HasData(dev) {
			out = y.Float32s()
		}
		return y.BackwardWith(ferry.BackwardOptions{Grad: G})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*ferry.Tensor{x, w, b} {
		if p == nil {
			continue
		}
		if device.HasData(dev) {
			grads = append(grads, p.Grad().Float32s())
		}
		p.SetGrad(nil)
	}
	return out, grads, saves, events
}

// TestLinearGELUTanhMatchesUnfused: the fused op gives Linear-then-GELUTanh's
// values and gradients (to rounding: the bias is added after the product;
// bit for bit without a bias), saves the same tensors under the same names
// and module scopes, and allocates the same memory (see
// checkMemoryBiasEarly), with either
// matrix-product backend and on the meta device, which has no fused
// kernels.
func TestLinearGELUTanhMatchesUnfused(t *testing.T) {
	matmulBackends(t, func(t *testing.T, dev device.Device) {
		for _, c := range linearReLUCases {
			t.Run(fmt.Sprintf("%v_%dx%d_bias%v_T%v", c.lead, c.in, c.out, !c.noBias, c.transposed), func(t *testing.T) {
				y0, g0, s0, e0 := runLinearGELU(t, dev, c, false)
				y1, g1, s1, e1 := runLinearGELU(t, dev, c, true)
				near := func(what string, got, want []float32) {
					t.Helper()
					if len(got) != len(want) {
						t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
					}
					for i := range want {
						if c.noBias && math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s[%d] = %v, unfused %v: without a bias, not the same bits", what, i, got[i], want[i])
						}
						if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-5*(1+math.Abs(float64(want[i])))*math.Sqrt(float64(c.in+1))) {
							t.Fatalf("%s[%d] = %v, unfused %v", what, i, got[i], want[i])
						}
					}
				}
				near("output", y1, y0)
				for i := range g0 {
					near(fmt.Sprintf("gradient %d", i), g1[i], g0[i])
				}
				if !slices.Equal(s0, s1) {
					t.Errorf("saves:\n fused   %+v\n unfused %+v", s1, s0)
				}
				checkMemoryBiasEarly(t, e1, e0, c)
			})
		}
	})
	t.Run("meta", func(t *testing.T) {
		dev := meta.New(device.Options{}, nil)
		defer dev.Close()
		for _, c := range linearReLUCases[2:4] {
			_, _, s0, e0 := runLinearGELU(t, dev, c, false)
			_, _, s1, e1 := runLinearGELU(t, dev, c, true)
			if !slices.Equal(s0, s1) {
				t.Errorf("saves:\n fused   %+v\n unfused %+v", s1, s0)
			}
			checkMemoryBiasEarly(t, e1, e0, c)
		}
	})
}

// checkMemoryBiasEarly is checkSameMemory for a fused op whose backward
// writes the bias gradient in the same pass as the activation's
// derivative: forward allocates event for event as the two ops do, the
// step ends with the same memory in as many events, and the peak is the
// same or higher by the bias gradient's block, which then lives while
// the activation's saved input and output gradient do (the fused pass
// needs all of them at once; the meta device, which plans memory, runs
// the same allocations).
func checkMemoryBiasEarly(t *testing.T, got, want []device.AllocEvent, c linearReLUCase) {
	t.Helper()
	forward := func(es []device.AllocEvent) []device.AllocEvent {
		for i, e := range es {
			if e.Category == device.Gradient {
				return es[:i]
			}
		}
		return es
	}
	if f1, f0 := forward(got), forward(want); !slices.Equal(f1, f0) {
		t.Errorf("forward allocations:\n fused   %+v\n unfused %+v", f1, f0)
	}
	peak := func(es []device.AllocEvent) (p, last int64) {
		for _, e := range es {
			p = max(p, e.Allocated)
			last = e.Allocated
		}
		return p, last
	}
	p1, l1 := peak(got)
	p0, l0 := peak(want)
	var slack int64
	if !c.noBias {
		slack = device.RoundSize(int64(4 * c.out))
	}
	if p1 != p0 && p1 != p0+slack || l1 != l0 || len(got) != len(want) {
		t.Errorf("step: fused peaks at %d and ends at %d in %d events, unfused %d and %d in %d (the peak may differ by the bias gradient's %d bytes)", p1, l1, len(got), p0, l0, len(want), slack)
	}
}
