package train

import (
	"math"
	"testing"
)

func TestQuantileInterpolatesBetweenSortedValues(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3} // sorted: 1 2 3 4 5
	for _, c := range []struct{ q, want float64 }{
		{0, 1}, {0.1, 1.4}, {0.25, 2}, {0.5, 3}, {0.9, 4.6}, {1, 5},
	} {
		if got := Quantile(xs, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", xs, c.q, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Error("Quantile sorted its argument in place")
	}
	if got, want := Quantile([]float64{4, 1, 3, 2}, 0.5), Median([]float64{4, 1, 3, 2}); got != want {
		t.Errorf("Quantile(·, 0.5) = %v, Median = %v", got, want)
	}
	for _, q := range []float64{-0.1, 1.1, math.NaN()} {
		if got := Quantile(xs, q); !math.IsNaN(got) {
			t.Errorf("Quantile(xs, %v) = %v, want NaN", q, got)
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile(nil) = %v, want NaN", got)
	}
	if got := Quantile([]float64{7}, 0.1); got != 7 {
		t.Errorf("Quantile of one value = %v, want 7", got)
	}
}
