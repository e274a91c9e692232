package fake

import (
	"math"
)

// The Go versions of device/cuda/kernels/*.cu. Each reads its parameters
// by position and its structs by field offset as the C declarations lay
// them out, and walks the grid as the CUDA code does (grid-stride loops,
// one block per row, tree reductions over 256 threads), so that a launch
// configuration that would leave elements out, or an index that would
// overflow, goes wrong here as it would on a GPU. Keep each in step with
// its .cu counterpart.

var kernelsByName = map[string]kernelFunc{
	"ferry_copy_strided32":    copyStrided[int32],
	"ferry_copy_strided64":    copyStrided[int64],
	"ferry_convert_strided32": convertStrided[int32],
	"ferry_convert_strided64": convertStrided[int64],
	"ferry_unary_contig":      unaryContig,
	"ferry_unary_strided32":   unaryStrided[int32],
	"ferry_unary_strided64":   unaryStrided[int64],
	"ferry_binary_contig":     binaryContig,
	"ferry_binary_strided32":  binaryStrided[int32],
	"ferry_binary_strided64":  binaryStrided[int64],
	"ferry_sum_blocks":        sumBlocks,
	"ferry_sum_threads":       sumThreads,
	"ferry_sum_finish":        sumFinish,
	"ferry_softmax":           softmax,
	"ferry_softmax_backward":  softmaxBackward,
	"ferry_nll":               nll,
	"ferry_nll_grad_scale":    nllGradScale,
	"ferry_nll_backward":      nllBackward,
	"ferry_sgd_step":          sgdStep,
	"ferry_adamw_step":        adamwStep,
	"ferry_gemm":              gemm,
	"ferry_gemm_bf16":         gemmBF16,
}

const block = 256 // BLOCK in reduce.cu; the 1-D launches' block size

type index interface{ ~int32 | ~int64 }

// gridStride calls body for each index of GRID_STRIDE_LOOP(I, i, n),
// thread by thread. With I = int32 the kernel's int arithmetic must not
// overflow; that is a host-side mistake, reported as a fault.
func gridStride[I index](k *launch, n int64, body func(i I)) {
	if k.block.Y != 1 || k.block.Z != 1 {
		k.fail("a 1-D kernel launched with block %v", k.block)
	}
	var zero I
	if _, is32 := any(zero).(int32); is32 && n+int64(k.grid.X)*int64(k.block.X) > math.MaxInt32 {
		k.fail("32-bit index loop over %d elements would overflow", n)
	}
	bx := int64(k.block.X)
	total := int64(k.grid.X) * bx
	for b := int64(0); b < int64(k.grid.X); b++ {
		for t := int64(0); t < bx; t++ {
			for i := b*bx + t; i < n; i += total {
				body(I(i))
			}
		}
	}
}

// stridedL is struct Strided (common.cuh): rank, shape[8], stride[3][8].
type stridedL struct {
	rank   int64
	shape  [8]int64
	stride [3][8]int64
}

func (k *launch) strided(i int) *stridedL {
	l := &stridedL{rank: k.field(i, 0)}
	for d := 0; d < 8; d++ {
		l.shape[d] = k.field(i, 1+d)
		for op := 0; op < 3; op++ {
			l.stride[op][d] = k.field(i, 9+8*op+d)
		}
	}
	return l
}

// offsets is strided_offsets<I, NOPS>: one division per axis, in I.
func offsets[I index](l *stridedL, i I, off []I) {
	for j := range off {
		off[j] = 0
	}
	for d := 7; d > 0; d-- {
		if int64(d) < l.rank {
			n := I(l.shape[d])
			q := i % n
			i /= n
			for j := range off {
				off[j] += q * I(l.stride[j][d])
			}
		}
	}
	for j := range off {
		off[j] += i * I(l.stride[j][0])
	}
}

// reduceL is struct Reduce: out_rank, out_shape[8], out_stride[8],
// red_rank, red_shape[8], red_stride[8].
type reduceL struct {
	outRank, redRank    int64
	outShape, outStride [8]int64
	redShape, redStride [8]int64
}

