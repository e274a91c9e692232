package ferry_test

import (
	"math"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

func TestGradcheckRotaryEmbedding(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	constant := func(shape ...int) fdInput { return fdInput{shape: shape, lo: -1, hi: 1, noGrad: true} }
	cs := []fdCase{
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
		t.Run(c.name, func(t *testing.T) { gradcheck(t, dev, c, uint64(103+i)) })
	}
}

// The forward values against the rotation they stand for, computed here
// in float64: with the tables of theta 10000 on [B=2, T=3, D=8], position
// t rotates the pair (i, i+4) by t·10000^(-2i/8).
func TestRotaryEmbeddingValues(t *testing.T) {
	dev := newCPU(t, device.Options{})
	x, w := valueInputs(dev)
	defer releaseAll(x, w)
	xs := x.Float32s()
	want := make([]float64, len(xs))
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
	cos, sin := ferry.RotaryTables(dev, 3, 8, 10000)
	defer releaseAll(cos, sin)
	y := ferry.RotaryEmbedding(x, cos, sin)
	defer y.Release()
	nearFloat64(t, "rotary_embedding", y.Float32s(), want)
}

// The rotary embedding saves only its tables (counted through the hooks,
// on the meta device).
func TestRotaryEmbeddingSaves(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	cos, sin := ferry.RotaryTables(dev, 16, 8, 10000)
	defer releaseAll(cos, sin)
	got := savedShapes(t, dev, func(_ *ferry.Tape, x *ferry.Tensor) *ferry.Tensor { return ferry.RotaryEmbedding(x, cos, sin) })
	if want := [][]int{{16, 8}, {16, 8}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("rotary_embedding saves %v, want %v", got, want)
	}
}
