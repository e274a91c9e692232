package ferry_test

import (
	"math"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

// RMSNorm's tests. LayerNorm's finite differences (fused and composite)
// are in gpt_ops_test.go, its values against PyTorch in
// golden_gpt_ops_test.go, and AddLayerNorm's in add_layer_norm_test.go.

func TestGradcheckRMSNorm(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	cs := []fdCase{
		{"rms_norm", []fdInput{fdIn(2, 3, 6), fdIn(6)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x[0], x[1], 1e-5) }},
		{"rms_norm/no_weight", []fdInput{fdIn(4, 5)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x[0], nil, 1e-6) }},
	}
	for i, c := range cs {
		t.Run(c.name, func(t *testing.T) { gradcheck(t, dev, c, uint64(101+i)) })
	}
}

// The forward values against x/√(mean x² + eps)·w, computed here in
// float64.
func TestRMSNormValues(t *testing.T) {
	dev := newCPU(t, device.Options{})
	x, w := valueInputs(dev)
	defer releaseAll(x, w)
	xs, ws := x.Float32s(), w.Float32s()
	want := make([]float64, len(xs))
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
	y := ferry.RMSNorm(x, w, 1e-5)
	defer y.Release()
	nearFloat64(t, "rms_norm", y.Float32s(), want)
}

// RMSNorm saves x and a value per row, never the normalised tensor
// (counted through the hooks, on the meta device, where nothing
// computes).
func TestRMSNormSaves(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	w := ferry.Ones(dev, 8).SetCategory(device.Parameter).RequireGrad()
	defer w.Release()
	got := savedShapes(t, dev, func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor { return ferry.RMSNorm(x, tape.Input(w), 1e-6) })
	if want := [][]int{{2, 4, 16, 8}, {2, 4, 16, 1}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("rms_norm saves %v, want %v", got, want)
	}
}
