package ferry_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
)

// Tests of the transformer ops: finite differences on the fused kernels and
// on the composite fallbacks, fused against composite, dropout's replay, and
// what the fused ops save.

// composite hides a device's optional kernel families, so the tensor layer
// takes its composite fallbacks (or reports the family missing).
type composite struct{ device.Device }

type coreKernels struct{ device.Kernels }

func (c composite) Kernels() device.Kernels { return coreKernels{c.Device.Kernels()} }

func transformerCases() []fdCase {
	heads := func(x *ferry.Tensor, h int) *ferry.Tensor { // [B, T, C] -> [B, H, T, C/H] view
		s := x.Shape()
		r := x.Reshape(s[0], s[1], h, s[2]/h)
		defer r.Release()
		return r.Transpose(1, 2)
	}
	attn := func(o ferry.AttentionOptions) func(x []*ferry.Tensor) *ferry.Tensor {
		return func(x []*ferry.Tensor) *ferry.Tensor { return ferry.ScaledDotProductAttention(x[0], x[1], x[2], o) }
	}
	key := ferry.DropoutKey{Seed: 7, Op: 3, Step: 11}
	return []fdCase{
		{"embedding", []fdInput{fdIn(6, 4), fdInts(3, 1, 3, 0, 5, 3)}, func(x []*ferry.Tensor) *ferry.Tensor {
			idx := x[1].Reshape(2, 3)
			defer idx.Release()
			return ferry.Embedding(x[0], idx)
		}},
		{"layer_norm", []fdInput{fdIn(3, 8), fdIn(8), fdIn(8)}, func(x []*ferry.Tensor) *ferry.Tensor {
			return ferry.LayerNorm(x[0], x[1], x[2], 1e-5)
		}},
		{"layer_norm/no_affine_3d", []fdInput{fdIn(2, 3, 5)}, func(x []*ferry.Tensor) *ferry.Tensor {
			return ferry.LayerNorm(x[0], nil, nil, 1e-5)
		}},
		{"narrow", []fdInput{fdIn(4, 6)}, func(x []*ferry.Tensor) *ferry.Tensor { return x[0].Narrow(1, 2, 3) }},
		{"split_cat", []fdInput{fdIn(2, 3, 7)}, func(x []*ferry.Tensor) *ferry.Tensor {
			ps := x[0].Split(3, -1)
			defer releaseAll(ps...)
			return ferry.Cat(2, ps[2], ps[0], ps[1])
		}},
		{"cat/dim1", []fdInput{fdIn(2, 3), fdIn(2, 1)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Cat(1, x[0], x[1]) }},
		{"permute", []fdInput{fdIn(2, 3, 4)}, func(x []*ferry.Tensor) *ferry.Tensor { return x[0].Permute(2, 0, 1) }},
		{"attention/causal", []fdInput{fdIn(2, 2, 5, 3), fdIn(2, 2, 5, 3), fdIn(2, 2, 5, 3)}, attn(ferry.AttentionOptions{Causal: true})},
		{"attention/full_scale", []fdInput{fdIn(1, 2, 4, 3), fdIn(1, 2, 4, 3), fdIn(1, 2, 4, 3)}, attn(ferry.AttentionOptions{Scale: 0.3})},
		{"attention/dropout", []fdInput{fdIn(1, 2, 6, 3), fdIn(1, 2, 6, 3), fdIn(1, 2, 6, 3)}, attn(ferry.AttentionOptions{Causal: true, Dropout: 0.3, Key: key})},
		{"attention/head_views", []fdInput{fdIn(2, 4, 6), fdIn(2, 4, 6), fdIn(2, 4, 6)}, func(x []*ferry.Tensor) *ferry.Tensor {
			q, k, v := heads(x[0], 2), heads(x[1], 2), heads(x[2], 2)
			defer releaseAll(q, k, v)
			return ferry.ScaledDotProductAttention(q, k, v, ferry.AttentionOptions{Causal: true})
		}},
		{"dropout", []fdInput{fdIn(3, 17)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Dropout(x[0], 0.4, key) }},
		{"cross_entropy/3d_ignore", []fdInput{fdIn(2, 3, 5), fdInts(4, -100, 0, 2, 1, -100)}, func(x []*ferry.Tensor) *ferry.Tensor {
			tg := x[1].Reshape(2, 3)
			defer tg.Release()
			return ferry.CrossEntropy(x[0], tg)
		}},
	}
}

