package cuda

import (
	"fmt"

	"ferry/device"
)

// maxRank is FERRY_MAX_RANK in kernels/common.cuh: the most axes a layout
// may have after collapsing.
const maxRank = 8

// strided is the Go side of the kernels' struct Strided: the collapsed
// iteration space of an elementwise kernel and each operand's strides
// (operand 0 is the output). Encoded as 1 + 8 + 3·8 int64s, in the order
// of the C struct.
type strided struct {
	rank    int
	shape   [maxRank]int64
	strides [3][maxRank]int64
}

func (l *strided) encode() []int64 {
	out := make([]int64, 0, 1+maxRank*4)
	out = append(out, int64(l.rank))
	out = append(out, l.shape[:]...)
	for i := range l.strides {
		out = append(out, l.strides[i][:]...)
	}
	return out
}

// contiguous reports whether every operand walks the space with stride 1:
// one flat loop does.
func (l *strided) contiguous(nops int) bool {
	if l.rank != 1 {
		return false
	}
	for i := 0; i < nops; i++ {
		if l.strides[i][0] != 1 {
			return false
		}
	}
	return true
}

// fits32 reports whether every offset the kernel computes (and the loop
// index, plus a grid's worth of threads) fits comfortably in an int32.
func (l *strided) fits32(n int64, nops int) bool {
	const limit = 1 << 30
	if n >= limit {
		return false
	}
	for i := 0; i < nops; i++ {
		// Each axis's reach on its own: a sum of raw strides could let a
		// negative stride cancel a large one and hide an offset that
		// overflows int32 on the way.
		var reach int64
		for d := 0; d < l.rank; d++ {
			st := l.strides[i][d]
			if st < 0 {
				return false // never made by the tensor layer; no 32-bit shortcut
			}
			if l.shape[d] > 1 && st > (limit-reach)/(l.shape[d]-1) {
				return false
			}
			reach += (l.shape[d] - 1) * st
		}
		if reach >= limit {
			return false
		}
	}
	return true
}

// collapse builds the iteration space of shape for the operands' strides,
// dropping size-1 axes and merging axes that every operand steps over
// contiguously, as device/cpu's layout does. It fails when more than
// maxRank axes remain.
func collapse(shape []int, strides ...[]int) (strided, error) {
	var l strided
	var sh []int64
	st := make([][]int64, len(strides))
	for d := range shape {
		if shape[d] == 1 {
			continue
		}
		if n := len(sh); n > 0 {
			merge := true
			for i, s := range strides {
				if st[i][n-1] != int64(s[d])*int64(shape[d]) {
					merge = false
					break
				}
			}
			if merge {
				sh[n-1] *= int64(shape[d])
				for i, s := range strides {
					st[i][n-1] = int64(s[d])
				}
				continue
			}
		}
		sh = append(sh, int64(shape[d]))
		for i, s := range strides {
			st[i] = append(st[i], int64(s[d]))
		}
	}
	if len(sh) == 0 { // a scalar
		sh = []int64{1}
		for i := range st {
			st[i] = []int64{1}
		}
	}
	if len(sh) > maxRank {
		return l, fmt.Errorf("layout of shape %v has %d axes after merging, more than the CUDA kernels' %d: %w",
			shape, len(sh), maxRank, device.ErrNotSupported)
	}
	l.rank = len(sh)
	copy(l.shape[:], sh)
	for i := range st {
		copy(l.strides[i][:], st[i])
	}
	return l, nil
}

// reduction is the Go side of struct Reduce: the kept axes (outputs, laid
// out row-major in dst) and the reduced axes, each with src's strides.
// Encoded as 1 + 8 + 8 + 1 + 8 + 8 int64s.
type reduction struct {
	outRank   int
	outShape  [maxRank]int64
	outStride [maxRank]int64
	redRank   int
	redShape  [maxRank]int64
	redStride [maxRank]int64
	nOut      int64
	nRed      int64
}

func (r *reduction) encode() []int64 {
	out := make([]int64, 0, 2+maxRank*4)
	out = append(out, int64(r.outRank))
	out = append(out, r.outShape[:]...)
	out = append(out, r.outStride[:]...)
	out = append(out, int64(r.redRank))
	out = append(out, r.redShape[:]...)
	out = append(out, r.redStride[:]...)
	return out
}

// reduceLayout splits src's axes into kept ones (dst's size equals src's)
// and reduced ones (dst's size is 1, src's is not), dropping size-1 axes
// and merging neighbours within each group that src steps over
// contiguously.
func reduceLayout(dst, src, srcStrides []int) (reduction, error) {
	var r reduction
	type axis struct{ n, s int64 }
	var kept, red []axis
	push := func(list []axis, n, s int64) []axis {
		if k := len(list); k > 0 && list[k-1].s == s*n {
			list[k-1].n *= n
			list[k-1].s = s
			return list
		}
		return append(list, axis{n, s})
	}
	for i, n := range src {
		switch {
		case n == 1:
		case dst[i] == 1:
			red = push(red, int64(n), int64(srcStrides[i]))
		default:
			kept = push(kept, int64(n), int64(srcStrides[i]))
		}
	}
	if len(kept) > maxRank || len(red) > maxRank {
		return r, fmt.Errorf("sum of %v into %v: more than %d kept or reduced axes after merging: %w",
			src, dst, maxRank, device.ErrNotSupported)
	}
	r.nOut, r.nRed = 1, 1
	r.outRank, r.redRank = len(kept), len(red)
	for i, a := range kept {
		r.outShape[i], r.outStride[i] = a.n, a.s
		r.nOut *= a.n
	}
	for i, a := range red {
		r.redShape[i], r.redStride[i] = a.n, a.s
		r.nRed *= a.n
	}
	if r.outRank == 0 { // one output: a rank-1 walk of length 1
		r.outRank, r.outShape[0], r.outStride[0] = 1, 1, 0
	}
	return r, nil
}
