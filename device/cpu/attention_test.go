package cpu_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
)

// TestAttentionHeadsInParallel checks that the attention gives the same
// bits with its heads on parallel goroutines (Note [attention heads]) as
// with the heads in order and each product split (GOMAXPROCS 1 forces the
// latter), forward and backward, causal or not, with dropout, on every
// backend.
func TestAttentionHeadsInParallel(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS ≥ 2")
	}
	const B, H, T, D = 2, 3, 37, 16
	for _, backend := range []string{"go", "blas"} {
		if err := cpu.SetMatmulBackend(backend); err != nil {
			t.Log(backend, err)
			continue
		}
		for _, p := range []device.AttentionParams{
			{Causal: true, Scale: 0.25},
			{Scale: 0.125},
			{Causal: true, Scale: 0.25, Dropout: 0.2, Key: device.DropoutKey{Seed: 7}},
		} {
			var results [2][][]float32
			for run, procs := range []int{runtime.GOMAXPROCS(0), 1} {
				prev := runtime.GOMAXPROCS(procs)
				d := open(t, device.Options{})
				r := rand.New(rand.NewPCG(9, 10))
				view := func(shape ...int) device.View {
					n := device.Numel(shape)
					blk, err := d.Allocator().Alloc(int64(4*n), device.Activation)
					if err != nil {
						t.Fatal(err)
					}
					v := device.View{Block: blk, Shape: shape, Strides: device.Contiguous(shape)}
					for i := range vals(v) {
						vals(v)[i] = float32(r.NormFloat64())
					}
					return v
				}
				q, k, v, g := view(B, H, T, D), view(B, H, T, D), view(B, H, T, D), view(B, H, T, D)
				out, lse := view(B, H, T, D), view(B, H, T)
				dq, dk, dv := view(B, H, T, D), view(B, H, T, D), view(B, H, T, D)
				ak := d.Kernels().(device.AttentionKernels)
				if err := ak.Attention(out, lse, q, k, v, p); err != nil {
					t.Fatal(err)
				}
				if err := ak.AttentionBackward(dq, dk, dv, g, q, k, v, out, lse, p); err != nil {
					t.Fatal(err)
				}
				for _, x := range []device.View{out, lse, dq, dk, dv} {
					results[run] = append(results[run], append([]float32(nil), vals(x)...))
				}
				d.Close()
				runtime.GOMAXPROCS(prev)
			}
			for i := range results[0] {
				for j := range results[0][i] {
					a, b := results[0][i][j], results[1][i][j]
					if math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("%s %+v: output %d element %d: %g in parallel heads, %g in order", backend, p, i, j, a, b)
					}
				}
			}
		}
	}
	cpu.SetMatmulBackend("auto")
}