func TestGradcheckTransformerOps(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	for i, c := range transformerCases() {
		t.Run("fused/"+c.name, func(t *testing.T) { gradcheck(t, dev, c, uint64(i)) })
		if c.name == "embedding" {
			continue // no composite: a device without the family says so (TestMissingFamilyIsAnError)
		}
		t.Run("composite/"+c.name, func(t *testing.T) { gradcheck(t, composite{dev}, c, uint64(i)) })
	}
}

func TestMissingFamilyIsAnError(t *testing.T) {
	dev := composite{newCPU(t, device.Options{})}
	err := ferry.Step(func(tape *ferry.Tape) error {
		w := tape.Adopt(ferry.Zeros(dev, 4, 2))
		ferry.Embedding(w, tape.Adopt(ferry.FromInt32s(dev, []int32{1, 2}))) //ferry:discard the call must fail; on a tape its output is the tape's
		return nil
	})
	if err == nil || !errors.Is(err, device.ErrNotSupported) {
		t.Fatalf("want ErrNotSupported naming the family, got %v", err)
	}
}

func TestEmbeddingIndexOutOfRange(t *testing.T) {
	dev := newCPU(t, device.Options{})
	for _, bad := range []int32{-1, 4, math.MaxInt32} {
		err := ferry.Step(func(tape *ferry.Tape) error {
			w := tape.Adopt(ferry.Zeros(dev, 4, 2))
			ferry.Embedding(w, tape.Adopt(ferry.FromInt32s(dev, []int32{1, bad}))) //ferry:discard the call must fail; on a tape its output is the tape's
			return nil
		})
		if err == nil {
			t.Errorf("index %d: no error", bad)
		}
	}
}

func TestCrossEntropyRejectsNegativeTargets(t *testing.T) {
	dev := newCPU(t, device.Options{})
	err := ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Adopt(ferry.Zeros(dev, 2, 3))
		ferry.CrossEntropy(x, tape.Adopt(ferry.FromInt32s(dev, []int32{0, -1}))) //ferry:discard the call must fail; on a tape its output is the tape's
		return nil
	})
	if err == nil {
		t.Fatal("target -1 accepted; only -100 may be ignored")
	}
}

