package demo

import (
	"testing"

	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/offload"
	"ferry/plan"
)

var slowLink = &meta.Profile{Name: "slow", MatmulFLOPS: 2e9, MemoryBytesPerSec: 2e9, KernelSeconds: 1e-6,
	H2DBytesPerSec: 2e8, D2HBytesPerSec: 2e8, DiskWriteBytesPerSec: 5e7, DiskReadBytesPerSec: 8e7}

func smallGPT() Config {
	cfg := DefaultConfig("cpu")
	cfg.Family, _ = models.Lookup("gpt")
	cfg.Sizes, cfg.LR = models.Sizes{"vocab": 65, "seq": 32, "layers": 3, "heads": 2, "embd": 32, "dropout": 0.1, "batch": 2}, 3e-4
	return cfg
}

func smallMLP() Config {
	cfg := DefaultConfig("cpu")
	cfg.Sizes = models.Sizes{"layers": 6, "width": 64, "batch": 512}
	return cfg
}

// mixedPlan plans cfg at budgets between the smallest and the unlimited
// peak and returns the first plan that uses at least two kinds of
// placement besides keep, or else the one using most kinds.
func mixedPlan(t *testing.T, cfg Config) *plan.Plan {
	m := PlanModel(cfg)
	full, err := plan.Make(plan.Options{Model: m, Profile: slowLink, Budget: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	lo := min(full.AllOffload.PeakBytes, full.AllRecompute.PeakBytes)
	var best *plan.Plan
	kinds := func(p *plan.Plan) int {
		n := 0
		for _, c := range []int{p.Counts.Host, p.Counts.Disk, p.Counts.Recompute} {
			if c > 0 {
				n++
			}
		}
		return n
	}
	for i := 1; i < 8 && (best == nil || kinds(best) < 2); i += 2 {
		budget := lo + (full.Unlimited.PeakBytes-lo)*int64(i)/8
		for _, host := range []int64{0, full.Unlimited.PeakBytes / 64} {
			p, err := plan.Make(plan.Options{Model: m, Profile: slowLink, Budget: budget, HostBudget: host})
			if err != nil {
				t.Fatal(err)
			}
			if p.Fits && (best == nil || kinds(p) > kinds(best)) {
				best = p
			}
		}
	}
	if best == nil || kinds(best) == 0 {
		t.Fatalf("no plan moves or recomputes anything")
	}
	t.Logf("plan: %+v, optimizer in backward %v", best.Counts, best.OptimizerInBackward)
	return best
}

func runPolicy(t *testing.T, cfg Config, p *plan.Plan, dev string, open func(string, device.Options) (device.Device, error)) *Result {
	pol := p.Policy()
	if err := pol.Validate(p.ModelInfo(), true); err != nil {
		t.Fatal(err)
	}
	cfg.Device, cfg.Open, cfg.Steps = dev, open, 1
	cfg.Modes = []string{None, Policy}
	cfg.Policy, cfg.Segments, cfg.OptimizerInBackward = pol.Place, pol.SegmentHooks(), pol.OptimizerInBackward
	cfg.DiskDir = t.TempDir()
	res, err := Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A planned mixed policy changes no gradient, bit for bit, on the CPU,
// dropout included.
func TestPlannedPolicyGradientsBitwise(t *testing.T) {
	if testing.Short() {
		t.Skip("short: plans and trains two models per placement")
	}
	for name, cfg := range map[string]Config{"mlp": smallMLP(), "gpt": smallGPT()} {
		t.Run(name, func(t *testing.T) {
			p := mixedPlan(t, cfg)
			res := runPolicy(t, cfg, p, "cpu", nil)
			for _, r := range res.Runs {
				if r.GradsEqualNone == nil || !*r.GradsEqualNone {
					t.Errorf("mode %s: gradients differ from none's", r.Mode)
				}
			}
		})
	}
}

// Replaying a plan with `ferry demo --device meta --policy` peaks at the
// predicted bytes, within the budget.
func TestPlanReplaysOnMetaAsPredicted(t *testing.T) {
	if testing.Short() {
		t.Skip("short: searches plans for a GPT")
	}
	cfg := smallGPT()
	p := mixedPlan(t, cfg)
	res := runPolicy(t, cfg, p, "meta", func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, slowLink), nil })
	got := res.Runs[1]
	if got.PeakStepBytes != p.Predicted.PeakBytes || got.PeakStepBytes > p.Budget {
		t.Errorf("demo replay peaks at %d; predicted %d, budget %d", got.PeakStepBytes, p.Predicted.PeakBytes, p.Budget)
	}
}

// A policy naming what the model does not save is refused, every problem
// listed.
func TestPolicyValidatedAgainstModel(t *testing.T) {
	info, err := plan.Record(PlanModel(smallGPT()))
	if err != nil {
		t.Fatal(err)
	}
	pol := &offload.Policy{Version: 2, Tensors: []offload.TensorPlacement{
		{Module: "transformer.h.9.attn", Slot: 0, Placement: offload.Host},
		{Module: "transformer.h.0.attn", Slot: 99, Placement: offload.Host},
		{Module: "transformer.h.0.attn", Slot: 0, Shape: []int{1, 2, 3}, Placement: offload.Disk},
	}, Recompute: []string{"transformer.h.7"}}
	err = pol.Validate(info, false)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"saves nothing in a module \"transformer.h.9.attn\"", "slot out of range", "shape [1 2 3]", "no disk directory", "no segment \"transformer.h.7\""} {
		if !contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
