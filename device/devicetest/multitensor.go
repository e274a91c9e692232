package devicetest

import (
	"math"

	"ferry/device"
)

func init() {
	kernelTests = append(kernelTests, test{name: "MultiTensorAdamW", fn: testMultiTensorAdamW})
}

// testMultiTensorAdamW: AdamWSteps over many tensors of odd sizes (more
// than one launch's table, chunks that end mid-block, empty tensors)
// gives, for three steps, the bits of AdamWStep on each tensor alone; the
// tensors lie in one block at odd offsets, so a kernel that wrote past one
// would spoil its neighbour.
func testMultiTensorAdamW(e *env) {
	mk := family[device.MultiTensorOptimKernels](e, "multi-tensor optimizer")
	ok := family[device.OptimizerKernels](e, "optimizer")
	sizes := []int{1, 3, 1025, 70000, 0, 7, 16384, 16385, 2}
	for len(sizes) < 90 { // beyond one launch's table
		sizes = append(sizes, 1+(len(sizes)*37)%300)
	}
	total := 0
	for _, n := range sizes {
		total += n + 1 // a gap after each
	}
	// The same start in two sets of blocks: one stepped together, one a
	// tensor at a time.
	mkSet := func() (w, g, m, v *device.Block) {
		w = e.alloc(e.dev, int64(total*4), device.Parameter)
		g = e.alloc(e.dev, int64(total*4), device.Gradient)
		m = e.alloc(e.dev, int64(total*4), device.OptimizerState)
		v = e.alloc(e.dev, int64(total*4), device.OptimizerState)
		for i, b := range []*device.Block{w, g, m, v} {
			vals := seq(total, -1, 1)
			if i >= 2 {
				vals = seq(total, 0, 0.01)
			}
			e.upload(e.dev, flat(b, total), vals)
		}
		return
	}
	views := func(w, g, m, v *device.Block) []device.AdamWTensors {
		var ts []device.AdamWTensors
		off := 0
		for _, n := range sizes {
			view := func(b *device.Block) device.View {
				return device.View{Block: b, Off: off, Shape: []int{n}, Strides: []int{1}}
			}
			ts = append(ts, device.AdamWTensors{Param: view(w), Grad: view(g), ExpAvg: view(m), ExpAvgSq: view(v)})
			off += n + 1
		}
		return ts
	}
	w1, g1, m1, v1 := mkSet()
	w2, g2, m2, v2 := mkSet()
	multi, single := views(w1, g1, m1, v1), views(w2, g2, m2, v2)
	for step := 1; step <= 3; step++ {
		p := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step}
		e.ok(mk.AdamWSteps(multi, p), "AdamWSteps step %d", step)
		for _, t := range single {
			e.ok(ok.AdamWStep(t.Param, t.Grad, t.ExpAvg, t.ExpAvgSq, p), "AdamWStep step %d", step)
		}
		for i, b := range [][2]*device.Block{{w1, w2}, {m1, m2}, {v1, v2}, {g1, g2}} {
			got, want := e.read(flat(b[0], total)), e.read(flat(b[1], total))
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					e.Fatalf("step %d, %s[%d]: AdamWSteps gives %v, AdamWStep %v", step, []string{"param", "exp_avg", "exp_avg_sq", "grad"}[i], j, got[j], want[j])
				}
			}
		}
	}
	e.ok(mk.AdamWSteps(nil, device.AdamWParams{LR: 1, Step: 1}), "AdamWSteps of nothing")
}
