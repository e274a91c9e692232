package cpu

import "ferry/device"

// Fused kernels of a Linear layer followed by a ReLU (device.FusedKernels):
// the bias add and the ReLU in one pass over the product, and, in
// backward, the ReLU's gradient mask and the bias gradient (a column sum)
// in one pass over the output's gradient.

// BiasReLU writes max(src + bias, 0) into dst; src and dst are contiguous
// [rows, cols] (dst may be src), bias a contiguous [cols].
func (k *kernels) BiasReLU(dst, src, bias device.View) error {
	rows, cols := matrixDims(dst)
	if rows*cols == 0 {
		return nil
	}
	d, s, b := floats(dst)[:rows*cols], floats(src)[:rows*cols], floats(bias)[:cols]
	parallelFor(rows, max(1, elementGrain/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			vecAddReLU(d[r*cols:(r+1)*cols], s[r*cols:(r+1)*cols], b)
		}
	})
	return nil
}

// ReLUBackwardSum writes grad where out > 0 or is NaN, else 0, into dst
// (Binary's ReLUGrad) and, unless sum.Block is
// nil, the sum of dst over its rows into sum, blocked and rounded exactly
// as Sum does it (Note [column sums]): grad, out and dst are contiguous
// [rows, cols] (dst may be grad), sum a contiguous [cols].
func (k *kernels) ReLUBackwardSum(dst, sum, grad, out device.View) error {
	rows, cols := matrixDims(dst)
	if rows*cols == 0 {
		if sum.Block != nil && cols > 0 {
			clear(floats(sum)[:cols])
		}
		return nil
	}
	d, g, y := floats(dst)[:rows*cols], floats(grad)[:rows*cols], floats(out)[:rows*cols]
	if sum.Block == nil {
		n := rows * cols
		parallelFor(n, elementGrain, func(lo, hi int) { vecReLUGrad(d[lo:hi], g[lo:hi], y[lo:hi]) })
		return nil
	}
	sm := floats(sum)[:cols]
	if rows == 1 { // Sum over one row is a copy (-0 stays -0)
		vecReLUGrad(d, g, y)
		copy(sm, d)
		return nil
	}
	// Note [column sums].
	colSums(sm, rows, cols, 1, func(r, c0 int, acc []float64) {
		o, n := r*cols+c0, len(acc)
		vecReLUGradAcc64(d[o:o+n], g[o:o+n], y[o:o+n], acc)
	})
	return nil
}

// matrixDims reads a view as rows × its last axis.
func matrixDims(v device.View) (rows, cols int) {
	if len(v.Shape) == 0 {
		return 1, 1
	}
	cols = v.Shape[len(v.Shape)-1]
	if cols == 0 {
		return 0, 0
	}
	return v.Numel() / cols, cols
}

var _ device.FusedKernels = (*kernels)(nil)

// BiasGELUTanh adds bias to z in place and writes GELUTanh(z) into dst, a
// row at a time (the row is still in cache for the second loop): the
// float32 operations of Binary's Add and then Unary's GELUTanh, so the
// same bits.
func (k *kernels) BiasGELUTanh(dst, z, bias device.View) error {
	rows, cols := matrixDims(dst)
	if rows*cols == 0 {
		return nil
	}
	d, s, b := floats(dst)[:rows*cols], floats(z)[:rows*cols], floats(bias)[:cols]
	parallelFor(rows, max(1, elementGrain/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			zr := s[r*cols : (r+1)*cols]
			vecAdd(zr, zr, b)
			vecGELUTanh(d[r*cols:(r+1)*cols], zr)
		}
	})
	return nil
}

// GELUTanhBackwardSum writes grad·GELUTanh'(z) into dst and, unless
// sum.Block is nil, the sum of dst over its rows into sum, blocked and
// rounded as Sum does it (Note [column sums]).
func (k *kernels) GELUTanhBackwardSum(dst, sum, grad, z device.View) error {
	rows, cols := matrixDims(dst)
	if rows*cols == 0 {
		if sum.Block != nil && cols > 0 {
			clear(floats(sum)[:cols])
		}
		return nil
	}
	d, g, x := floats(dst)[:rows*cols], floats(grad)[:rows*cols], floats(z)[:rows*cols]
	if sum.Block == nil {
		n := rows * cols
		parallelFor(n, elementGrain, func(lo, hi int) { vecGELUTanhGrad(d[lo:hi], g[lo:hi], x[lo:hi]) })
		return nil
	}
	sm := floats(sum)[:cols]
	if rows == 1 { // Sum over one row is a copy (-0 stays -0)
		vecGELUTanhGrad(d, g, x)
		copy(sm, d)
		return nil
	}
	colSums(sm, rows, cols, 1, func(r, c0 int, acc []float64) {
		o, n := r*cols+c0, len(acc)
		vecGELUTanhGrad(d[o:o+n], g[o:o+n], x[o:o+n])
		vecAcc64(acc, d[o:o+n])
	})
	return nil
}

var _ device.FusedGELUKernels = (*kernels)(nil)

// AddLayerNorm writes x + r into sum and LayerNorm(sum) into dst, mean and
// rstd, a row at a time (the row is still in cache when it is
// normalised): Binary's Add and LayerNorm's operations, so their bits.
func (k *kernels) AddLayerNorm(sum, dst, mean, rstd, x, r, weight, bias device.View, eps float32) error {
	C := x.Shape[len(x.Shape)-1]
	if C == 0 || x.Numel() == 0 {
		return nil
	}
	rows := x.Numel() / C
	s, d, xs, rs := floats(sum)[:rows*C], floats(dst)[:rows*C], floats(x)[:rows*C], floats(r)[:rows*C]
	mu, sd := floats(mean)[:rows], floats(rstd)[:rows]
	var w, b []float32
	if weight.Block != nil {
		w = floats(weight)[:C]
	}
	if bias.Block != nil {
		b = floats(bias)[:C]
	}
	parallelFor(rows, max(1, elementGrain/(4*C)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := s[i*C : (i+1)*C]
			vecAdd(row, xs[i*C:(i+1)*C], rs[i*C:(i+1)*C])
			mu[i], sd[i] = layerNormRow(d[i*C:(i+1)*C], row, w, b, eps)
		}
	})
	return nil
}

var _ device.FusedAddLayerNormKernels = (*kernels)(nil)
