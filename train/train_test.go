package train

import (
	"math"
	"testing"
)

func TestCosine(t *testing.T) {
	c := Cosine{Peak: 1, Min: 0.1, Warmup: 10, Total: 110}
	for _, tc := range []struct {
		step int
		want float64
	}{{1, 0.1}, {10, 1}, {60, 0.55}, {110, 0.1}, {500, 0.1}} {
		if got := c.At(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	for _, bad := range []Cosine{{Peak: 0, Total: 1}, {Peak: math.NaN(), Total: 1}, {Peak: 1, Min: 2, Total: 1}, {Peak: 1, Total: 0}, {Peak: 1, Warmup: -1, Total: 5}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}
