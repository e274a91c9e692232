package plan

import (
	"math"
	"testing"

	"ferry/device/meta"
	"ferry/offload"
)

// A slow host link and disk make placements matter at small sizes.
var testProfile = &meta.Profile{Name: "test", MatmulFLOPS: 2e9, MemoryBytesPerSec: 2e9, KernelSeconds: 1e-6,
	H2DBytesPerSec: 2e8, D2HBytesPerSec: 2e8, DiskWriteBytesPerSec: 5e7, DiskReadBytesPerSec: 8e7}

// brute evaluates every placement of every layer, with the optimizer after
// and inside backward, and returns the fastest that fits (nil if none).
func brute(t *testing.T, opts Options) *candidate {
	pl := &planner{opts: opts, seen: map[string]*candidate{}, diskDir: t.TempDir()}
	L := opts.Model.Layers
	choices := []offload.Placement{offload.Keep, offload.Host, offload.Disk}
	var best *candidate
	n := int(math.Pow(3, float64(L)))
	for code := 0; code < n; code++ {
		ws := make([]offload.Placement, L)
		c := code
		for i := range ws {
			ws[i] = choices[c%3]
			c /= 3
		}
		for _, ib := range []bool{false, true} {
			cand, err := pl.eval(ws, ib)
			if err != nil {
				t.Fatal(err)
			}
			if cand.feasible && (best == nil || cand.outcome.StepSeconds < best.outcome.StepSeconds) {
				best = cand
			}
		}
	}
	return best
}

func TestPlannerMatchesBruteForce(t *testing.T) {
	m := Model{Layers: 3, Width: 64, Batch: 64}
	// Find the range of peaks: everything kept vs everything moved.
	pl := &planner{opts: Options{Model: m, Profile: testProfile, Budget: 1 << 40}, seen: map[string]*candidate{}, diskDir: t.TempDir()}
	hi, err := pl.eval(pl.uniform(offload.Keep), false)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := pl.eval(pl.uniform(offload.Host), true)
	if err != nil {
		t.Fatal(err)
	}
	act := int64(m.Batch * m.Width * 4)
	for _, hostBudget := range []int64{0, 2 * act} {
		for budget := lo.outcome.PeakBytes - act; budget <= hi.outcome.PeakBytes+act; budget += act / 2 {
			opts := Options{Model: m, Profile: testProfile, Budget: budget, HostBudget: hostBudget}
			want := brute(t, opts)
			got, err := Make(opts)
			if err != nil {
				t.Fatal(err)
			}
			if want == nil {
				if got.Fits {
					t.Errorf("budget %d host %d: planner found a plan (peak %d) where brute force found none", budget, hostBudget, got.Predicted.PeakBytes)
				}
				continue
			}
			if !got.Fits {
				t.Errorf("budget %d host %d: planner found nothing; brute force found %s at %.6g s", budget, hostBudget, want.key(), want.outcome.StepSeconds)
				continue
			}
			if got.Predicted.PeakBytes > budget || hostBudget > 0 && got.Predicted.HostPeakBytes > hostBudget {
				t.Errorf("budget %d host %d: plan peaks at %d (host %d)", budget, hostBudget, got.Predicted.PeakBytes, got.Predicted.HostPeakBytes)
			}
			if d := got.Predicted.StepSeconds - want.outcome.StepSeconds; d > 1e-12*want.outcome.StepSeconds {
				t.Errorf("budget %d host %d: planner %.9g s, brute force %.9g s (%s)", budget, hostBudget, got.Predicted.StepSeconds, want.outcome.StepSeconds, want.key())
			}
		}
	}
}

// Replaying the plan's policy gives the predicted peak, within the budget.
func TestPlanReplaysWithinBudget(t *testing.T) {
	m := Model{Layers: 6, Width: 128, Batch: 64}
	opts := Options{Model: m, Profile: testProfile}
	pl := &planner{opts: Options{Model: m, Profile: testProfile, Budget: 1 << 40}, seen: map[string]*candidate{}, diskDir: t.TempDir()}
	hi, _ := pl.eval(pl.uniform(offload.Keep), false)
	lo, _ := pl.eval(pl.uniform(offload.Host), true)
	opts.Budget = (hi.outcome.PeakBytes + lo.outcome.PeakBytes) / 2
	p, err := Make(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Fits {
		t.Fatalf("nothing fits %d between %d and %d: %s", opts.Budget, lo.outcome.PeakBytes, hi.outcome.PeakBytes, p.Why)
	}
	path := t.TempDir() + "/plan.json"
	if err := p.Policy().Save(path); err != nil {
		t.Fatal(err)
	}
	pol, err := offload.LoadPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Replay(m, testProfile, pol, offload.DefaultConfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out.PeakBytes != p.Predicted.PeakBytes || out.PeakBytes > opts.Budget {
		t.Errorf("replayed peak %d, predicted %d, budget %d", out.PeakBytes, p.Predicted.PeakBytes, opts.Budget)
	}
}

// Below the parameters plus one layer's working set nothing fits, and the
// planner says why and what would.
func TestNothingFits(t *testing.T) {
	m := Model{Layers: 4, Width: 256, Batch: 128}
	params := int64(m.Layers) * int64(m.Width*m.Width+m.Width) * 4
	p, err := Make(Options{Model: m, Profile: testProfile, Budget: params + int64(m.Batch*m.Width*4)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fits || p.ShortBy <= 0 || p.Why == "" || len(p.Suggestions) == 0 {
		t.Fatalf("plan %+v", p)
	}
	t.Log(p.Why, p.Suggestions)
	p, err = Make(Options{Model: m, Profile: testProfile, Budget: params / 2})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fits || p.Why == "" {
		t.Fatalf("plan %+v", p)
	}
	t.Log(p.Why)
}