func (k *launch) reduce(i int) *reduceL {
	r := &reduceL{outRank: k.field(i, 0), redRank: k.field(i, 17)}
	for d := 0; d < 8; d++ {
		r.outShape[d], r.outStride[d] = k.field(i, 1+d), k.field(i, 9+d)
		r.redShape[d], r.redStride[d] = k.field(i, 18+d), k.field(i, 26+d)
	}
	return r
}

// offset1 is strided_offset<i64> over one group of axes.
func offset1(rank int64, shape, stride *[8]int64, i int64) int64 {
	var off int64
	for d := 7; d > 0; d-- {
		if int64(d) < rank {
			q := i % shape[d]
			i /= shape[d]
			off += q * stride[d]
		}
	}
	return off + i*stride[0]
}

func (r *reduceL) out(o int64) int64 { return offset1(r.outRank, &r.outShape, &r.outStride, o) }
func (r *reduceL) red(x int64) int64 { return offset1(r.redRank, &r.redShape, &r.redStride, x) }

// ---- elementwise.cu ----

func copyStrided[I index](k *launch) {
	dst, src, n, l := mem[uint32](k, 0), mem[uint32](k, 1), k.i64(2), k.strided(3)
	off := make([]I, 2)
	gridStride(k, n, func(i I) {
		offsets(l, i, off)
		dst[off[0]] = src[off[1]]
	})
}

// convertStrided is ferry_convert_strided: mode 0 rounds float32 to
// bfloat16 (f32ToBF16), 1 widens bfloat16 to float32, 2 copies 2-byte
// elements; an unknown mode writes nothing. Each operand's offsets count
// its own elements.
func convertStrided[I index](k *launch) {
	mode, n, l := k.i32(0), k.i64(3), k.strided(4)
	off := make([]I, 2)
	switch mode {
	case 0:
		dst, src := mem[uint16](k, 1), mem[uint32](k, 2)
		gridStride(k, n, func(i I) {
			offsets(l, i, off)
			dst[off[0]] = f32ToBF16(src[off[1]])
		})
	case 1:
		dst, src := mem[uint32](k, 1), mem[uint16](k, 2)
		gridStride(k, n, func(i I) {
			offsets(l, i, off)
			dst[off[0]] = uint32(src[off[1]]) << 16
		})
	case 2:
		dst, src := mem[uint16](k, 1), mem[uint16](k, 2)
		gridStride(k, n, func(i I) {
			offsets(l, i, off)
			dst[off[0]] = src[off[1]]
		})
	}
}

