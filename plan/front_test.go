package plan

import (
	"math/rand/v2"
	"testing"
)

// frontProblem is a model of units that each save a few differently sized
// tensors, so that many partial plans are undominated, under a budget of
// share of their bytes.
func frontProblem(units, storages int, share float64) *problem {
	rng := rand.New(rand.NewPCG(3, 5))
	pr := &problem{p: testProfile, base: 1}
	var held int64
	for range units {
		pu := punit{hasStorages: true, hasBwd: true, fwdSeconds: 1e-4, window: 1e-4}
		for range storages {
			b := int64(1+rng.IntN(1000)) << 10
			pu.storages = append(pu.storages, pstorage{bytes: b, candidate: true})
			held += b
		}
		// The unit's peaks: everything saved so far, and a little more.
		pu.fwdPeak, pu.bwdPeak = held+1<<20, held+2<<20
		pr.units = append(pr.units, pu)
	}
	pr.budget = int64(share * float64(held))
	return pr
}

// Where more partial plans are undominated than maxFront, solve keeps
// them within a granularity (maxFront): its plan still fits the model's
// budgets, and is about as fast as the exact one.
func TestSolveBoundsTheFront(t *testing.T) {
	saved, savedWork := maxFront, maxWork
	defer func() { maxFront, maxWork = saved, savedWork }()
	for _, c := range []struct {
		units, storages int
		share           float64
		host            bool
	}{{10, 5, 0.5, false}, {6, 4, 0.8, true}} {
		maxWork = 1 << 62
		pr := frontProblem(c.units, c.storages, c.share)
		if c.host {
			pr.hostBudget = pr.budget * 7 / 4
			pr.noDisk = true // the exact solve over three tiers takes minutes
		}
		maxFront = 1 << 30
		exact, ok := pr.solve()
		if !ok {
			t.Fatalf("%+v: exact solve found nothing", c)
		}
		maxFront, maxWork = 16, 16*16
		bounded, ok := pr.solve()
		if !ok {
			t.Fatalf("%+v: bounded solve found nothing", c)
		}
		if pr.grain == 1 {
			t.Fatalf("%+v: the fronts never exceeded 16: the test does not test the bound", c)
		}
		if bounded.peak > pr.budget || c.host && bounded.host > pr.hostBudget {
			t.Errorf("%+v: bounded plan peaks at %d (budget %d), host %d (budget %d)", c, bounded.peak, pr.budget, bounded.host, pr.hostBudget)
		}
		if bounded.seconds > exact.seconds*1.05 {
			t.Errorf("%+v: bounded plan %.6g s, exact %.6g s", c, bounded.seconds, exact.seconds)
		}
		t.Logf("%+v: exact %.6g s, bounded %.6g s (grain %d B)", c, exact.seconds, bounded.seconds, pr.grain)
	}
}

// However hard the bounds cut (a front of 2 partial plans, a few options
// a unit), solve never loses the witnesses: at the budget of the smallest
// of them it finds a plan (the front never empties; it once did, and
// keepRoomiest indexed the empty front), one byte less it reports
// nothing, and no plan it returns is over its budget or slower than a
// witness that fits.
func TestSolveKeepsTheWitnesses(t *testing.T) {
	savedFront, savedWork := maxFront, maxWork
	defer func() { maxFront, maxWork = savedFront, savedWork }()
	maxFront, maxWork = 2, 32
	for _, c := range []struct {
		units, storages int
		host            bool
	}{{8, 6, false}, {5, 5, true}, {1, 9, false}, {12, 3, true}} {
		pr := frontProblem(c.units, c.storages, 1)
		pr.units[0].segment = true
		pr.units[len(pr.units)/2].segment, pr.units[len(pr.units)/2].recSeconds = true, 1e-3
		smallest := int64(-1)
		for _, w := range pr.witnesses() {
			sol, _ := pr.evaluate(w)
			if smallest < 0 || sol.peak < smallest {
				smallest = sol.peak
			}
		}
		if c.host {
			pr.hostBudget = 1 << 40
		}
		for _, budget := range []int64{smallest, smallest - 1, smallest + smallest/3} {
			pr.budget = budget
			sol, ok := pr.solve()
			switch {
			case budget < smallest:
				// Below every witness a plan may still exist; if one is
				// found it must fit.
				if ok && sol.peak > budget {
					t.Errorf("%+v: budget %d: a plan peaking at %d", c, budget, sol.peak)
				}
			case !ok:
				t.Errorf("%+v: budget %d (the smallest witness peaks at %d): nothing found", c, budget, smallest)
			case sol.peak > budget:
				t.Errorf("%+v: budget %d: a plan peaking at %d", c, budget, sol.peak)
			default:
				for _, w := range pr.witnesses() {
					if ws, fits := pr.evaluate(w); fits && ws.seconds < sol.seconds {
						t.Errorf("%+v: budget %d: plan %.6g s slower than a witness that fits (%.6g s)", c, budget, sol.seconds, ws.seconds)
					}
				}
			}
		}
	}
}
