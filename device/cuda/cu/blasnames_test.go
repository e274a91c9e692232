package cu

import (
	"slices"
	"testing"
)

// cuBLAS is chosen by the driver's CUDA major: a CUDA 12 driver must not
// try cuBLAS 13, which needs a newer driver.
func TestBLASNamesFollowTheDriver(t *testing.T) {
	for _, c := range []struct {
		driver int
		want   []string
	}{
		{12040, []string{"libcublas.so.12", "libcublas.so.11"}},
		{12020, []string{"libcublas.so.12", "libcublas.so.11"}},
		{11080, []string{"libcublas.so.11"}},
		{13000, []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}},
		{0, []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}},
		{10020, nil},
	} {
		if got := blasNames(c.driver); !slices.Equal(got, c.want) {
			t.Errorf("driver %d: %v, want %v", c.driver, got, c.want)
		}
	}
}
