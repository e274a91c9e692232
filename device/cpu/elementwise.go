package cpu

import (
	"math"

	"ferry/device"
)

// Elementwise kernels. Each walks the collapsed layout of its operands row
// by row (see layout.rows) and splits large outputs across goroutines; the
// hottest ops on contiguous rows have loops of their own, the rest go
// through a scalar function.

func (k *kernels) Copy(dst, src device.View) error {
	n := dst.Numel()
	if src.IsContiguous() {
		d, s := floats(dst)[:n], floats(src)[:n]
		parallelFor(n, elementGrain, func(lo, hi int) { copy(d[lo:hi], s[lo:hi]) })
		return nil
	}
	d, s := floats(dst), floats(src)
	l := collapse(dst.Shape, dst.Strides, src.Strides)
	if len(l.shape) == 2 && l.strides[1][0] == 0 && l.strides[1][1] == 1 {
		// One row repeated (a bias broadcast over a batch).
		rows, cols := l.shape[0], l.shape[1]
		row := s[:cols]
		parallelFor(rows, max(1, elementGrain/cols), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				copy(d[r*cols:(r+1)*cols], row)
			}
		})
		return nil
	}
	parallelFor(n, elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) {
			ss := l.strides[1][len(l.shape)-1]
			dr, sr := d[offs[0]:offs[0]+n], s[offs[1]:]
			if ss == 1 {
				copy(dr, sr[:n])
				return
			}
			for i := range dr {
				dr[i] = sr[i*ss]
			}
		})
	})
	return nil
}

// CopyStrided is Copy into a destination of any (non-overlapping)
// strides (device.StridedCopyKernels).
func (k *kernels) CopyStrided(dst, src device.View) error {
	if dst.IsContiguous() {
		return k.Copy(dst, src)
	}
	n := dst.Numel()
	if n == 0 {
		return nil
	}
	d, s := floats(dst), floats(src)
	l := collapse(dst.Shape, dst.Strides, src.Strides)
	last := len(l.shape) - 1
	ds, ss := l.strides[0][last], l.strides[1][last]
	parallelFor(n, elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) {
			dr, sr := d[offs[0]:], s[offs[1]:]
			if ds == 1 && ss == 1 {
				copy(dr[:n], sr[:n])
				return
			}
			for i := 0; i < n; i++ {
				dr[i*ds] = sr[i*ss]
			}
		})
	})
	return nil
}

func (k *kernels) Fill(dst device.View, v float32) error {
	d := floats(dst)[:dst.Numel()]
	parallelFor(len(d), elementGrain, func(lo, hi int) {
		r := d[lo:hi]
		if v == 0 && !math.Signbit(float64(v)) {
			clear(r)
			return
		}
		for i := range r {
			r[i] = v
		}
	})
	return nil
}

func (k *kernels) Unary(op device.UnaryOp, dst, src device.View, alpha float32) error {
	if hasBF16(dst, src) { // Note [bfloat16 elementwise]
		if err := checkEW("unary", dst, src); err != nil {
			return err
		}
		ewMixed(dst, src, device.View{}, 1, unaryRow(op, alpha))
		return nil
	}
	n := dst.Numel()
	if src.IsContiguous() && (op == device.ReLU || op == device.Scale || op == device.GELUTanh) {
		d, s := floats(dst)[:n], floats(src)[:n]
		switch op {
		case device.ReLU:
			parallelFor(n, elementGrain, func(lo, hi int) { vecReLU(d[lo:hi], s[lo:hi]) })
		case device.GELUTanh:
			parallelFor(n, elementGrain, func(lo, hi int) { vecGELUTanh(d[lo:hi], s[lo:hi]) })
		default:
			parallelFor(n, elementGrain, func(lo, hi int) { vecScale(d[lo:hi], s[lo:hi], alpha) })
		}
		return nil
	}
	d, s := floats(dst), floats(src)
	l := collapse(dst.Shape, dst.Strides, src.Strides)
	f := unaryFunc(op, alpha)
	parallelFor(n, elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) {
			ss := l.strides[1][len(l.shape)-1]
			dr, sr := d[offs[0]:offs[0]+n], s[offs[1]:]
			if ss == 1 {
				switch op {
				case device.ReLU:
					vecReLU(dr, sr)
					return
				case device.Scale:
					vecScale(dr, sr, alpha)
					return
				}
			}
			for i := range dr {
				dr[i] = f(sr[i*ss])
			}
		})
	})
	return nil
}

