package demo

import (
	"testing"

	"ferry/device/meta"
)

// TestFitRateAtItsBounds checks fitRate's answer where no rate in range
// predicts the step: a step faster than any prediction lands at the top
// (fitSteps then takes elementwise work as free and says so), one slower
// than any at the bottom (an error there).
func TestFitRateAtItsBounds(t *testing.T) {
	p := &meta.Profile{}
	slow := func(meta.Profile) (float64, error) { return 1, nil }
	if r, err := fitRate(p, 0.5, 1e6, 1e15, slow); err != nil || r < 1e15/2 {
		t.Errorf("a step measured faster than predicted at every rate: %g, %v; want near the top", r, err)
	}
	if r, err := fitRate(p, 2, 1e6, 1e15, slow); err != nil || r > 2e6 {
		t.Errorf("a step measured slower than predicted at every rate: %g, %v; want near the bottom", r, err)
	}
	byRate := func(q meta.Profile) (float64, error) { return 1e9 / q.MemoryBytesPerSec, nil }
	if r, _ := fitRate(p, 0.25, 1e6, 1e15, byRate); r < 3.99e9 || r > 4.01e9 {
		t.Errorf("fitted %g B/s; want 4e9", r)
	}
}

// A fit's timed runs take about the seconds asked for, within bounds.
func TestFitStepsFor(t *testing.T) {
	for _, c := range []struct {
		seconds, step float64
		want          int
	}{{1, 0.015, 66}, {1, 0.075, 13}, {1, 0, 3}, {1, 10, 3}, {100, 0.001, 500}, {1, -1, 3}} {
		if got := fitStepsFor(c.seconds, c.step); got != c.want {
			t.Errorf("fitStepsFor(%v, %v) = %d, want %d", c.seconds, c.step, got, c.want)
		}
	}
}
