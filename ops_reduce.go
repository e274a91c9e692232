package ferry

import "ferry/device"

// Sums and means over axes.

// Sum returns the sum of x over axes (all of them when none are given),
// dropping the summed axes.
func Sum(x *Tensor, axes ...int) *Tensor { return reduce("sum", x, axes, false, false) }

// SumKeepDim is Sum keeping the summed axes with size 1.
func SumKeepDim(x *Tensor, axes ...int) *Tensor { return reduce("sum", x, axes, true, false) }

// Mean returns the mean of x over axes (all when none are given), dropping
// them.
func Mean(x *Tensor, axes ...int) *Tensor { return reduce("mean", x, axes, false, true) }

// MeanKeepDim is Mean keeping the averaged axes with size 1.
func MeanKeepDim(x *Tensor, axes ...int) *Tensor { return reduce("mean", x, axes, true, true) }

func reduce(op string, x *Tensor, axes []int, keep, mean bool) *Tensor {
	if isBF16(x) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return reduce(op, w[0], axes, keep, mean) }, x)
	}
	tp := tapeOf(op, x)
	floats32(op, x)
	summed := make([]bool, x.Rank())
	if len(axes) == 0 {
		for i := range summed {
			summed[i] = true
		}
	}
	for _, a := range axes {
		a = x.axis(op, a)
		if summed[a] {
			panicf(op, "axis %d given twice", a)
		}
		summed[a] = true
	}
	keepShape := make([]int, x.Rank()) // x's rank, 1 on summed axes
	var outShape []int
	count := 1
	for i, d := range x.shape {
		if summed[i] {
			keepShape[i] = 1
			count *= d
			if keep {
				outShape = append(outShape, 1)
			}
		} else {
			keepShape[i] = d
			outShape = append(outShape, d)
		}
	}
	alpha := float32(1)
	if mean {
		alpha = 1 / float32(count)
	}
	out := newOutput(tp, x.st.dev, outShape)
	switch {
	case out.st.block == nil:
	case x.st.block == nil: // nothing to add: 0, and a mean 0·(1/0) = NaN, as PyTorch
		check(op, kernels(x).Fill(out.view(), 0*alpha))
	default:
		v := out.view()
		v.Shape, v.Strides = keepShape, device.Contiguous(keepShape)
		check(op, kernels(x).Sum(v, x.view(), alpha))
	}
	inShape := x.shape
	record(tp, op, out, []*Tensor{x}, nil, func(bk *backward) {
		// Spread the gradient back over the summed axes.
		g := bk.Grad()
		gv := g.view()
		gv.Shape = keepShape
		gv.Strides = make([]int, len(keepShape))
		gs := device.Contiguous(keepShape)
		if g.IsContiguous() {
			for i := range keepShape {
				if keepShape[i] != 1 {
					gv.Strides[i] = gs[i]
				}
			}
		} else {
			// g has outShape; map its strides onto the kept axes.
			j := 0
			for i := range keepShape {
				if !summed[i] || keep {
					if keepShape[i] != 1 {
						gv.Strides[i] = g.strides[j]
					}
					j++
				}
			}
		}
		gv.Shape = inShape // summed axes have stride 0: a broadcast
		dx := newOutput(bk.tape, g.st.dev, inShape)
		if dx.st.block != nil {
			check(op+"_backward", kernels(g).Unary(device.Scale, dx.view(), gv, alpha))
		}
		bk.Accumulate(0, dx)
	})
	return out
}