// f32ToBF16 is f32_to_bf16 of elementwise.cu (device.ToBFloat16's bits,
// the fake keeping its own copy of the kernel's integer operations).
func f32ToBF16(u uint32) uint16 {
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func nan32() float32 { return math.Float32frombits(0x7fc00000) }

// unaryOp is unary_op<OP> of elementwise.cu: each op's Math, generated
// from device/internal/opgen's table (ops_gen.go), rounded to float32.
func unaryOp(op int32, x, alpha float32) float32 {
	return float32(unaryMath(op, float64(x), float64(alpha)))
}

// binaryOp is binary_op<OP> of elementwise.cu, from the generated Math.
func binaryOp(op int32, a, b float32) float32 {
	return float32(binaryMath(op, float64(a), float64(b)))
}

// The dispatch macros of elementwise.cu run nothing for an unknown op.
func knownUnary(op int32) bool  { return op >= 0 && op < numUnary }
func knownBinary(op int32) bool { return op >= 0 && op < numBinary }

func unaryContig(k *launch) {
	op, alpha, dst, src, n := k.i32(0), k.f32(1), mem[float32](k, 2), mem[float32](k, 3), k.i64(4)
	if !knownUnary(op) {
		return
	}
	gridStride(k, n, func(i int64) { dst[i] = unaryOp(op, src[i], alpha) })
}

func unaryStrided[I index](k *launch) {
	op, alpha, dst, src, n, l := k.i32(0), k.f32(1), mem[float32](k, 2), mem[float32](k, 3), k.i64(4), k.strided(5)
	off := make([]I, 2)
	gridStride(k, n, func(i I) {
		offsets(l, i, off)
		dst[off[0]] = unaryOp(op, src[off[1]], alpha) // unary_any: NaN for an unknown op
	})
}

func binaryContig(k *launch) {
	op, dst, a, b, n := k.i32(0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), k.i64(4)
	if !knownBinary(op) {
		return
	}
	gridStride(k, n, func(i int64) { dst[i] = binaryOp(op, a[i], b[i]) })
}

func binaryStrided[I index](k *launch) {
	op, dst, a, b, n, l := k.i32(0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), k.i64(4), k.strided(5)
	off := make([]I, 3)
	gridStride(k, n, func(i I) {
		offsets(l, i, off)
		dst[off[0]] = binaryOp(op, a[off[1]], b[off[2]])
	})
}

// ---- reduce.cu ----

// treeSum is block_sum: s[t] += s[t+h] for h = 128, 64, ..., 1.
func treeSum(s *[block]float64) float64 {
	for h := block / 2; h > 0; h >>= 1 {
		for t := 0; t < h; t++ {
			s[t] += s[t+h]
		}
	}
	return s[0]
}

func putSum(k *launch, dst []float32, partial []float64, alpha float32, nOut, o, by int64, sum float64) {
	if k.grid.Y == 1 {
		dst[o] = float32(float64(alpha) * sum)
	} else {
		partial[by*nOut+o] = sum
	}
}

func sumBlocks(k *launch) {
	k.requireBlock(block, 1)
	dst, partial, src := mem[float32](k, 0), mem[float64](k, 1), mem[float32](k, 2)
	alpha, nOut, nRed, chunk, r := k.f32(3), k.i64(4), k.i64(5), k.i64(6), k.reduce(7)
	var s [block]float64
	for by := int64(0); by < int64(k.grid.Y); by++ {
		for o := int64(0); o < int64(k.grid.X); o++ {
			lo := by * chunk
			hi := min(lo+chunk, nRed)
			base := r.out(o)
			for t := int64(0); t < block; t++ {
				var acc float64
				for x := lo + t; x < hi; x += block {
					acc += float64(src[base+r.red(x)])
				}
				s[t] = acc
			}
			putSum(k, dst, partial, alpha, nOut, o, by, treeSum(&s))
		}
	}
}

func sumThreads(k *launch) {
	k.requireBlock(block, 1)
	dst, partial, src := mem[float32](k, 0), mem[float64](k, 1), mem[float32](k, 2)
	alpha, nOut, nRed, chunk, r := k.f32(3), k.i64(4), k.i64(5), k.i64(6), k.reduce(7)
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
					acc += float64(src[base+r.red(x)])
				}
				putSum(k, dst, partial, alpha, nOut, o, by, acc)
			}
		}
	}
}

func sumFinish(k *launch) {
	dst, partial, alpha, nOut, splits := mem[float32](k, 0), mem[float64](k, 1), k.f32(2), k.i64(3), k.i64(4)
	gridStride(k, nOut, func(o int64) {
		var t float64
		for s := int64(0); s < splits; s++ {
			t += partial[s*nOut+o]
		}
		dst[o] = float32(float64(alpha) * t)
	})
}

// rowsOf runs body for each row a block-per-row kernel visits.
func rowsOf(k *launch, rows int64, body func(row int64)) {
	k.requireBlock(block, 1)
	for bx := int64(0); bx < int64(k.grid.X); bx++ {
		for row := bx; row < rows; row += int64(k.grid.X) {
			body(row)
		}
	}
}

func softmax(k *launch) {
	dst, src, rows, cols, log := mem[float32](k, 0), mem[float32](k, 1), k.i64(2), k.i64(3), k.i32(4) != 0
	rowsOf(k, rows, func(row int64) {
		x, y := src[row*cols:], dst[row*cols:]
		m, sum := rowMaxSum(x, cols)
		if log {
			ls := float32(math.Log(sum))
			for j := int64(0); j < cols; j++ {
				y[j] = x[j] - m - ls
			}
		} else {
			inv := 1.0 / sum
			for j := int64(0); j < cols; j++ {
				y[j] = float32(math.Exp(float64(x[j]-m)) * inv)
			}
		}
	})
}

