package optkernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry/device"
)

// hostValues returns n values with the awkward ones among them: zeros of
// both signs, subnormals, infinities, NaN, huge and tiny numbers.
func hostValues(rng *rand.Rand, n int, special bool) []float32 {
	odd := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-42, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 3e38, -3e38, 1e-30}
	v := make([]float32, n)
	for i := range v {
		if special && rng.IntN(8) == 0 {
			v[i] = odd[rng.IntN(len(odd))]
		} else {
			v[i] = float32(rng.NormFloat64())
		}
	}
	return v
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// Every vector loop gives adamwGo's bits, on every length (remainders,
// several chunks) and on awkward values, NaN payloads included.
func TestHostAdamWLoopsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hp := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	for _, isa := range ISAs() {
		t.Run(isa, func(t *testing.T) {
			defer func(old string) { ISA = old }(ISA)
			for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 100, 3*hostGrain + 5} {
				for _, special := range []bool{false, true} {
					w, g := hostValues(rng, n, special), hostValues(rng, n, special)
					m, v := hostValues(rng, n, special), hostValues(rng, n, false)
					for i := range v {
						v[i] = v[i] * v[i]
					}
					hp.Step = 1 + rng.IntN(50)
					w0, m0, v0 := slices.Clone(w), slices.Clone(m), slices.Clone(v)
					c := newAdamConsts(hp)
					adamwGo(w0, g, m0, v0, &c)
					ISA = isa
					AdamW(w, g, m, v, hp)
					sameBits(t, "w", w, w0)
					sameBits(t, "m", m, m0)
					sameBits(t, "v", v, v0)
				}
			}
		})
	}
}

// hostParallel covers [0, n) exactly once, in chunks of whole vectors.
func TestHostParallelCovers(t *testing.T) {
	for _, n := range []int{0, 1, hostGrain - 1, 2 * hostGrain, 5*hostGrain + 3} {
		seen := make([]int32, n)
		hostParallel(n, func(lo, hi int) {
			if lo%64 != 0 {
				t.Errorf("chunk starts at %d", lo)
			}
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, s := range seen {
			if s != 1 {
				t.Fatalf("n=%d: element %d visited %d times", n, i, s)
			}
		}
	}
}

// Every SGD vector loop gives sgdGo's bits, for every combination of
// weight decay, momentum, first step, dampening and Nesterov.
func TestHostSGDLoopsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var params []device.SGDParams
	for _, wd := range []float32{0, 1e-2} {
		params = append(params, device.SGDParams{LR: 0.1, WeightDecay: wd})
		for _, first := range []bool{false, true} {
			for _, nesterov := range []bool{false, true} {
				damp := float32(0.1)
				if nesterov {
					damp = 0
				}
				params = append(params, device.SGDParams{LR: 0.05, Momentum: 0.9, Dampening: damp, WeightDecay: wd, First: first, Nesterov: nesterov})
			}
		}
	}
	for _, isa := range ISAs() {
		t.Run(isa, func(t *testing.T) {
			defer func(old string) { ISA = old }(ISA)
			for _, hp := range params {
				for _, n := range []int{0, 1, 8, 15, 16, 17, 33, 3*hostGrain + 5} {
					w, g, buf := hostValues(rng, n, true), hostValues(rng, n, true), hostValues(rng, n, true)
					var b0 []float32
					if hp.Momentum != 0 {
						b0 = slices.Clone(buf)
					} else {
						buf = nil
					}
					w0 := slices.Clone(w)
					sgdGo(w0, g, b0, hp)
					ISA = isa
					SGD(w, g, buf, hp)
					sameBits(t, fmt.Sprintf("%+v w", hp), w, w0)
					sameBits(t, fmt.Sprintf("%+v buf", hp), buf, b0)
				}
			}
		})
	}
}
