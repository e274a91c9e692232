//go:build gc

package isa

import "testing"

func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"21.3.0", true}, {"21.2.9", false}, {"21.4.0", true}, {"22.0.0", true},
		{"20.9.9", false}, {"21.3", false}, {"21.3.0.1", false}, {"21.3.x", false}, {"", false},
	} {
		if got := releaseAtLeast(c.release, 21, 3, 0); got != c.want {
			t.Errorf("releaseAtLeast(%q) = %v", c.release, got)
		}
	}
}
