package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// simdSizes cover empty, shorter than one vector, every remainder of the
// 8- and 32-element loops, and the odd sizes around powers of two.
var simdSizes = []int{0, 1, 2, 7, 8, 9, 15, 16, 31, 32, 33, 39, 40, 63, 64, 65, 100, 1023, 1024, 1025, 4099}

// simdData is random floats with the special values a ReLU must get right
// sprinkled in: ±0, NaN, ±Inf, subnormals.
func simdData(r *rand.Rand, n int) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)),
		float32(math.Inf(-1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1e30, -1e30}
	s := make([]float32, n)
	for i := range s {
		if r.IntN(8) == 0 {
			s[i] = special[r.IntN(len(special))]
		} else {
			s[i] = float32(r.NormFloat64())
		}
	}
	return s
}

func sameBits32(t *testing.T, what string, n int, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s n=%d: element %d is %v (%#x), want %v (%#x)", what, n, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

func sameBits64(t *testing.T, what string, n int, got, want []float64) {
	t.Helper()
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			t.Fatalf("%s n=%d: element %d is %v, want %v", what, n, i, got[i], want[i])
		}
	}
}

// withGo runs f with the assembly loops switched off.
func withGo(f func()) {
	saved := hasAVX2
	hasAVX2 = false
	defer func() { hasAVX2 = saved }()
	f()
}

// TestSIMDMatchesGo: every assembly loop computes the bits its Go loop
// does (and the Go loop what its definition says), at every remainder,
// in place and out of place.
func TestSIMDMatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Log("no AVX2: the Go loops are checked against their definitions only")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range simdSizes {
		a, b := simdData(r, n), simdData(r, n)
		acc0 := make([]float64, n)
		for i := range acc0 {
			acc0[i] = r.NormFloat64()
		}
		// Definitions, element by element.
		relu := func(x float32) float32 {
			if x > 0 || x != x {
				return x
			}
			return 0
		}
		defs := map[string][]float32{}
		for _, k := range []string{"relu", "relugrad", "add", "addrelu", "scale", "axpy"} {
			defs[k] = make([]float32, n)
		}
		for i := range a {
			defs["relu"][i] = relu(a[i])
			if b[i] > 0 || b[i] != b[i] {
				defs["relugrad"][i] = a[i]
			}
			defs["add"][i] = a[i] + b[i]
			defs["addrelu"][i] = relu(a[i] + b[i])
			defs["scale"][i] = -0.37 * a[i]
			p := float32(-0.37) * b[i]
			defs["axpy"][i] = a[i] + p
		}
		run := func() map[string][]float32 {
			out := map[string][]float32{}
			d := make([]float32, n)
			vecReLU(d, a)
			out["relu"] = d
			d = make([]float32, n)
			vecReLUGrad(d, a, b)
			out["relugrad"] = d
			d = make([]float32, n)
			vecAdd(d, a, b)
			out["add"] = d
			d = make([]float32, n)
			vecAddReLU(d, a, b)
			out["addrelu"] = d
			d = make([]float32, n)
			vecScale(d, a, -0.37)
			out["scale"] = d
			d = append([]float32(nil), a...)
			vecAxpy(d, b, -0.37)
			out["axpy"] = d
			// In place: the output is the first input.
			d = append([]float32(nil), a...)
			vecReLU(d, d)
			out["relu in place"] = d
			d = append([]float32(nil), a...)
			vecAddReLU(d, d, b)
			out["addrelu in place"] = d
			return out
		}
		defs["relu in place"], defs["addrelu in place"] = defs["relu"], defs["addrelu"]
		asm := run()
		var gol map[string][]float32
		withGo(func() { gol = run() })
		for k, want := range defs {
			sameBits32(t, k+" (Go)", n, gol[k], want)
			sameBits32(t, k, n, asm[k], want)
		}
		// Accumulating column sums.
		wantAcc, wantD := append([]float64(nil), acc0...), make([]float32, n)
		for i := range a {
			wantAcc[i] += float64(a[i])
		}
		got := append([]float64(nil), acc0...)
		vecAcc64(got, a)
		sameBits64(t, "acc64", n, got, wantAcc)
		wantAcc = append(wantAcc[:0], acc0...)
		for i := range a {
			if b[i] > 0 || b[i] != b[i] {
				wantD[i] = a[i]
			}
			wantAcc[i] += float64(wantD[i])
		}
		for _, goOnly := range []bool{false, true} {
			got, d := append([]float64(nil), acc0...), make([]float32, n)
			if goOnly {
				withGo(func() { vecReLUGradAcc64(d, a, b, got) })
			} else {
				vecReLUGradAcc64(d, a, b, got)
			}
			sameBits32(t, "relugrad+acc64 d", n, d, wantD)
			sameBits64(t, "relugrad+acc64 acc", n, got, wantAcc)
		}
	}
}
