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

func TestGradcheckLlamaOps(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	constant := func(shape ...int) fdInput { return fdInput{shape: shape, lo: -1, hi: 1, noGrad: true} }
	cs := []fdCase{
		{"silu", []fdInput{fdIn(3, 5)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.SiLU(x[0]) }},
		{"rms_norm", []fdInput{fdIn(2, 3, 6), fdIn(6)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x[0], x[1], 1e-5) }},
		{"rms_norm/no_weight", []fdInput{fdIn(4, 5)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x[0], nil, 1e-6) }},
		{"rotary_embedding", []fdInput{fdIn(2, 3, 4, 6), constant(4, 6), constant(4, 6)},
			func(x []*ferry.Tensor) *ferry.Tensor { return ferry.RotaryEmbedding(x[0], x[1], x[2]) }},
		{"rotary_embedding/transposed_view", []fdInput{fdIn(2, 4, 3, 6), constant(4, 6), constant(4, 6)},
			func(x []*ferry.Tensor) *ferry.Tensor {
				v := x[0].Transpose(1, 2) // [2, 3, 4, 6], heads split off a [B, T, H, D] tensor
				defer v.Release()
				return ferry.RotaryEmbedding(v, x[1], x[2])
			}},
	}
	for i, c := range cs {
		t.Run(c.name, func(t *testing.T) { gradcheck(t, dev, c, uint64(100+i)) })
	}
}

// The forward values against their definitions, computed here in float64.
func TestLlamaOpsValues(t *testing.T) {
	dev := newCPU(t, device.Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	x := ferry.Randn(dev, rng, 2, 3, 8)
	w := ferry.Randn(dev, rng, 8)
	defer releaseAll(x, w)
	xs, ws := x.Float32s(), w.Float32s()
	near := func(what string, got []float32, want []float64) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-6*math.Max(1, math.Abs(want[i])) {
				t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	y := ferry.SiLU(x)
	want := make([]float64, len(xs))
	for i, v := range xs {
		want[i] = float64(v) / (1 + math.Exp(-float64(v)))
	}
	near("silu", y.Float32s(), want)
	y.Release()

	y = ferry.RMSNorm(x, w, 1e-5)
	for r := 0; r < 6; r++ {
		ms := 0.0
		for c := 0; c < 8; c++ {
			ms += float64(xs[r*8+c]) * float64(xs[r*8+c])
		}
		s := math.Sqrt(ms/8 + 1e-5)
		for c := 0; c < 8; c++ {
			want[r*8+c] = float64(xs[r*8+c]) / s * float64(ws[c])
		}
	}
	near("rms_norm", y.Float32s(), want)
	y.Release()

	// [B=2, T=3, D=8] with the tables of theta 10000: position t rotates
	// the pair (i, i+4) by t·10000^(-2i/8).
	cos, sin := ferry.RotaryTables(dev, 3, 8, 10000)
	defer releaseAll(cos, sin)
	y = ferry.RotaryEmbedding(x, cos, sin)
	for b := 0; b < 2; b++ {
		for tt := 0; tt < 3; tt++ {
			for i := 0; i < 4; i++ {
				a := float64(tt) * math.Pow(10000, -float64(2*i)/8)
				o := (b*3 + tt) * 8
				x1, x2 := float64(xs[o+i]), float64(xs[o+i+4])
				want[o+i] = x1*math.Cos(a) - x2*math.Sin(a)
				want[o+i+4] = x2*math.Cos(a) + x1*math.Sin(a)
			}
		}
	}
	near("rotary_embedding", y.Float32s(), want)
	y.Release()
}

// What each op saves, counted through the hooks: RMSNorm keeps x and a
// value per row (never the normalised tensor), SiLU its input, the rotary
// embedding only its tables. On the meta device, where nothing computes.
func TestLlamaOpsSave(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	saved := func(f func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor) [][]int {
		var shapes [][]int
		hooks := &ferry.SavedTensorHooks{
			Pack: func(x *ferry.Tensor, info ferry.SaveInfo) any {
				if !info.Parameter {
					shapes = append(shapes, x.Shape())
				}
				return x
			},
			Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
		}
		x := ferry.Zeros(dev, 2, 4, 16, 8).RequireGrad()
		defer x.Release()
		err := ferry.Step(func(tape *ferry.Tape) error {
			var y *ferry.Tensor
			tape.WithHooks(hooks, func() { y = f(tape, tape.Input(x)) })
			s := ferry.Sum(y)
			return s.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		if x.Grad() == nil || !slices.Equal(x.Grad().Shape(), []int{2, 4, 16, 8}) {
			t.Fatalf("no gradient of x's shape: %v", x.Grad())
		}
		return shapes
	}
	w := ferry.Ones(dev, 8).SetCategory(device.Parameter).RequireGrad()
	defer w.Release()
	cos, sin := ferry.RotaryTables(dev, 16, 8, 10000)
	defer releaseAll(cos, sin)
	for _, c := range []struct {
		name string
		f    func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor
		want [][]int
	}{
		{"silu", func(_ *ferry.Tape, x *ferry.Tensor) *ferry.Tensor { return ferry.SiLU(x) }, [][]int{{2, 4, 16, 8}}},
		{"rms_norm", func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x, tape.Input(w), 1e-6) },
			[][]int{{2, 4, 16, 8}, {2, 4, 16, 1}}},
		{"rotary_embedding", func(_ *ferry.Tape, x *ferry.Tensor) *ferry.Tensor { return ferry.RotaryEmbedding(x, cos, sin) },
			[][]int{{16, 8}, {16, 8}}},
	} {
		if got := saved(c.f); !slices.EqualFunc(got, c.want, slices.Equal) {
			t.Errorf("%s saves %v, want %v", c.name, got, c.want)
		}
	}
}