func unaryFunc(op device.UnaryOp, alpha float32) func(float32) float32 {
	switch op {
	case device.Neg:
		return func(x float32) float32 { return -x }
	case device.Exp:
		return func(x float32) float32 { return float32(math.Exp(float64(x))) }
	case device.Log:
		return func(x float32) float32 { return float32(math.Log(float64(x))) }
	case device.Sqrt:
		return func(x float32) float32 { return float32(math.Sqrt(float64(x))) }
	case device.Square:
		return func(x float32) float32 { return x * x }
	case device.Abs:
		return func(x float32) float32 { return float32(math.Abs(float64(x))) }
	case device.Tanh:
		return func(x float32) float32 { return float32(math.Tanh(float64(x))) }
	case device.Sigmoid:
		return func(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }
	case device.ReLU:
		return func(x float32) float32 {
			if !(x <= 0) { // NaN propagates
				return x
			}
			return 0
		}
	case device.GELU:
		return func(x float32) float32 {
			v := float64(x)
			return float32(0.5 * v * (1 + math.Erf(v/sqrt2)))
		}
	case device.GELUTanh:
		return geluTanh
	case device.Scale:
		return func(x float32) float32 { return alpha * x }
	case device.AddScalar:
		return func(x float32) float32 { return x + alpha }
	case device.PowScalar:
		return func(x float32) float32 { return float32(math.Pow(float64(x), float64(alpha))) }
	}
	// An op with no kernel here runs its definition (device/internal/opgen).
	return func(x float32) float32 { return float32(op.Math(float64(x), float64(alpha))) }
}

func (k *kernels) Binary(op device.BinaryOp, dst, a, b device.View) error {
	if hasBF16(dst, a, b) { // Note [bfloat16 elementwise]
		if err := checkEW("binary", dst, a, b); err != nil {
			return err
		}
		ewMixed(dst, a, b, 2, binaryRow(op))
		return nil
	}
	n := dst.Numel()
	if (op == device.Add || op == device.ReLUGrad || op == device.GELUTanhGrad) && a.IsContiguous() && b.IsContiguous() {
		d, x, y := floats(dst)[:n], floats(a)[:n], floats(b)[:n]
		switch op {
		case device.Add:
			parallelFor(n, elementGrain, func(lo, hi int) { vecAdd(d[lo:hi], x[lo:hi], y[lo:hi]) })
		case device.GELUTanhGrad:
			parallelFor(n, elementGrain, func(lo, hi int) { vecGELUTanhGrad(d[lo:hi], x[lo:hi], y[lo:hi]) })
		default:
			parallelFor(n, elementGrain, func(lo, hi int) { vecReLUGrad(d[lo:hi], x[lo:hi], y[lo:hi]) })
		}
		return nil
	}
	d, x, y := floats(dst), floats(a), floats(b)
	l := collapse(dst.Shape, dst.Strides, a.Strides, b.Strides)
	f := binaryFunc(op)
	last := len(l.shape) - 1
	parallelFor(n, elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) {
			sa, sb := l.strides[1][last], l.strides[2][last]
			dr, ar, br := d[offs[0]:offs[0]+n], x[offs[1]:], y[offs[2]:]
			if sa == 1 && sb == 1 {
				ar, br = ar[:n], br[:n]
				switch op {
				case device.Add:
					vecAdd(dr, ar, br)
					return
				case device.Sub:
					for i := range dr {
						dr[i] = ar[i] - br[i]
					}
					return
				case device.Mul:
					for i := range dr {
						dr[i] = ar[i] * br[i]
					}
					return
				case device.ReLUGrad:
					vecReLUGrad(dr, ar, br)
					return
				}
			}
			for i := range dr {
				dr[i] = f(ar[i*sa], br[i*sb])
			}
		})
	})
	return nil
}

func binaryFunc(op device.BinaryOp) func(a, b float32) float32 {
	switch op {
	case device.Add:
		return func(a, b float32) float32 { return a + b }
	case device.Sub:
		return func(a, b float32) float32 { return a - b }
	case device.Mul:
		return func(a, b float32) float32 { return a * b }
	case device.Div:
		return func(a, b float32) float32 { return a / b }
	case device.Maximum:
		return func(a, b float32) float32 {
			if a != a || a > b { // NaN propagates, as torch.maximum
				return a
			}
			return b
		}
	case device.ReLUGrad:
		return func(g, y float32) float32 {
			if !(y <= 0) {
				return g
			}
			return 0
		}
	case device.GELUGrad:
		return func(g, x float32) float32 {
			v := float64(x)
			cdf := 0.5 * (1 + math.Erf(v/sqrt2))
			pdf := invSqrt2Pi * math.Exp(-0.5*v*v)
			return float32(float64(g) * (cdf + v*pdf))
		}
	case device.GELUTanhGrad:
		return geluTanhGrad
	}
	// An op with no kernel here runs its definition (device/internal/opgen).
	return func(a, b float32) float32 { return float32(op.Math(float64(a), float64(b))) }
}
