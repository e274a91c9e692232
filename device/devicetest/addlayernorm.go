package devicetest

import (
	"math"

	"ferry/device"
)

func init() {
	kernelTests = append(kernelTests, test{name: "FusedAddLayerNorm", fn: testFusedAddLayerNorm})
}

// testFusedAddLayerNorm: AddLayerNorm gives the bits of the device's own
// Binary(Add) then LayerNorm (sum, output, mean, rstd), with and without
// weight and bias, on rows shorter and longer than a GPU block, and the
// values of a float64 reference.
func testFusedAddLayerNorm(e *env) {
	fk := family[device.FusedAddLayerNormKernels](e, "fused residual add + layer norm")
	lk := family[device.LayerNormKernels](e, "layer norm")
	same := func(what string, got, ref []float32) {
		e.Helper()
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
				e.Errorf("%s[%d] = %v, Binary+LayerNorm give %v: not the same bits", what, i, got[i], ref[i])
				return
			}
		}
	}
	for _, sh := range [][2]int{{3, 7}, {40, 300}, {2, 1025}} {
		rows, C := sh[0], sh[1]
		n := rows * C
		xs, rs := seq(n, -2, 3), seq(n, -1, 1)
		for i := range rs { // not the same pattern as x
			rs[i] = rs[(i*31)%n]
		}
		x, r := e.tensor([]int{rows, C}, xs), e.tensor([]int{rows, C}, rs)
		for _, affine := range []bool{true, false} {
			var w, b device.View
			var ws, bs []float32
			if affine {
				ws, bs = seq(C, 0.5, 1.5), seq(C, -0.2, 0.2)
				w, b = e.tensor([]int{C}, ws), e.tensor([]int{C}, bs)
			}
			sum, out := e.tensor([]int{rows, C}, nil), e.tensor([]int{rows, C}, nil)
			mean, rstd := e.tensor([]int{rows}, nil), e.tensor([]int{rows}, nil)
			e.ok(fk.AddLayerNorm(sum, out, mean, rstd, x, r, w, b, 1e-5), "AddLayerNorm %dx%d", rows, C)
			sum2, out2 := e.tensor([]int{rows, C}, nil), e.tensor([]int{rows, C}, nil)
			mean2, rstd2 := e.tensor([]int{rows}, nil), e.tensor([]int{rows}, nil)
			e.ok(e.k.Binary(device.Add, sum2, x, r), "Binary Add")
			e.ok(lk.LayerNorm(out2, mean2, rstd2, sum2, w, b, 1e-5), "LayerNorm")
			same("AddLayerNorm sum", e.read(sum), e.read(sum2))
			same("AddLayerNorm out", e.read(out), e.read(out2))
			same("AddLayerNorm mean", e.read(mean), e.read(mean2))
			same("AddLayerNorm rstd", e.read(rstd), e.read(rstd2))
			want := make([]float64, n)
			for i := 0; i < rows; i++ {
				var m, v float64
				for c := 0; c < C; c++ {
					m += float64(xs[i*C+c] + rs[i*C+c])
				}
				m /= float64(C)
				for c := 0; c < C; c++ {
					d := float64(xs[i*C+c]+rs[i*C+c]) - m
					v += d * d
				}
				inv := 1 / math.Sqrt(v/float64(C)+1e-5)
				for c := 0; c < C; c++ {
					y := (float64(xs[i*C+c]+rs[i*C+c]) - m) * inv
					if affine {
						y = y*float64(ws[c]) + float64(bs[c])
					}
					want[i*C+c] = y
				}
			}
			e.nearTol("AddLayerNorm", e.read(out), want, 1e-5)
		}
	}
}
