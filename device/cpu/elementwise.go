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
	d, s := floats(dst), floats(src)
	l := collapse(dst.Shape, dst.Strides, src.Strides)
	parallelFor(dst.Numel(), elementGrain, func(lo, hi int) {
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

func (k *kernels) Fill(dst device.View, v float32) error {
	d := floats(dst)[:dst.Numel()]
	parallelFor(len(d), elementGrain, func(lo, hi int) {
		r := d[lo:hi]
		for i := range r {
			r[i] = v
		}
	})
	return nil
}

func (k *kernels) Unary(op device.UnaryOp, dst, src device.View, alpha float32) error {
	d, s := floats(dst), floats(src)
	l := collapse(dst.Shape, dst.Strides, src.Strides)
	f := unaryFunc(op, alpha)
	parallelFor(dst.Numel(), elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) {
			ss := l.strides[1][len(l.shape)-1]
			dr, sr := d[offs[0]:offs[0]+n], s[offs[1]:]
			if ss == 1 {
				sr = sr[:n]
				switch op {
				case device.ReLU:
					for i, x := range sr {
						if !(x <= 0) { // NaN propagates, as PyTorch's relu
							dr[i] = x
						} else {
							dr[i] = 0
						}
					}
					return
				case device.Scale:
					for i, x := range sr {
						dr[i] = alpha * x
					}
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

const (
	sqrt2       = 1.4142135623730951
	sqrt2OverPi = 0.7978845608028654 // √(2/π)
	invSqrt2Pi  = 0.3989422804014327 // 1/√(2π)
	geluCoef    = 0.044715
)

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
		return func(x float32) float32 {
			v := float64(x)
			return float32(0.5 * v * (1 + math.Tanh(sqrt2OverPi*(v+geluCoef*v*v*v))))
		}
	case device.Scale:
		return func(x float32) float32 { return alpha * x }
	case device.AddScalar:
		return func(x float32) float32 { return x + alpha }
	case device.PowScalar:
		return func(x float32) float32 { return float32(math.Pow(float64(x), float64(alpha))) }
	}
	panic("cpu: unknown unary op " + op.String())
}

func (k *kernels) Binary(op device.BinaryOp, dst, a, b device.View) error {
	d, x, y := floats(dst), floats(a), floats(b)
	l := collapse(dst.Shape, dst.Strides, a.Strides, b.Strides)
	f := binaryFunc(op)
	last := len(l.shape) - 1
	parallelFor(dst.Numel(), elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) {
			sa, sb := l.strides[1][last], l.strides[2][last]
			dr, ar, br := d[offs[0]:offs[0]+n], x[offs[1]:], y[offs[2]:]
			if sa == 1 && sb == 1 {
				ar, br = ar[:n], br[:n]
				switch op {
				case device.Add:
					for i := range dr {
						dr[i] = ar[i] + br[i]
					}
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
					for i := range dr {
						if !(br[i] <= 0) { // at a NaN output the gradient passes, as PyTorch's threshold_backward
							dr[i] = ar[i]
						} else {
							dr[i] = 0
						}
					}
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
		return func(g, x float32) float32 {
			v := float64(x)
			inner := sqrt2OverPi * (v + geluCoef*v*v*v)
			t := math.Tanh(inner)
			d := 0.5*(1+t) + 0.5*v*(1-t*t)*sqrt2OverPi*(1+3*geluCoef*v*v)
			return float32(float64(g) * d)
		}
	}
	panic("cpu: unknown binary op " + op.String())
}
