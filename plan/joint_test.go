package plan

import "testing"

// settle takes the fastest plan that still fits after the longer replay,
// with that replay's peaks; a plan whose longer replay overshoots is
// marked as not fitting, and nil comes back where none still fits.
func TestSettleTakesTheFastestThatStillFits(t *testing.T) {
	const budget = 1000
	replayed := map[string]int{}
	plan := func(name string, step float64, fits bool, longerPeak int64) *Plan {
		p := &Plan{Model: name, Budget: budget, Fits: fits}
		p.Predicted.StepSeconds, p.Predicted.PeakBytes = step, 900
		p.settle = func(steps int) (Outcome, bool, error) {
			if steps != settleSteps {
				t.Errorf("%s replayed for %d steps, want %d", name, steps, settleSteps)
			}
			replayed[name]++
			out := Outcome{PeakBytes: longerPeak}
			if longerPeak > budget {
				return out, false, nil
			}
			p.Predicted.PeakBytes = longerPeak
			return out, true, nil
		}
		return p
	}
	slowest := plan("slowest", 3, true, 950)
	overshoots := plan("overshoots", 1, true, 1001)
	tooBig := plan("does not fit", 0.5, false, 500)
	middle := plan("middle", 2, true, 920)
	plans := []*Plan{slowest, overshoots, tooBig, middle}
	tried := make([]Tried, len(plans))
	for i, p := range plans {
		tried[i] = Tried{Fits: p.Fits, PeakBytes: p.Predicted.PeakBytes}
	}
	got, err := settle(plans, tried)
	if err != nil {
		t.Fatal(err)
	}
	if got != middle || middle.Predicted.PeakBytes != 920 || tried[3].PeakBytes != 920 {
		t.Fatalf("settled on %v (peak %d, tried %d), want the middle plan at its longer replay's 920 bytes", got.Model, got.Predicted.PeakBytes, tried[3].PeakBytes)
	}
	if overshoots.Fits || tried[1].Fits || overshoots.ShortBy != 1 || tried[1].PeakBytes != 1001 {
		t.Errorf("the plan whose longer replay overshoots: fits %v (tried %v), short by %d, tried peak %d",
			overshoots.Fits, tried[1].Fits, overshoots.ShortBy, tried[1].PeakBytes)
	}
	if replayed["does not fit"] != 0 || replayed["slowest"] != 0 {
		t.Errorf("replayed %v: want neither the plan that does not fit nor one slower than the one chosen", replayed)
	}

	overshoots.Fits = true
	if got, _ := settle([]*Plan{overshoots}, make([]Tried, 1)); got != nil {
		t.Errorf("settled on %v where the only plan overshoots, want none", got.Model)
	}
}
