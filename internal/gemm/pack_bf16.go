package gemm

import "unsafe"

// Packing bfloat16 operands (GemmBF16). For a float32 kernel the values
// are widened while they are packed, into the layouts of pack.go, so the
// conversion rides on the copy that packing makes anyway. For a pairs
// kernel (VDPBF16PS) a packed panel keeps bfloat16 and holds two k-steps
// per 32-bit slot, the even step in the low half:
//
//	A panel r: slot p*mr + i = op(A)[r*mr+i][2p] | op(A)[r*mr+i][2p+1]<<16
//	B panel s: slot p*nr + j = op(B)[2p][s*nr+j] | op(B)[2p+1][s*nr+j]<<16
//
// for p < ceil(kc/2); a missing step (kc odd) or row or column is zero,
// and zeros add nothing to VDPBF16PS's sums (Note [VDPBF16PS]). As in
// pack.go, both operands reduce to two primitives over a source src with
// row stride ld, for panel s, step q < kc and x = s*w + j:
//
//	copy:   step q of column x is src[(r0+q)*ld + c0 + x]
//	gather: step q of column x is src[(r0+x)*ld + c0 + q]

// packA16 packs op(A)[ic:ic+mc, pc:pc+kc] of a bfloat16 A into dst.
func (p *problem) packA16(dst []float32, ic, pc, mc, kc int) {
	k := p.k
	switch {
	case k.pairs && p.transA:
		k.pairCopy(slots(dst), k.mr, p.a16, p.lda, pc, ic, kc, mc)
	case k.pairs:
		k.pairGather(slots(dst), k.mr, p.a16, p.lda, ic, pc, kc, mc)
	case p.transA:
		widenCopy(dst, k.mr, p.a16, p.lda, pc, ic, kc, mc)
	default:
		widenGather(dst, k.mr, p.a16, p.lda, ic, pc, kc, mc)
	}
}

// packB16 packs op(B)[pc:pc+kc, jc:jc+nc] of a bfloat16 B into dst.
func (p *problem) packB16(dst []float32, pc, jc, kc, nc int) {
	k := p.k
	switch {
	case k.pairs && p.transB:
		k.pairGather(slots(dst), k.nr, p.b16, p.ldb, jc, pc, kc, nc)
	case k.pairs:
		k.pairCopy(slots(dst), k.nr, p.b16, p.ldb, pc, jc, kc, nc)
	case p.transB:
		widenGather(dst, k.nr, p.b16, p.ldb, jc, pc, kc, nc)
	default:
		widenCopy(dst, k.nr, p.b16, p.ldb, pc, jc, kc, nc)
	}
}

// slots views a packing buffer as 32-bit slots of bfloat16 pairs.
func slots(f []float32) []uint32 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&f[0])), len(f))
}

// widen is bfloat16 bits b as a float32 (exact).
func widen(b uint16) float32 {
	u := uint32(b) << 16
	return *(*float32)(unsafe.Pointer(&u))
}

func f32bits(f float32) uint32 { return *(*uint32)(unsafe.Pointer(&f)) }

// widenCopy is packCopy from a bfloat16 source, widening.
func widenCopy(dst []float32, w int, src []uint16, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	dst = dst[:np*w*kc]
	_ = src[(r0+kc-1)*ld+c0+cnt-1]
	for s := 0; s < np; s++ {
		n := min(w, cnt-s*w)
		for q := 0; q < kc; q++ {
			d := dst[s*w*kc+q*w:][:w]
			sr := src[(r0+q)*ld+c0+s*w:][:n]
			for j, v := range sr {
				d[j] = widen(v)
			}
			clear(d[n:])
		}
	}
}

// widenGather is packGather from a bfloat16 source, widening.
func widenGather(dst []float32, w int, src []uint16, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	dst = dst[:np*w*kc]
	_ = src[(r0+cnt-1)*ld+c0+kc-1]
	for s := 0; s < np; s++ {
		n := min(w, cnt-s*w)
		panel := dst[s*w*kc : (s+1)*w*kc]
		for j := 0; j < n; j++ {
			sr := src[(r0+s*w+j)*ld+c0:][:kc]
			for q, v := range sr {
				panel[q*w+j] = widen(v)
			}
		}
		if n < w {
			for q := 0; q < kc; q++ {
				clear(panel[q*w+n : q*w+w])
			}
		}
	}
}

// pairCopy packs pairs of steps whose columns are contiguous: slot (q, j)
// interleaves rows 2q and 2q+1 of src.
func pairCopy(dst []uint32, w int, src []uint16, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	kp := (kc + 1) / 2
	dst = dst[:np*w*kp]
	_ = src[(r0+kc-1)*ld+c0+cnt-1]
	for s := 0; s < np; s++ {
		n := min(w, cnt-s*w)
		for q := 0; q < kp; q++ {
			d := dst[s*w*kp+q*w:][:w]
			lo := src[(r0+2*q)*ld+c0+s*w:][:n]
			if 2*q+1 == kc {
				for j, v := range lo {
					d[j] = uint32(v)
				}
			} else {
				hi := src[(r0+2*q+1)*ld+c0+s*w:][:n]
				for j, v := range lo {
					d[j] = uint32(v) | uint32(hi[j])<<16
				}
			}
			clear(d[n:])
		}
	}
}

// pairGather packs pairs of steps that are contiguous in src: slot (q, j)
// is the two bfloat16 at src[(r0+x)*ld + c0 + 2q].
func pairGather(dst []uint32, w int, src []uint16, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	kp := (kc + 1) / 2
	dst = dst[:np*w*kp]
	_ = src[(r0+cnt-1)*ld+c0+kc-1]
	for s := 0; s < np; s++ {
		n := min(w, cnt-s*w)
		panel := dst[s*w*kp : (s+1)*w*kp]
		for j := 0; j < n; j++ {
			sr := src[(r0+s*w+j)*ld+c0:][:kc]
			q := 0
			for ; 2*q+1 < kc; q++ {
				panel[q*w+j] = uint32(sr[2*q]) | uint32(sr[2*q+1])<<16
			}
			if q < kp {
				panel[q*w+j] = uint32(sr[2*q])
			}
		}
		if n < w {
			for q := 0; q < kp; q++ {
				clear(panel[q*w+n : q*w+w])
			}
		}
	}
}
