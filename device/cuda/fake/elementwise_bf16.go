package fake

import "math"

// The Go versions of the kernels that take bfloat16 views (the *_mixed
// kernels of elementwise.cu and reduce.cu, ferry_dropout_bf16 of gpt.cu):
// each operand is float32 or bfloat16 by its bit of the types parameter
// (TYPE_BF16 in common.cuh), its offsets counting its own elements.

func init() {
	for name, f := range map[string]kernelFunc{
		"ferry_unary_mixed32":     unaryMixed[int32],
		"ferry_unary_mixed64":     unaryMixed[int64],
		"ferry_binary_mixed32":    binaryMixed[int32],
		"ferry_binary_mixed64":    binaryMixed[int64],
		"ferry_sum_blocks_mixed":  sumBlocksMixed,
		"ferry_sum_threads_mixed": sumThreadsMixed,
		"ferry_sum_finish_mixed":  sumFinishMixed,
		"ferry_dropout_bf16":      dropoutBF16,
	} {
		kernelsByName[name] = f
	}
}

// operand is parameter i as float32 or bfloat16 memory: load_f32_or_bf16
// and store_f32_or_bf16 of common.cuh.
type operand struct {
	f []float32
	h []uint16
}

func (k *launch) operand(i int, types int32, bit int) operand {
	if types>>bit&1 != 0 {
		return operand{h: mem[uint16](k, i)}
	}
	return operand{f: mem[float32](k, i)}
}

func (o operand) load(off int64) float32 {
	if o.h != nil {
		return math.Float32frombits(uint32(o.h[off]) << 16)
	}
	return o.f[off]
}

func (o operand) store(off int64, v float32) {
	if o.h != nil {
		o.h[off] = f32ToBF16(math.Float32bits(v))
		return
	}
	o.f[off] = v
}

func unaryMixed[I index](k *launch) {
	op, alpha, types, n, l := k.i32(0), k.f32(1), k.i32(2), k.i64(5), k.strided(6)
	dst, src := k.operand(3, types, 0), k.operand(4, types, 1)
	off := make([]I, 2)
	gridStride(k, n, func(i I) {
		offsets(l, i, off)
		dst.store(int64(off[0]), unaryOp(op, src.load(int64(off[1])), alpha)) // unary_any: NaN for an unknown op
	})
}

func binaryMixed[I index](k *launch) {
	op, types, n, l := k.i32(0), k.i32(1), k.i64(5), k.strided(6)
	dst, a, b := k.operand(2, types, 0), k.operand(3, types, 1), k.operand(4, types, 2)
	off := make([]I, 3)
	gridStride(k, n, func(i I) {
		offsets(l, i, off)
		dst.store(int64(off[0]), binaryOp(op, a.load(int64(off[1])), b.load(int64(off[2]))))
	})
}

func putSumMixed(k *launch, dst operand, partial []float64, alpha float32, nOut, o, by int64, sum float64) {
	if k.grid.Y == 1 {
		dst.store(o, float32(float64(alpha)*sum))
	} else {
		partial[by*nOut+o] = sum
	}
}

func sumBlocksMixed(k *launch) {
	k.requireBlock(block, 1)
	types := k.i32(0)
	dst, partial, src := k.operand(1, types, 0), mem[float64](k, 2), k.operand(3, types, 1)
	alpha, nOut, nRed, chunk, r := k.f32(4), k.i64(5), k.i64(6), k.i64(7), k.reduce(8)
	var s [block]float64
	for by := int64(0); by < int64(k.grid.Y); by++ {
		for o := int64(0); o < int64(k.grid.X); o++ {
			lo := by * chunk
			hi := min(lo+chunk, nRed)
			base := r.out(o)
			for t := int64(0); t < block; t++ {
				var acc float64
				for x := lo + t; x < hi; x += block {
					acc += float64(src.load(base + r.red(x)))
				}
				s[t] = acc
			}
			putSumMixed(k, dst, partial, alpha, nOut, o, by, treeSum(&s))
		}
	}
}

func sumThreadsMixed(k *launch) {
	k.requireBlock(block, 1)
	types := k.i32(0)
	dst, partial, src := k.operand(1, types, 0), mem[float64](k, 2), k.operand(3, types, 1)
	alpha, nOut, nRed, chunk, r := k.f32(4), k.i64(5), k.i64(6), k.i64(7), k.reduce(8)
	for by := int64(0); by < int64(k.grid.Y); by++ {
		for bx := int64(0); bx < int64(k.grid.X); bx++ {
			for t := int64(0); t < block; t++ {
				o := bx*block + t
				if o >= nOut {
					continue
				}
				lo := by * chunk
				hi := min(lo+chunk, nRed)
				base := r.out(o)
				var acc float64
				for x := lo; x < hi; x++ {
					acc += float64(src.load(base + r.red(x)))
				}
				putSumMixed(k, dst, partial, alpha, nOut, o, by, acc)
			}
		}
	}
}

func sumFinishMixed(k *launch) {
	types := k.i32(0)
	dst, partial, alpha, nOut, splits := k.operand(1, types, 0), mem[float64](k, 2), k.f32(3), k.i64(4), k.i64(5)
	gridStride(k, nOut, func(o int64) {
		var t float64
		for s := int64(0); s < splits; s++ {
			t += partial[s*nOut+o]
		}
		dst.store(o, float32(float64(alpha)*t))
	})
}

func dropoutBF16(k *launch) {
	dst, src, n, d, zero := mem[uint16](k, 0), mem[uint16](k, 1), k.i64(2), k.drop(3, true), k.i32(10) != 0
	first, skew := d.off>>2, d.off&3
	gridStride(k, (skew+n+3)/4, func(b int64) {
		r := d.bits(uint64(first + b))
		for lane := int64(0); lane < 4; lane++ {
			if i := 4*b + lane - skew; i >= 0 && i < n {
				var y uint16
				if !zero && r[lane] >= d.thr {
					y = f32ToBF16(math.Float32bits(math.Float32frombits(uint32(src[i])<<16) * d.scale))
				}
				dst[i] = y
			}
		}
	})
}
