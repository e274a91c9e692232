package optkernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry/device"
)

// AdamWScalars, given the scalars the CUDA device derives from a step's
// parameters, gives AdamW's bits.
func TestAdamWScalarsIsAdamW(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 1000
	w, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range w {
		w[i], g[i], m[i], v[i] = rng.Float32()*2-1, rng.Float32()*2-1, rng.Float32()*0.1, rng.Float32()*0.01
	}
	w2, m2, v2 := append([]float32(nil), w...), append([]float32(nil), m...), append([]float32(nil), v...)
	p := device.AdamWParams{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 7}
	AdamW(w, g, m, v, p)
	// As device/cuda's adamwScalars derives them.
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	AdamWScalars(w2, g, m2, v2, 1-p.LR*p.WeightDecay, p.Beta1, p.Beta2, p.Eps, float32(float64(p.LR)/bc1), float32(math.Sqrt(bc2)))
	for i := range w {
		if math.Float32bits(w[i]) != math.Float32bits(w2[i]) || m[i] != m2[i] || v[i] != v2[i] {
			t.Fatalf("element %d: AdamW gives w %v m %v v %v, AdamWScalars %v %v %v", i, w[i], m[i], v[i], w2[i], m2[i], v2[i])
		}
	}
}
