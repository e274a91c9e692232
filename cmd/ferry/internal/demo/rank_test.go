package demo_test

import (
	"testing"

	"ferry"
	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/offload"
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

// ZeRO-3's rank on the meta device, through the trainer's dist code: its
// optimizer state is its shards' (AdamW: 8 bytes an element of rank 0's
// shards, each a multiple of 256 elements of every parameter, to the
// allocator's rounding of blocks),
// and its parameters at the step's peak are its shards plus the
// parameters gathered around the ops under way. The figures are logged
// (go test -v -run TestFullShardMemoryOnMeta); GPT-2 124M's are skipped
// with -short.
func TestFullShardMemoryOnMeta(t *testing.T) {
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
		t.Logf("%s, one process: peak %s; parameters %s, AdamW state %s, gradient category %s", tc.name, device.FormatBytes(whole),
			device.FormatBytes(wc[device.Parameter]), device.FormatBytes(wc[device.OptimizerState]), device.FormatBytes(wc[device.Gradient]))
		// The parameters' sizes, each once, and the largest.
		sz := cfg.Sizes
		if sz == nil {
			sz = models.Defaults(cfg.Family, "meta")
		}
		w, err := cfg.Family.Workload(meta.New(device.Options{}, nil), sz, cfg.Seed)
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		var largest, trainable int64
		seen := map[*ferry.Tensor]bool{}
		for _, p := range w.Parameters() {
			if !seen[p] {
				seen[p] = true
				sizes = append(sizes, p.Numel())
				largest = max(largest, p.Bytes())
				trainable += p.Bytes()
			}
		}
		w.Release()
		fixed := wc[device.Parameter] - trainable // tensors of the parameter category that are not trained (a causal mask)
		for _, ranks := range []int{2, 4, 8} {
			peak, c, name := rankPeaks(t, cfg, ranks, 3)
			var shard, wantState int64 // rank 0's elements; AdamW's two moments of them, as allocated
			for _, n := range sizes {
				per := ((n+ranks-1)/ranks + 255) / 256 * 256
				shard += int64(min(per, n))
				wantState += 2 * device.RoundSize(4*int64(min(per, n)))
			}
			state, params, grad := c[device.OptimizerState], c[device.Parameter], c[device.Gradient]
			gathered := params - fixed - 4*shard
			t.Logf("  %s: peak %s (%.1f%% of one process); parameters %s = shards %s (1/%.2f) + gathered %s (%.2f × the largest); AdamW state %s (1/%.2f); gradient category %s",
				name, device.FormatBytes(peak), 100*float64(peak)/float64(whole), device.FormatBytes(params), device.FormatBytes(4*shard),
				float64(trainable)/float64(4*shard), device.FormatBytes(gathered), float64(gathered)/float64(largest),
				device.FormatBytes(state), float64(wc[device.OptimizerState])/float64(state), device.FormatBytes(grad))
			// At least the shards' moments; GPT-2's peak of the category
			// is up to 1.3% above them (6 MiB at 2 ranks), not yet
			// explained.
			if state < wantState || state > wantState+wantState/50 {
				t.Errorf("%s: %d bytes of AdamW state, want two moments of rank 0's %d shard elements, %d as allocated", name, state, shard, wantState)
			}
			if gathered < 0 || gathered > 2*largest {
				t.Errorf("%s: %d parameter bytes beyond the shards, want at most twice the largest parameter's %d", name, gathered, largest)
			}
			if peak >= whole {
				t.Errorf("%s: peak %d, one process %d", name, peak, whole)
			}
		}
	}
}

// Every rank's plan replays on meta to the byte: at each ZeRO stage, on 2
// and 4 ranks, under a budget that makes the plan offload or recompute,
// the written policy replayed on the rank's step (plan.Replay) peaks at
// the predicted bytes and takes the predicted seconds.
func TestRankPlansReplay(t *testing.T) {
	cfg := demo.DefaultConfig("meta")
	cfg.Family, _ = models.Lookup("gpt")
	cfg.Sizes = models.Sizes{"vocab": 512, "seq": 64, "layers": 4, "heads": 4, "embd": 128, "batch": 4}
	prof, err := plan.LoadProfile("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		optimizer string
		params    []string
	}
	for _, ranks := range []int{2, 4} {
		for shard := 0; shard <= 3; shard++ {
			states := []state{{"device", nil}}
			if shard == 3 {
				// ZeRO-3 with its state on the host (each shard stepping
				// beside the device, if the planner chooses), and its
				// shards in host memory too.
				states = append(states, state{"host", nil}, state{"host", []string{"*"}})
			}
			for _, st := range states {
				c := cfg
				c.OptimizerState, c.ParamsOnHost = st.optimizer, st.params
				opts := plan.Options{Model: demo.PlanModel(c), Budget: 1 << 40, Profile: prof, Ranks: ranks, Shard: shard,
					OptimizerState: st.optimizer, ParamsOnHost: st.params}
				free, err := plan.Make(opts)
				if err != nil {
					t.Fatal(err)
				}
				opts.Budget = free.Unlimited.PeakBytes * 3 / 4
				p, err := plan.Make(opts)
				if err != nil {
					t.Fatal(err)
				}
				if !p.Fits || p.KeepsEverything {
					t.Fatalf("%d ranks, ZeRO-%d, %v at %d bytes: fits %v, keeps everything %v", ranks, shard, st, opts.Budget, p.Fits, p.KeepsEverything)
				}
				m, err := demo.PlanModel(c).(plan.RankModel).ForRanks(ranks, shard)
				if err != nil {
					t.Fatal(err)
				}
				out, err := plan.Replay(m, prof, p.Policy(), offload.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d ranks, ZeRO-%d, state %v: peak %d bytes, step %.6f s, optimizer in backward %v", ranks, shard, st, p.Predicted.PeakBytes, p.Predicted.StepSeconds, p.OptimizerInBackward)
				if out.PeakBytes != p.Predicted.PeakBytes || out.StepSeconds != p.Predicted.StepSeconds {
					t.Errorf("%d ranks, ZeRO-%d, %v: the policy replays at %d bytes, %v s; predicted %d, %v s", ranks, shard, st, out.PeakBytes, out.StepSeconds, p.Predicted.PeakBytes, p.Predicted.StepSeconds)
				}
			}
		}
	}
}
