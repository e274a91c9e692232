package optim_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/optim"
)

// Every registered optimizer builds by name with its defaults and its
// recipe, refuses what it cannot take (naming it), and says what it is.
func TestRegistry(t *testing.T) {
	names := optim.Names()
	for _, want := range []string{"adamw", "adamw8bit", "lion", "sgd"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s is not registered: %v", want, names)
		}
	}
	if _, err := optim.New("adam9", nil, nil); err == nil || !strings.Contains(err.Error(), "adamw, adamw8bit") {
		t.Errorf("an unknown name: %v, want the list", err)
	}
	dev := newCPU(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			r, err := optim.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, recipe := range []bool{false, true} {
				o, err := optim.New(name, hostParams(dev), r.Hyper(recipe))
				if err != nil {
					t.Fatal(err)
				}
				if o.Name() != name || o.LR() != float64(float32(r.Hyper(recipe)["lr"])) {
					t.Errorf("built %s at lr %v, want %s at %v", o.Name(), o.LR(), name, r.Hyper(recipe)["lr"])
				}
				for k := range o.Hyper() {
					if _, ok := r.Defaults[k]; !ok {
						t.Errorf("Hyper names %q, which the registration does not", k)
					}
				}
				o.Release()
			}
			for _, bad := range []map[string]float64{
				{"lr": 0}, {"lr": -1}, {"lr": math.NaN()}, {"lr": math.Inf(1)}, {"weight_decay": -1}, {"no_such_knob": 1},
			} {
				if _, err := optim.New(name, nil, bad); err == nil {
					t.Errorf("%v accepted", bad)
				}
			}
			for k := range r.Defaults {
				if strings.HasPrefix(k, "beta") || k == "momentum" {
					if _, err := optim.New(name, nil, map[string]float64{k: 1.5}); err == nil || !strings.Contains(err.Error(), k) {
						t.Errorf("%s 1.5: %v, want an error naming it", k, err)
					}
				}
			}
		})
	}
}

// Each update path of Note [update paths] that an optimizer and the CPU
// allow gives the bits of the automatic one, NaN and ±Inf gradients
// included; the tensor-op path agrees to rounding.
func TestUpdatePathsAgree(t *testing.T) {
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			run := func(path string) snapshot {
				dev := newCPU(t)
				ps := hostParams(dev)
				o := c.make(ps)
				optim.SetUpdatePath(engineOf(o), path)
				for step := range 4 {
					setGrads(dev, ps, step, step == 2)
					if err := o.Step(); err != nil {
						t.Fatal(err)
					}
					o.ZeroGrad()
				}
				return snap(ps, o)
			}
			want := run("")
			for _, path := range []string{"loop", "copy"} {
				sameSnap(t, run(path), want)
			}
			if _, ok := engineAlg(c.make(nil)).(optim.TensorStepper); ok {
				got := run("tensors")
				for i := range want.params {
					for j := range want.params[i] {
						a, b := math.Float32frombits(got.params[i][j]), math.Float32frombits(want.params[i][j])
						if a != b && !(a != a && b != b) && math.Abs(float64(a-b)) > 1e-6*math.Max(1, math.Abs(float64(b))) {
							t.Fatalf("tensor ops: parameter %d[%d] %v, the Go update %v", i, j, a, b)
						}
					}
				}
			}
		})
	}
}

// engineOf and engineAlg reach the Engine of an optimizer of this package.
func engineOf(o optim.Stateful) *optim.Engine {
	return o.(interface{ EngineOf() *optim.Engine }).EngineOf()
}

func engineAlg(o optim.Stateful) optim.Algorithm { return o.(optim.Algorithm) }

// On the meta device each optimizer's step allocates exactly its
// layout's bytes (of state; nothing else is left), and 8-bit AdamW at most 0.27 of AdamW's for a model of
// transformer-sized matrices (with its biases and norms in float32).
func TestStateBytesOnMeta(t *testing.T) {
	shapes := [][]int{{50304, 768}, {768}, {768, 2304}, {2304}, {768, 768}, {768, 3072}, {3072}, {3072, 768}, {4099}}
	bytes := map[string]int64{}
	for _, name := range optim.Names() {
		dev := meta.New(device.Options{}, nil)
		var ps []*ferry.Tensor
		var want int64
		o, err := optim.New(name, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sizer := o.(interface{ Layout([]int) optim.Layout })
		for _, sh := range shapes {
			p := ferry.ZerosAs(dev, device.Parameter, sh...).SetName(strings.Repeat("p", len(ps)+1))
			p.SetGrad(ferry.ZerosAs(dev, device.Gradient, sh...))
			ps = append(ps, p)
			want += sizer.Layout(sh).Bytes()
		}
		o, err = optim.New(name, ps, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := dev.Allocator().Stats().RequestedBytes.Current
		if err := o.Step(); err != nil {
			t.Fatal(err)
		}
		got := dev.Allocator().Stats().RequestedBytes.Current - before
		if got != want {
			t.Errorf("%s: %d bytes of state on meta, its layouts say %d", name, got, want)
		}
		bytes[name] = got
		o.Release()
	}
	if r := float64(bytes["adamw8bit"]) / float64(bytes["adamw"]); r > 0.27 {
		t.Errorf("8-bit AdamW holds %.3f of AdamW's state", r)
	} else {
		t.Logf("8-bit AdamW: %d bytes, AdamW %d: %.3f", bytes["adamw8bit"], bytes["adamw"], r)
	}
}
