package cuda

import "testing"

// fits32 must not let a negative stride cancel a large one, and must not
// overflow while summing.
func TestFits32RejectsWhatCouldOverflow(t *testing.T) {
	big := &strided{rank: 2, shape: [maxRank]int64{3, 3}}
	big.strides[0] = [maxRank]int64{1 << 31, -(1 << 31)}
	if big.fits32(9, 1) {
		t.Error("strides ±2^31 passed as 32-bit safe")
	}
	huge := &strided{rank: 1, shape: [maxRank]int64{1 << 20}}
	huge.strides[0] = [maxRank]int64{1 << 50}
	if huge.fits32(1<<20, 1) {
		t.Error("a stride of 2^50 passed as 32-bit safe")
	}
	ok := &strided{rank: 2, shape: [maxRank]int64{4, 5}}
	ok.strides[0] = [maxRank]int64{5, 1}
	if !ok.fits32(20, 1) {
		t.Error("a small contiguous layout was refused")
	}
}