func softmaxBackward(k *launch) {
	dst, grad, out := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2)
	rows, cols, log := k.i64(3), k.i64(4), k.i32(5) != 0
	var s [block]float64
	rowsOf(k, rows, func(row int64) {
		g, y, d := grad[row*cols:], out[row*cols:], dst[row*cols:]
		for t := int64(0); t < block; t++ {
			var dot float64
			for j := t; j < cols; j += block {
				if log {
					dot += float64(g[j])
				} else {
					dot += float64(g[j]) * float64(y[j])
				}
			}
			s[t] = dot
		}
		dot := treeSum(&s)
		for j := int64(0); j < cols; j++ {
			if log {
				d[j] = g[j] - float32(math.Exp(float64(y[j]))*dot)
			} else {
				d[j] = y[j] * (g[j] - float32(dot))
			}
		}
	})
}

// oneBlock checks a kernel written for a single block of 256 threads.
func oneBlock(k *launch) {
	k.requireBlock(block, 1)
	if k.grid.X != 1 || k.grid.Y != 1 || k.grid.Z != 1 {
		k.fail("written for one block, launched on grid %v", k.grid)
	}
}

// rowMaxSum is row_max_sum of reduce.cu: the row's maximum by a block's
// tree and Σ exp(x - maximum) by its threads' partial sums and tree.
func rowMaxSum(x []float32, cols int64) (float32, float64) {
	var smax [block]float32
	var ssum [block]float64
	for t := int64(0); t < block; t++ {
		m := float32(math.Inf(-1))
		for j := t; j < cols; j += block {
			if v := x[j]; v > m {
				m = v
			}
		}
		smax[t] = m
	}
	for h := block / 2; h > 0; h >>= 1 {
		for t := 0; t < h; t++ {
			if smax[t+h] > smax[t] {
				smax[t] = smax[t+h]
			}
		}
	}
	m := smax[0]
	for t := int64(0); t < block; t++ {
		var sum float64
		for j := t; j < cols; j += block {
			sum += math.Exp(float64(x[j] - m))
		}
		ssum[t] = sum
	}
	return m, treeSum(&ssum)
}

func nll(k *launch) {
	oneBlock(k)
	dst, logp, target, rows, cols := mem[float32](k, 0), mem[float32](k, 1), mem[int32](k, 2), k.i64(3), k.i64(4)
	dst[0] = nllMean(target, rows, func(r, t int64) float32 { return logp[r*cols+t] })
}

// nllMean is nll_mean of reduce.cu: the mean over rows of -lp(r,
// target[r]), negative targets skipped, summed by a block's threads and
// its tree; NaN when no row counts.
func nllMean(target []int32, rows int64, lp func(r, t int64) float32) float32 {
	var ssum, scount [block]float64
	for t := int64(0); t < block; t++ {
		var sum, count float64
		for r := t; r < rows; r += block {
			if tg := target[r]; tg >= 0 {
				sum -= float64(lp(r, int64(tg)))
				count++
			}
		}
		ssum[t], scount[t] = sum, count
	}
	return float32(treeSum(&ssum) / treeSum(&scount))
}

func nllGradScale(k *launch) {
	oneBlock(k)
	scale, grad, target, rows := mem[float32](k, 0), mem[float32](k, 1), mem[int32](k, 2), k.i64(3)
	var scount [block]float64
	for t := int64(0); t < block; t++ {
		var count float64
		for r := t; r < rows; r += block {
			if target[r] >= 0 {
				count++
			}
		}
		scount[t] = count
	}
	scale[0] = -grad[0] / float32(int64(treeSum(&scount)))
}

func nllBackward(k *launch) {
	dst, scale, target, rows, cols := mem[float32](k, 0), mem[float32](k, 1), mem[int32](k, 2), k.i64(3), k.i64(4)
	gridStride(k, rows*cols, func(i int64) {
		r, c := i/cols, i%cols
		if t := target[r]; t >= 0 && c == int64(t) {
			dst[i] = scale[0]
		} else {
			dst[i] = 0
		}
	})
}

