package plots

import (
	"slices"
	"testing"
)

func labels(t ticks, lo, hi float64) []string {
	var ls []string
	for _, tk := range t.Ticks(lo, hi) {
		if tk.Label != "" {
			ls = append(ls, tk.Label)
		}
	}
	return ls
}

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		t      ticks
		lo, hi float64
		want   []string
	}{
		{ticks{integer: true}, 0, 100000, []string{"0", "20000", "40000", "60000", "80000", "100000"}},
		{ticks{integer: true}, 0.7, 8.3, []string{"1", "2", "3", "4", "5", "6", "7", "8"}},
		{ticks{integer: true}, 0, 3, []string{"0", "1", "2", "3"}},
		{ticks{}, 0, 5.6, []string{"0", "1", "2", "3", "4", "5"}},
		{ticks{}, 1.485, 2.015, []string{"1.5", "1.6", "1.7", "1.8", "1.9", "2.0"}},
		{ticks{}, 0, 0.25, []string{"0.00", "0.05", "0.10", "0.15", "0.20", "0.25"}},
		{ticks{}, -2, 2, []string{"-2", "-1", "0", "1", "2"}},
	} {
		if got := labels(c.t, c.lo, c.hi); !slices.Equal(got, c.want) {
			t.Errorf("%+v on [%v, %v]: %q, want %q", c.t, c.lo, c.hi, got, c.want)
		}
	}
	if got := labels(ticks{}, 3, 3); len(got) != 1 {
		t.Errorf("an empty range: %q, want one label", got)
	}
}
