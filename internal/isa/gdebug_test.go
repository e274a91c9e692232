package isa

import "testing"

func TestGODEBUG(t *testing.T) {
	for _, c := range []struct {
		godebug string
		want    [3]bool // a, b, c after; all three start true but c, false
	}{
		{"", [3]bool{true, true, false}},
		{"cpu.a=off", [3]bool{false, true, false}},
		{"gctrace=1,cpu.b=off,x=y", [3]bool{true, false, false}},
		{"cpu.a=off,cpu.a=on", [3]bool{true, true, false}},
		{"cpu.a=on,cpu.a=off", [3]bool{false, true, false}},
		{"cpu.c=on", [3]bool{true, true, false}}, // on cannot add a feature
		{"cpu.all=off", [3]bool{false, false, false}},
		{"cpu.all=off,cpu.b=on", [3]bool{false, true, false}},
		{"cpu.a=maybe,cpu.b,cpu.unknown=off,cpu.=off", [3]bool{true, true, false}},
	} {
		got := [3]bool{true, true, false}
		disable(c.godebug, []feature{{"a", &got[0]}, {"b", &got[1]}, {"c", &got[2]}})
		if got != c.want {
			t.Errorf("GODEBUG=%q: %v, want %v", c.godebug, got, c.want)
		}
	}
}

// What detect finds hangs together: the AVX-512 extensions need AVX512F
// (GODEBUG=cpu.avx512f=off may later clear AVX512F alone, as it does in
// x/sys/cpu), and the levels never exceed the facts.
func TestFactsConsistent(t *testing.T) {
	fs := features()
	saved := make([]bool, len(fs))
	for i, f := range fs {
		saved[i] = *f.has
	}
	defer func() {
		for i, f := range fs {
			*f.has = saved[i]
		}
	}()
	detect()
	if hasAVX512BW && !HasAVX512F || hasAVX512BF16 && !HasAVX512F {
		t.Error("an AVX-512 extension without AVX512F")
	}
	if AVX2 && !HasAVX2 || AVX512 && !HasAVX512F || AVX512BF16 && !AVX512 {
		t.Error("a level above the hardware's")
	}
}
