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
	"ferry/nn"
)

// linearReLUCase is x [lead..., in] through Linear(in, out); transposed
// makes x a transposed view (x is then 2-D).
type linearReLUCase struct {
	lead       []int
	in, out    int
	noBias     bool
	transposed bool
}

var linearReLUCases = []linearReLUCase{
	{lead: []int{1}, in: 1, out: 1},
	{lead: []int{7}, in: 5, out: 3},
	{lead: []int{1}, in: 1023, out: 7},
	{lead: []int{33}, in: 64, out: 1025},
	{lead: []int{7}, in: 1025, out: 1023},
	{lead: []int{2, 3}, in: 4, out: 5},
	{lead: []int{9}, in: 6, out: 8, noBias: true},
	{lead: []int{6}, in: 9, out: 4, transposed: true},
	{lead: []int{256}, in: 128, out: 256},
	{lead: []int{0}, in: 3, out: 2},
}

// runLinearReLU runs one step of ReLU(Linear) fused or not, under hooks
// that log what is saved, and returns the output, the gradients of x,
// weight and bias, the saves and the allocator's events.
func runLinearReLU(t *testing.T, dev device.Device, c linearReLUCase, fused bool) (out []float32, grads [][]float32, saves []ferry.SaveInfo, events []device.AllocEvent) {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, uint64(c.in*1000+c.out)))
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
		tape.PushModule("layers")
		tape.PushModule("0")
		var y *ferry.Tensor
		if fused {
			var ok bool
			if y, ok = ferry.LinearEpilogue(in, w, b, ferry.EpilogueReLU, "1"); !ok {
				t.Fatal("no fused Linear+ReLU")
			}
		} else {
			z := ferry.Linear(in, w, b)
			tape.PopModule()
			tape.PushModule("1")
			y = ferry.ReLU(z)
			z.Release()
		}
		tape.PopModule()
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

// TestLinearReLUMatchesUnfused: the fused op gives Linear-then-ReLU's
// values and gradients (to rounding: the bias is added after the product
// instead of before), saves the same tensors under the same names, and
// allocates the same memory, with either matrix-product backend and on the
// meta device, which has no fused kernels.
func TestLinearReLUMatchesUnfused(t *testing.T) {
	matmulBackends(t, func(t *testing.T, dev device.Device) {
		for _, c := range linearReLUCases {
			t.Run(fmt.Sprintf("%v_%dx%d_bias%v_T%v", c.lead, c.in, c.out, !c.noBias, c.transposed), func(t *testing.T) {
				y0, g0, s0, e0 := runLinearReLU(t, dev, c, false)
				y1, g1, s1, e1 := runLinearReLU(t, dev, c, true)
				near := func(what string, got, want []float32) {
					t.Helper()
					if len(got) != len(want) {
						t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
					}
					for i := range want {
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
				checkSameMemory(t, e1, e0)
			})
		}
	})
	t.Run("meta", func(t *testing.T) {
		dev := meta.New(device.Options{}, nil)
		defer dev.Close()
		c := linearReLUCases[3]
		_, _, s0, e0 := runLinearReLU(t, dev, c, false)
		_, _, s1, e1 := runLinearReLU(t, dev, c, true)
		if !slices.Equal(s0, s1) {
			t.Errorf("saves:\n fused   %+v\n unfused %+v", s1, s0)
		}
		checkSameMemory(t, e1, e0)
	})
}

// checkSameMemory compares two runs' allocator events: forward (up to the
// first gradient) event for event; the whole step by peak and by what is
// left. (Backward allocates the bias gradient earlier when fused.)
func checkSameMemory(t *testing.T, got, want []device.AllocEvent) {
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
	if p1 != p0 || l1 != l0 || len(got) != len(want) {
		t.Errorf("step: fused peaks at %d and ends at %d in %d events, unfused %d and %d in %d", p1, l1, len(got), p0, l0, len(want))
	}
}

// TestSequentialFusesLinearReLU: nn.Sequential runs Linear+ReLU pairs
// fused, with the same values as running its modules one by one.
func TestSequentialFusesLinearReLU(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	model := originModel(t, dev, 3, 33, 5)
	defer nn.Release(model)
	x := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), 7, 33)
	defer x.Release()
	run := func(fused bool) (out []float32, grads [][]float32) {
		err := ferry.Step(func(tape *ferry.Tape) error {
			h := tape.Input(x)
			if fused {
				h = model.Forward(h)
			} else {
				for _, m := range model.Modules {
					h = m.Forward(h)
				}
			}
			out = h.Float32s()
			return ferry.Sum(h).Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range model.Parameters() {
			grads = append(grads, p.Grad().Float32s())
			p.SetGrad(nil)
		}
		return out, grads
	}
	y0, g0 := run(false)
	y1, g1 := run(true)
	if !allCloseSlices(y1, y0, 1e-5, 1e-6) {
		t.Errorf("output differs")
	}
	for i := range g0 {
		if !allCloseSlices(g1[i], g0[i], 1e-5, 1e-6) {
			t.Errorf("gradient of %s differs", model.Parameters()[i].Name())
		}
	}
}

func allCloseSlices(a, b []float32, rtol, atol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := math.Abs(float64(a[i] - b[i])); !(d <= atol+rtol*math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}
