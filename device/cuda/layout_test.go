package cuda

import "testing"

func TestCollapse(t *testing.T) {
	// Contiguous: one axis.
	l, err := collapse([]int{4, 5, 6}, []int{30, 6, 1}, []int{30, 6, 1})
	if err != nil || l.rank != 1 || l.shape[0] != 120 || !l.contiguous(2) {
		t.Errorf("contiguous: %+v %v", l, err)
	}
	// A bias broadcast over rows: two axes, b's outer stride 0.
	l, _ = collapse([]int{8, 1, 16}, []int{16, 16, 1}, []int{16, 16, 1}, []int{0, 0, 1})
	if l.rank != 2 || l.shape[0] != 8 || l.shape[1] != 16 || l.strides[2][0] != 0 || l.contiguous(3) {
		t.Errorf("broadcast: %+v", l)
	}
	// A scalar.
	l, _ = collapse([]int{}, []int{}, []int{})
	if l.rank != 1 || l.shape[0] != 1 || !l.contiguous(2) {
		t.Errorf("scalar: %+v", l)
	}
	if !l.fits32(1, 2) {
		t.Errorf("scalar does not fit 32 bits")
	}
	big, _ := collapse([]int{1 << 16, 1 << 15}, []int{1, 1 << 16}, []int{1 << 15, 1})
	if big.fits32(1<<31, 2) {
		t.Errorf("2³¹ elements fit 32 bits")
	}
}

func TestReduceLayout(t *testing.T) {
	// [4, 5, 6] summed over axis 1: kept 4 and 6 (strides 30, 1), reduced 5 (stride 6).
	r, err := reduceLayout([]int{4, 1, 6}, []int{4, 5, 6}, []int{30, 6, 1})
	if err != nil || r.outRank != 2 || r.redRank != 1 || r.nOut != 24 || r.nRed != 5 || r.redStride[0] != 6 || r.outStride[1] != 1 {
		t.Errorf("middle axis: %+v %v", r, err)
	}
	// Everything: one output, the reduced axes merged into one.
	r, _ = reduceLayout([]int{1, 1, 1}, []int{4, 5, 6}, []int{30, 6, 1})
	if r.outRank != 1 || r.outShape[0] != 1 || r.redRank != 1 || r.nRed != 120 {
		t.Errorf("whole: %+v", r)
	}
	// A bias gradient: [B, F] over B, kept axis with stride 1.
	r, _ = reduceLayout([]int{1, 7}, []int{9, 7}, []int{7, 1})
	p := planSum(r, 132)
	if p.kernel != "ferry_sum_threads" || p.splits < 1 || p.chunk*p.splits < 9 {
		t.Errorf("bias gradient plan: %+v", p)
	}
	// A long whole-tensor sum is split.
	r, _ = reduceLayout([]int{1}, []int{1 << 22}, []int{1})
	p = planSum(r, 132)
	if p.kernel != "ferry_sum_blocks" || p.splits < 100 || p.chunk*p.splits < 1<<22 || (p.splits-1)*p.chunk >= 1<<22 {
		t.Errorf("whole-tensor plan: %+v", p)
	}
}
