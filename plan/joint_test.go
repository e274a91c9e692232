package plan

import (
	"fmt"
	"slices"
	"testing"
)

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

// fastestFitting takes visiting variants of one placement as placements
// of their own, and adds the fastest plan of another placement of the
// memory where the n are all variants of one.
func TestFastestFittingTriesVisitingVariantsAndAnotherPlacement(t *testing.T) {
	plan := func(step float64, params []string, visiting, ahead int) *Plan {
		p := &Plan{Fits: true, OptimizerState: "host", Gradients: "host", ParamsOnHost: params, StateAhead: ahead}
		for i := range visiting {
			p.StateVisiting = append(p.StateVisiting, fmt.Sprint("p", i))
		}
		p.Predicted.StepSeconds = step
		return p
	}
	all, some := []string{"*"}, []string{"a", "b"}
	plans := []*Plan{
		plan(0.40, all, 0, 0),  // 0: none visiting
		plan(0.33, all, 1, 0),  // 1: one visiting, brought up for its update
		plan(0.34, all, 37, 4), // 2: 37 visiting, brought up ahead
		plan(0.35, all, 1, 0),  // 3: as 1, slower
		plan(0.37, some, 0, 0), // 4: another placement of the parameters
		{Fits: false},          // 5
	}
	if got, want := fastestFitting(plans, 2, 0), []int{1, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("fastestFitting(2) = %v, want %v", got, want)
	}
	if got, want := fastestFitting(plans, 1, 0), []int{1}; !slices.Equal(got, want) {
		t.Errorf("fastestFitting(1) = %v, want %v", got, want)
	}
	plans[4].Predicted.StepSeconds = 0.335
	if got, want := fastestFitting(plans, 2, 0), []int{1, 4}; !slices.Equal(got, want) {
		t.Errorf("with the other placement second: fastestFitting(2) = %v, want %v", got, want)
	}
}

// visitRest tries shares of the rest visiting, refines around the
// fastest, and tries that count at the other distances ahead only where
// it steps above lookaheadAbove × its busiest resource; where one of
// those is faster, the count is searched again at that distance
// (visitPattern), towards its own fastest.
func TestVisitRestTriesDistancesAheadAtTheFastestCount(t *testing.T) {
	params := make([]Param, 40)
	for i := range params {
		params[i] = Param{Name: fmt.Sprint("p", i), Bytes: 100}
	}
	for _, c := range []struct {
		name      string
		bestRatio float64 // the fastest count's step over its busiest resource
		wantAhead bool
	}{{"far from the bound", 1.3, true}, {"near it", 1.05, false}} {
		t.Run(c.name, func(t *testing.T) {
			base := State{OptimizerState: "host", Gradients: "host", StateOnDevice: names(params[:4])}
			// At visitAhead the step falls towards 9 visiting, then
			// rises; 2 ahead is faster, and fastest at 11.
			stepOf := func(v, ahead int) float64 {
				d := float64(v - 9)
				if ahead == 2 {
					d = float64(v - 11)
					return 1 + d*d/100 - 0.05
				}
				return 1 + d*d/100
			}
			type try struct{ v, ahead int }
			var tries []try
			unpinned := 0
			on := &Plan{Fits: true}
			on.Predicted.StepSeconds, on.Predicted.OverlapRatio = stepOf(0, visitAhead), 1.5
			err := visitRest(on, base, params, func() { unpinned++ }, func(s State) (*Plan, error) {
				if !slices.Equal(s.StateOnDevice, base.StateOnDevice) {
					t.Errorf("state kept %v, want base's %v", s.StateOnDevice, base.StateOnDevice)
				}
				v := len(s.StateVisiting)
				if v > 0 && s.StateVisiting[0] != "p4" {
					t.Errorf("visiting starts at %s, want p4 (after those kept)", s.StateVisiting[0])
				}
				tries = append(tries, try{v, s.StateAhead})
				p := &Plan{Fits: true}
				p.Predicted.StepSeconds = stepOf(v, s.StateAhead)
				p.Predicted.OverlapRatio = 1.5
				if v == 9 {
					p.Predicted.OverlapRatio = c.bestRatio
				}
				return p, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if unpinned != len(tries) {
				t.Errorf("copies in flight unpinned %d times for %d tries", unpinned, len(tries))
			}
			var counts []int
			var ahead []try
			for _, tr := range tries {
				if tr.ahead == visitAhead {
					counts = append(counts, tr.v)
				} else {
					ahead = append(ahead, tr)
				}
			}
			// Shares of the 36 after those kept: 4, 9, 18 (slower: stop);
			// then refined around 9.
			if len(counts) < 3 || !slices.Equal(counts[:3], []int{4, 9, 18}) || !slices.Contains(counts, 13) {
				t.Errorf("counts tried %v, want 4, 9, 18, then refined around 9 (13 among them)", counts)
			}
			var want []try
			if c.wantAhead {
				for _, a := range visitAheadTried {
					want = append(want, try{9, a})
				}
				// 2 ahead was the faster: from 9, one apart (36/32), 10
				// and 11 faster, 12 not, 10 tried.
				want = append(want, try{10, 2}, try{11, 2}, try{12, 2})
			}
			if !slices.Equal(ahead, want) {
				t.Errorf("other distances ahead tried %v, want %v", ahead, want)
			}
		})
	}
}

// visitPattern follows faster counts stride apart, halving the stride
// where neither side is faster, within its tries; where neither count of
// the first stride is faster by visitGain it stops there.
func TestVisitPatternStopsWhereTheCountMattersLittle(t *testing.T) {
	search := func(stepOf func(v int) float64, best, stride, tries int) []int {
		step := map[int]float64{best: stepOf(best)}
		var tried []int
		err := visitPattern(step, best, stride, 100, tries, func(v int) error {
			tried = append(tried, v)
			step[v] = stepOf(v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return tried
	}
	// Fastest at 30, from 20, 8 apart: 28 (faster), 36 (slower), 20
	// known; 4 apart: 32 (faster), 36 known, 28 known; 2 apart: 34
	// (slower), 30 (faster); 1 apart ...
	bowl := func(v int) float64 { d := float64(v - 30); return 1 + d*d/1000 }
	if got := search(bowl, 20, 8, 100); !slices.Contains(got, 30) || slices.Contains(got, 12) {
		t.Errorf("tried %v from 20: want 30 reached, 12 never tried", got)
	}
	if got := search(bowl, 20, 8, 2); len(got) != 2 {
		t.Errorf("tried %v with 2 tries", got)
	}
	// Falling, but by less than visitGain: 28 is taken (faster), and
	// the search stops there.
	flat := func(v int) float64 { return 1 - float64(v)*1e-5 }
	if got, want := search(flat, 20, 8, 100), []int{28}; !slices.Equal(got, want) {
		t.Errorf("tried %v where the count matters little, want %v", got, want)
	}
}
