package demo_test

import (
	"testing"

	"ferry"
	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/plan"
)

// rankPeaks replays two steps of one rank on the meta device and returns
// the second step's peaks: the whole step and by category.
func rankPeaks(t *testing.T, cfg demo.Config, ranks, shard int) (total int64, byCat map[device.Category]int64, name string) {
	t.Helper()
	m := demo.PlanModel(cfg)
	if ranks > 1 {
		var err error
		if m, err = m.(plan.RankModel).ForRanks(ranks, shard); err != nil {
			t.Fatal(err)
		}
	}
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	step, err := m.Build(dev, false)
	if err != nil {
		t.Fatal(err)
	}
	defer step.Release()
	for i := 0; i < 2; i++ {
		dev.Allocator().ResetPeak()
		if err := ferry.Step(step.Run); err != nil {
			t.Fatal(err)
		}
	}
	st := dev.Allocator().Stats()
	byCat = map[device.Category]int64{}
	for c := device.Category(0); c < device.NumCategories; c++ {
		byCat[c] = st.ByCategory[c].Peak
	}
	return st.AllocatedBytes.Peak, byCat, m.String()
}

// One rank's memory on the meta device, run through the trainer's dist
// code (dist.Pretend): at ZeRO-1 a rank of N holds about 1/N of AdamW's
// state (within the largest parameter), at ZeRO-2 fewer gradient bytes
// at once (the other ranks' are dropped as backward completes them), and
// ZeRO-0 holds what one process holds. The figures are logged (go test
// -v -run TestRankMemoryOnMeta); GPT-2 124M's are skipped with -short.
func TestRankMemoryOnMeta(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes models.Sizes
	}{
		{"small GPT", models.Sizes{"vocab": 512, "seq": 64, "layers": 4, "heads": 4, "embd": 128, "batch": 4}},
		{"GPT-2 124M", nil},
	} {
		cfg := demo.DefaultConfig("meta")
		cfg.Family, _ = models.Lookup("gpt")
		cfg.Sizes = tc.sizes
		if tc.sizes == nil && testing.Short() {
			continue
		}
		whole, wc, _ := rankPeaks(t, cfg, 1, 0)
		fullState, fullGrad, params := wc[device.OptimizerState], wc[device.Gradient], wc[device.Parameter]
		t.Logf("%s, one process: peak %s; parameters %s, AdamW state %s, gradient category's peak %s (with activation gradients)", tc.name,
			device.FormatBytes(whole), device.FormatBytes(params), device.FormatBytes(fullState), device.FormatBytes(fullGrad))
		// Twice the trainable parameters (the parameter category also
		// holds a few fixed tensors).
		if d := 2*params - fullState; d < 0 || d > fullState/1000 {
			t.Fatalf("%s: AdamW state %d bytes, want twice the parameters' %d", tc.name, fullState, params)
		}
		if p0, c0, _ := rankPeaks(t, cfg, 2, 0); p0 != whole || c0[device.OptimizerState] != fullState {
			t.Errorf("%s: a rank at ZeRO-0 peaks at %d with %d of state; one process %d, %d", tc.name, p0, c0[device.OptimizerState], whole, fullState)
		}
		for _, ranks := range []int{2, 4} {
			var z1 int64
			for _, shard := range []int{1, 2} {
				peak, c, name := rankPeaks(t, cfg, ranks, shard)
				state, grad := c[device.OptimizerState], c[device.Gradient]
				t.Logf("  %s: peak %s (%.1f%% of one process); AdamW state %s (1/%.2f), gradient category's peak %s (1/%.2f)", name,
					device.FormatBytes(peak), 100*float64(peak)/float64(whole), device.FormatBytes(state), float64(fullState)/float64(state),
					device.FormatBytes(grad), float64(fullGrad)/float64(grad))
				// Whole parameters are owned, so a share is 1/N within
				// the largest parameter's state (GPT's embedding).
				if state >= fullState || float64(state) > float64(fullState)/float64(ranks)*1.35 {
					t.Errorf("%s: %d bytes of state, %d in one process", name, state, fullState)
				}
				if peak >= whole || peak < whole-fullState {
					t.Errorf("%s: peak %d, one process %d", name, peak, whole)
				}
				if shard == 1 {
					z1 = state
					if grad != fullGrad {
						t.Errorf("%s: gradients peak at %d bytes, one process %d", name, grad, fullGrad)
					}
				} else {
					// ZeRO-2's owners balance each bucket under a cap of
					// a share (or the largest parameter) plus 5%, so its
					// state is within about 5% of ZeRO-1's.
					if d := state - z1; d < -z1/16 || d > z1/16 {
						t.Errorf("%s: %d bytes of state, ZeRO-1 %d", name, state, z1)
					}
					// Fewer gradient bytes at once, where the peak of the
					// category is not an activation's gradient (GPT-2's
					// logits' gradient is).
					if grad > fullGrad || (tc.sizes != nil && grad >= fullGrad) {
						t.Errorf("%s: gradients peak at %d bytes, one process %d", name, grad, fullGrad)
					}
				}
			}
		}
	}
}

// plan.Make with Ranks plans the rank's step: smaller than one process's
// by the state it does not hold, never updating inside backward, even
// under a budget that one process meets only by updating inside backward.
func TestPlanPerRank(t *testing.T) {
	if testing.Short() {
		t.Skip("short: plans GPT-sized steps per rank")
	}
	cfg := demo.DefaultConfig("meta")
	cfg.Family, _ = models.Lookup("gpt")
	cfg.Sizes = models.Sizes{"vocab": 512, "seq": 64, "layers": 4, "heads": 4, "embd": 128, "batch": 4}
	prof, err := plan.LoadProfile("h200-pcie5")
	if err != nil {
		t.Fatal(err)
	}
	make1 := func(ranks, shard int, budget int64) *plan.Plan {
		p, err := plan.Make(plan.Options{Model: demo.PlanModel(cfg), Budget: budget, Profile: prof, Ranks: ranks, Shard: shard})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	one := make1(1, 0, 1<<30)
	_, c, _ := rankPeaks(t, cfg, 1, 0)
	for _, ranks := range []int{2, 4} {
		p := make1(ranks, 1, 1<<30)
		peak, _, _ := rankPeaks(t, cfg, ranks, 1)
		if p.Ranks != ranks || p.Shard != 1 || p.Unlimited.PeakBytes != peak {
			t.Errorf("%d ranks: plan for %d ranks at ZeRO-%d, unlimited peak %d; the rank's replay peaks at %d", ranks, p.Ranks, p.Shard, p.Unlimited.PeakBytes, peak)
		}
		if saved := one.Unlimited.PeakBytes - p.Unlimited.PeakBytes; saved <= 0 || saved > c[device.OptimizerState] {
			t.Errorf("%d ranks: the rank's step peaks %d bytes below one process's (AdamW state %d)", ranks, saved, c[device.OptimizerState])
		}
	}
	// A tight budget: the rank's plan never puts the optimizer in backward.
	for _, budget := range []int64{one.AllRecompute.PeakBytes, one.AllOffload.PeakBytes} {
		if p := make1(2, 2, budget); p.OptimizerInBackward || p.AllRecompute.OptimizerInBackward || p.AllOffload.OptimizerInBackward {
			t.Errorf("budget %d: a rank's plan updates inside backward", budget)
		}
	}
	if _, err := plan.Make(plan.Options{Model: demo.PlanModel(cfg), Budget: 1 << 30, Profile: prof, Ranks: 1, Shard: 1}); err == nil {
		t.Error("ZeRO-1 on one rank: no error")
	}
}
