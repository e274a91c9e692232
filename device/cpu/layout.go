package cpu

// layout is the iteration space of an elementwise kernel: the output's shape
// with the strides of each operand (operand 0 is the output), after merging
// dimensions that are contiguous for every operand and dropping size-1
// dimensions. Merging makes the common cases (everything contiguous, a bias
// broadcast over rows) one or two long loops.
type layout struct {
	shape   []int
	strides [][]int // [operand][dim]
}

func collapse(shape []int, strides ...[]int) layout {
	l := layout{strides: make([][]int, len(strides))}
	for d := range shape {
		if shape[d] == 1 {
			continue
		}
		n := len(l.shape)
		if n > 0 {
			merge := true
			for i, st := range strides {
				// Dimension n-1 (kept) can absorb d when stepping over all of d
				// equals one step of n-1.
				if l.strides[i][n-1] != st[d]*shape[d] {
					merge = false
					break
				}
			}
			if merge {
				l.shape[n-1] *= shape[d]
				for i, st := range strides {
					l.strides[i][n-1] = st[d]
				}
				continue
			}
		}
		l.shape = append(l.shape, shape[d])
		for i, st := range strides {
			l.strides[i] = append(l.strides[i], st[d])
		}
	}
	if len(l.shape) == 0 { // a scalar
		l.shape = []int{1}
		for i := range strides {
			l.strides[i] = []int{1}
		}
	}
	return l
}

// rows calls fn for each innermost row in the flat output range [lo, hi):
// offs are each operand's element offsets of the row's first element, n its
// length; steps are the operands' strides along the row.
func (l layout) rows(lo, hi int, fn func(offs []int, n int)) {
	rank := len(l.shape)
	inner := l.shape[rank-1]
	nops := len(l.strides)
	idx := make([]int, rank)
	offs := make([]int, nops)
	// Position at flat index lo.
	rem := lo
	for d := rank - 1; d >= 0; d-- {
		idx[d] = rem % l.shape[d]
		rem /= l.shape[d]
	}
	for i := 0; i < nops; i++ {
		for d := 0; d < rank; d++ {
			offs[i] += idx[d] * l.strides[i][d]
		}
	}
	for pos := lo; pos < hi; {
		n := min(inner-idx[rank-1], hi-pos)
		fn(offs, n)
		pos += n
		// Advance: finish the row, then carry.
		for i := 0; i < nops; i++ {
			offs[i] += n * l.strides[i][rank-1]
		}
		idx[rank-1] += n
		for d := rank - 1; d > 0 && idx[d] == l.shape[d]; d-- {
			idx[d] = 0
			idx[d-1]++
			for i := 0; i < nops; i++ {
				offs[i] += l.strides[i][d-1] - l.shape[d]*l.strides[i][d]
			}
		}
	}
}
