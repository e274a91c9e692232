package cuda_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cuda/fake"
	"ferry/optim"
)

// TestAdamWStepMultiTensor: on the CUDA device AdamW.Step updates its
// parameters with ferry_adamw_multi, a launch per 40 tensors, and gives
// the bits of stepping each alone (StepParam, ferry_adamw_step), over
// three steps and many tensors of odd sizes, one without a gradient (not
// updated, its step count not advanced) and one that joins late (its own
// step count: a launch of its own).
func TestAdamWStepMultiTensor(t *testing.T) {
	gpu, drv := openFake(t, fake.Options{SMs: 4}, device.Options{PoisonFreed: true})
	sizes := []int{1, 3, 1025, 70000, 7, 16385, 2}
	for len(sizes) < 50 {
		sizes = append(sizes, 1+(len(sizes)*37)%300)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	init := make([][]float32, len(sizes))
	for i, n := range sizes {
		init[i] = make([]float32, n)
		for j := range init[i] {
			init[i][j] = float32(rng.NormFloat64())
		}
	}
	mk := func() []*ferry.Tensor {
		ps := make([]*ferry.Tensor, len(sizes))
		for i, n := range sizes {
			ps[i] = ferry.FromFloat32s(gpu, init[i], n).SetCategory(device.Parameter).RequireGrad()
		}
		return ps
	}
	multi, single := mk(), mk()
	defer func() {
		for i := range multi {
			multi[i].Release()
			single[i].Release()
		}
	}()
	om, os := optim.NewAdamW(multi, 1e-2), optim.NewAdamW(single, 1e-2)
	om.WeightDecay, os.WeightDecay = 0.1, 0.1
	defer om.Release()
	defer os.Release()
	const idle, late = 5, 9 // no gradient ever; a gradient from step 2 on
	for step := 0; step < 3; step++ {
		for i, n := range sizes {
			if i == idle || i == late && step == 0 {
				continue
			}
			g := make([]float32, n)
			for j := range g {
				g[j] = float32(rng.NormFloat64())
			}
			multi[i].SetGrad(ferry.FromFloat32s(gpu, g, n))
			single[i].SetGrad(ferry.FromFloat32s(gpu, g, n))
		}
		sync := func() {
			if err := gpu.Compute().Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
		sync()
		before := drv.Context(0).Stats().Launches
		if err := om.Step(); err != nil {
			t.Fatal(err)
		}
		sync()
		launches := drv.Context(0).Stats().Launches - before
		// 48 or 49 tensors of one step count (two launches), and from the
		// second step the late one with its own (a third).
		want := 2
		if step > 0 {
			want = 3
		}
		if launches != want {
			t.Errorf("step %d: %d launches, want %d", step, launches, want)
		}
		for _, p := range single {
			if err := os.StepParam(p); err != nil {
				t.Fatal(err)
			}
		}
		om.ZeroGrad()
		os.ZeroGrad()
		for i := range sizes {
			a, b := multi[i].Float32s(), single[i].Float32s()
			for j := range a {
				if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
					t.Fatalf("step %d, tensor %d (%d elements)[%d]: Step gives %v, StepParam %v", step, i, sizes[i], j, a[j], b[j])
				}
			}
		}
		if got := multi[idle].Float32s(); got[0] != init[idle][0] {
			t.Errorf("the parameter without a gradient changed")
		}
	}
}
