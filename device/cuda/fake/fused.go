package fake

import (
	"math"
	"unsafe"
)

// The Go versions of device/cuda/kernels/fused.cu.

func init() {
	for name, f := range map[string]kernelFunc{
		"ferry_bias_gelu_tanh":         biasGELUTanh,
		"ferry_gelu_tanh_backward_sum": geluTanhBackwardSum,
		"ferry_adamw_multi":            adamwMulti,
		"ferry_add_layer_norm":         addLayerNorm,
	} {
		kernelsByName[name] = f
	}
}

func biasGELUTanh(k *launch) {
	dst, z, bias, rows, cols := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), k.i64(3), k.i64(4)
	rowsOf(k, rows, func(r int64) {
		for c := int64(0); c < cols; c++ {
			i := r*cols + c
			s := z[i] + bias[c]
			z[i] = s
			dst[i] = unaryOp(uGELUTanh, s, 0)
		}
	})
}

func geluTanhBackwardSum(k *launch) {
	k.requireBlock(block, 1)
	dst, sum, partial, grad, z := mem[float32](k, 0), mem[float32](k, 1), mem[float64](k, 2), mem[float32](k, 3), mem[float32](k, 4)
	rows, cols, chunk := k.i64(5), k.i64(6), k.i64(7)
	for by := int64(0); by < int64(k.grid.Y); by++ {
		for bx := int64(0); bx < int64(k.grid.X); bx++ {
			for t := int64(0); t < block; t++ {
				c := bx*block + t
				if c >= cols {
					continue
				}
				lo := by * chunk
				hi := min(lo+chunk, rows)
				var acc float64
				for r := lo; r < hi; r++ {
					i := r*cols + c
					d := binaryOp(bGELUTanhGrad, grad[i], z[i])
					dst[i] = d
					acc += float64(d)
				}
				putSum(k, sum, partial, 1, cols, c, by, acc)
			}
		}
	}
}

// adamwTable is ADAMW_TABLE: struct AdamWTable is count, chunk, then
// w, g, m, v and n of adamwTable entries each, then first[adamwTable+1].
const adamwTable = 40

// floatsAt is the device memory at address p as float32s.
func floatsAt(k *launch, p int64) []float32 {
	b, ok := k.mem(uint64(p))
	if !ok || p%4 != 0 {
		k.fail("table address %#x is not aligned device memory", p)
	}
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func adamwMulti(k *launch) {
	count, chunk := k.field(0, 0), k.field(0, 1)
	col := func(c int, t int64) int64 { return k.field(0, 2+c*adamwTable+int(t)) }
	first := func(t int64) int64 { return k.field(0, 2+5*adamwTable+int(t)) }
	if count < 1 || count > adamwTable {
		k.fail("table of %d tensors", count)
	}
	decay, beta1, beta2, eps, stepSize, bc2Sqrt := k.f32(1), k.f32(2), k.f32(3), k.f32(4), k.f32(5), k.f32(6)
	total := first(count)
	for c := int64(0); c < total; c++ { // block c % gridDim.x, in its loop
		lo, hi := int64(0), count-1
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if first(mid) <= c {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		w, g, m, v := floatsAt(k, col(0, lo)), floatsAt(k, col(1, lo)), floatsAt(k, col(2, lo)), floatsAt(k, col(3, lo))
		start := (c - first(lo)) * chunk
		end := min(start+chunk, col(4, lo))
		if end > int64(len(w)) || end > int64(len(g)) || end > int64(len(m)) || end > int64(len(v)) {
			k.fail("tensor %d of %d elements reaches past its memory", lo, col(4, lo))
		}
		for i := start; i < end; i++ {
			w[i] *= decay
			m[i] = m[i]*beta1 + g[i]*(1-beta1)
			v[i] = v[i]*beta2 + (1-beta2)*g[i]*g[i]
			denom := float32(math.Sqrt(float64(v[i])))/bc2Sqrt + eps
			w[i] += -stepSize * m[i] / denom
		}
	}
}

func addLayerNorm(k *launch) {
	sum, dst, mean, rstd := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3)
	x, res, w, b := mem[float32](k, 4), mem[float32](k, 5), mem[float32](k, 6), mem[float32](k, 7)
	rows, C, eps := k.i64(8), k.i64(9), k.f32(10)
	rowsOf(k, rows, func(r int64) {
		xr := sum[r*C : (r+1)*C]
		for c := range xr {
			xr[c] = x[r*C+int64(c)] + res[r*C+int64(c)]
		}
		mean[r], rstd[r] = layerNormRow(dst[r*C:(r+1)*C], xr, w, b, eps)
	})
}