// TestFusedMatchesComposite compares values and gradients of the fused
// kernels with the composite path at a GPT-like size.
func TestFusedMatchesComposite(t *testing.T) {
	cpu := newCPU(t, device.Options{})
	run := func(dev device.Device, f func(x []*ferry.Tensor) *ferry.Tensor, shapes [][]int) (out []float32, grads [][]float32) {
		rng := rand.New(rand.NewPCG(1, 2))
		var xs []*ferry.Tensor
		for _, s := range shapes {
			xs = append(xs, ferry.Randn(dev, rng, s...).RequireGrad())
		}
		defer releaseAll(xs...)
		err := ferry.Step(func(tape *ferry.Tape) error {
			in := make([]*ferry.Tensor, len(xs))
			for i, x := range xs {
				in[i] = tape.Input(x)
			}
			y := f(in)
			out = y.Float32s()
			s := ferry.Sum(y)
			return s.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range xs {
			grads = append(grads, x.Grad().Float32s())
		}
		return out, grads
	}
	cases := []struct {
		name   string
		f      func(x []*ferry.Tensor) *ferry.Tensor
		shapes [][]int
	}{
		{"attention", func(x []*ferry.Tensor) *ferry.Tensor {
			y := ferry.ScaledDotProductAttention(x[0], x[1], x[2], ferry.AttentionOptions{Causal: true, Dropout: 0.1, Key: ferry.DropoutKey{Seed: 1}})
			defer y.Release()
			return ferry.Mul(y, x[3])
		}, [][]int{{2, 3, 33, 16}, {2, 3, 33, 16}, {2, 3, 33, 16}, {2, 3, 33, 16}}},
		{"layer_norm", func(x []*ferry.Tensor) *ferry.Tensor {
			y := ferry.LayerNorm(x[0], x[1], x[2], 1e-5)
			defer y.Release()
			return ferry.Mul(y, x[3])
		}, [][]int{{7, 96}, {96}, {96}, {7, 96}}},
	}
	for _, c := range cases {
		fo, fg := run(cpu, c.f, c.shapes)
		co, cg := run(composite{cpu}, c.f, c.shapes)
		check := func(what string, a, b []float32) {
			scale := 0.0
			for _, v := range b {
				scale = max(scale, math.Abs(float64(v)))
			}
			for i := range a {
				if d := math.Abs(float64(a[i] - b[i])); !(d <= 1e-5*max(scale, 1)) {
					t.Fatalf("%s %s[%d]: fused %v, composite %v", c.name, what, i, a[i], b[i])
				}
			}
		}
		check("output", fo, co)
		for i := range fg {
			check("grad", fg[i], cg[i])
		}
	}
}

func TestDropoutReplaysItsMask(t *testing.T) {
	dev := newCPU(t, device.Options{})
	x := ferry.Ones(dev, 1000, 10)
	defer x.Release()
	draw := func(k ferry.DropoutKey) []float32 {
		y := ferry.Dropout(x, 0.25, k)
		defer y.Release()
		return y.Float32s()
	}
	k := ferry.DropoutKey{Seed: 42, Op: 9, Step: 3}
	a, b := draw(k), draw(k)
	kept := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("element %d differs between two draws with one key", i)
		}
		if a[i] != 0 {
			kept++
			if a[i] != 1/0.75 {
				t.Fatalf("kept element scaled to %v, want 1/(1-p)", a[i])
			}
		}
	}
	if f := float64(kept) / float64(len(a)); math.Abs(f-0.75) > 0.02 {
		t.Errorf("kept %.3f of the elements, want about 0.75", f)
	}
	for _, other := range []ferry.DropoutKey{{Seed: 42, Op: 9, Step: 4}, {Seed: 42, Op: 10, Step: 3}, {Seed: 43, Op: 9, Step: 3}} {
		c := draw(other)
		same := 0
		for i := range a {
			if (a[i] == 0) == (c[i] == 0) {
				same++
			}
		}
		if same == len(a) {
			t.Errorf("key %+v draws the mask of %+v", other, k)
		}
	}
	// The host's definition is the kernel's.
	for i := range a {
		if (a[i] != 0) != device.DropoutKeep(k, 0.25, uint64(i)) {
			t.Fatalf("element %d: kernel and device.DropoutKeep disagree", i)
		}
	}
}

// TestFusedOpsSaveLittle counts what LayerNorm and attention save.
func TestFusedOpsSaveLittle(t *testing.T) {
	dev := newCPU(t, device.Options{})
	saved := map[string]int64{}
	hooks := &ferry.SavedTensorHooks{
		Pack:   func(t *ferry.Tensor, info ferry.SaveInfo) any { saved[info.Op] += t.Bytes(); return t },
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	const B, H, T, D, C = 2, 3, 16, 8, 24
	rng := rand.New(rand.NewPCG(3, 4))
	x := ferry.Randn(dev, rng, B, T, C).RequireGrad()
	q := ferry.Randn(dev, rng, B, H, T, D).RequireGrad()
	defer releaseAll(x, q)
	err := ferry.Step(func(tape *ferry.Tape) error {
		tape.WithHooks(hooks, func() {
			y := ferry.LayerNorm(tape.Input(x), nil, nil, 1e-5)
			qi := tape.Input(q)
			a := ferry.ScaledDotProductAttention(qi, qi, qi, ferry.AttentionOptions{Causal: true})
			_, _ = y, a
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(4 * (B*T*C + 2*B*T)); saved["layer_norm"] != want {
		t.Errorf("layer_norm saved %d bytes, want x + mean + rstd = %d", saved["layer_norm"], want)
	}
	// q, k, v (here one tensor, saved three times), out, lse: no T×T matrix.
	if want := int64(4 * (4*B*H*T*D + B*H*T)); saved["attention"] != want {
		t.Errorf("attention saved %d bytes, want q, k, v, out, lse = %d", saved["attention"], want)
	}
}