// ---- optim.cu ----

func sgdStep(k *launch) {
	w, g, buf, n := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), k.i64(3)
	lr, momentum, dampening, wd := k.f32(4), k.f32(5), k.f32(6), k.f32(7)
	nesterov, first := k.i32(8) != 0, k.i32(9) != 0
	gridStride(k, n, func(i int64) {
		d := g[i]
		if wd != 0 {
			d += wd * w[i]
		}
		if momentum != 0 {
			if first {
				buf[i] = d
			} else {
				buf[i] = buf[i]*momentum + (1-dampening)*d
			}
			if nesterov {
				d += momentum * buf[i]
			} else {
				d = buf[i]
			}
		}
		w[i] += -lr * d
	})
}

func adamwStep(k *launch) {
	w, g, m, v, n := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), k.i64(4)
	decay, beta1, beta2, eps, stepSize, bc2Sqrt := k.f32(5), k.f32(6), k.f32(7), k.f32(8), k.f32(9), k.f32(10)
	gridStride(k, n, func(i int64) {
		w[i] *= decay
		m[i] = m[i]*beta1 + g[i]*(1-beta1)
		v[i] = v[i]*beta2 + (1-beta2)*g[i]*g[i]
		denom := float32(math.Sqrt(float64(v[i])))/bc2Sqrt + eps
		w[i] += -stepSize * m[i] / denom
	})
}

// ---- gemm.cu ----

func gemm(k *launch) {
	gemmTiles(k, 0, matrixMem{f: mem[float32](k, 6)}, matrixMem{f: mem[float32](k, 9)}, matrixMem{f: mem[float32](k, 13)})
}

// gemmBF16 is ferry_gemm_bf16: ferry_gemm's parameters after c_bf16, A
// and B bfloat16, C bfloat16 (c_bf16) or float32.
func gemmBF16(k *launch) {
	var c matrixMem
	if k.i32(0) != 0 {
		c.h = mem[uint16](k, 14)
	} else {
		c.f = mem[float32](k, 14)
	}
	gemmTiles(k, 1, matrixMem{h: mem[uint16](k, 7)}, matrixMem{h: mem[uint16](k, 10)}, c)
}

// gemmTiles is gemm_tiles of gemm.cu, its parameters from index o on.
func gemmTiles(k *launch, o int, A, B, C matrixMem) {
	const tile = 16
	k.requireBlock(tile, tile)
	transA, transB := k.i32(o) != 0, k.i32(o+1) != 0
	M, N, K, alpha := k.i64(o+2), k.i64(o+3), k.i64(o+4), k.f32(o+5)
	lda, strideA := k.i64(o+7), k.i64(o+8)
	ldb, strideB := k.i64(o+10), k.i64(o+11)
	beta, ldc, strideC, batch := k.f32(o+12), k.i64(o+14), k.i64(o+15), k.i64(o+16)
	rows, cols := int64(k.grid.Y)*tile, int64(k.grid.X)*tile
	for bz := int64(0); bz < int64(k.grid.Z); bz++ {
		for z := bz; z < batch; z += int64(k.grid.Z) {
			a, b, c := A.at(z*strideA), B.at(z*strideB), C.at(z*strideC)
			for row := int64(0); row < min(rows, M); row++ {
				for col := int64(0); col < min(cols, N); col++ {
					var acc float32
					for kk := int64(0); kk < K; kk++ {
						var x, y float32
						if transA {
							x = a.get(int(kk*lda + row))
						} else {
							x = a.get(int(row*lda + kk))
						}
						if transB {
							y = b.get(int(col*ldb + kk))
						} else {
							y = b.get(int(kk*ldb + col))
						}
						acc += float32(x * y)
					}
					r := alpha * acc
					if beta != 0 {
						r += beta * c.get(int(row*ldc+col))
					}
					c.set(int(row*ldc+col), r)
				}
			}
		}
	}
}
