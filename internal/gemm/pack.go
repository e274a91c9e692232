package gemm

import "unsafe"

// Packed layouts (kc = depth of the current k block):
//
//	A block (mc×kc): micro-panels of mr rows; panel r starts at r*mr*kc and
//	holds, for p = 0..kc-1, the mr values op(A)[r*mr+i][p] (i = 0..mr-1).
//	B block (kc×nc): micro-panels of nr columns; panel s starts at s*nr*kc
//	and holds, for p = 0..kc-1, the nr values op(B)[p][s*nr+j].
//
// Rows/columns beyond the edge of the block are zero. Both packings reduce
// to two primitives that fill ceil(cnt/w) panels of w*kc elements from a
// source matrix src with row stride ld; for panel s, q < kc and j < w, with
// x = s*w + j:
//
//	packCopy:   panel[s][q*w + j] = src[(r0+q)*ld + c0 + x]  (contiguous runs)
//	packGather: panel[s][q*w + j] = src[(r0+x)*ld + c0 + q]  (a transpose)
//
// and zero where x >= cnt. The AVX-512 kernels use assembly versions (16×16
// register transposes, masked copies); the others use the Go versions below.
// packCopy walks the source in strips of 16 rows (k-steps) so that the rows
// being read stay in L1 and in the TLB when the leading dimension is large;
// the assembly packGather reads 16 rows × 16 columns at a time.

// packA packs op(A)[ic:ic+mc, pc:pc+kc] into dst.
func (p *problem) packA(dst []float32, ic, pc, mc, kc int) {
	if p.a16 != nil {
		p.packA16(dst, ic, pc, mc, kc)
		return
	}
	if p.transA {
		p.k.packCopy(dst, p.k.mr, p.a, p.lda, pc, ic, kc, mc)
	} else {
		p.k.packGather(dst, p.k.mr, p.a, p.lda, ic, pc, kc, mc)
	}
}

// packB packs op(B)[pc:pc+kc, jc:jc+nc] into dst.
func (p *problem) packB(dst []float32, pc, jc, kc, nc int) {
	if p.b16 != nil {
		p.packB16(dst, pc, jc, kc, nc)
		return
	}
	if p.transB {
		p.k.packGather(dst, p.k.nr, p.b, p.ldb, jc, pc, kc, nc)
	} else {
		p.k.packCopy(dst, p.k.nr, p.b, p.ldb, pc, jc, kc, nc)
	}
}

const packStrip = 16

// The Go primitives check the first and last element they touch with
// ordinary (bounds-checked) indexing, then walk rows with unsafe pointers so
// that the short inner copies compile to plain vector moves.

// rowCopy copies rows runs of len(T) floats, strides in bytes.
func rowCopy[T [4]float32 | [6]float32 | [8]float32 | [14]float32 | [16]float32 | [32]float32 | [64]float32](dp, sp unsafe.Pointer, rows int, dstride, sstride uintptr) {
	// Offsets are recomputed from the base pointers: advancing a pointer
	// past the end of its allocation, even without dereferencing it, is
	// invalid (and caught by -race/checkptr).
	for i := range uintptr(rows) {
		*(*T)(unsafe.Add(dp, i*dstride)) = *(*T)(unsafe.Add(sp, i*sstride))
	}
}

// copyRunsGo copies, for each of panels panels, rows runs of w floats
// (panel p's run r from sp + p·4w + r·ss to dp + p·dps + r·ds, strides in
// bytes), for the widths of the kernels' panels, reporting whether w was
// one of them.
func copyRunsGo(w, panels int, dp, sp unsafe.Pointer, rows int, ds, ss, dps uintptr) bool {
	var f func(dp, sp unsafe.Pointer, rows int, ds, ss uintptr)
	switch w {
	case 4:
		f = rowCopy[[4]float32]
	case 6:
		f = rowCopy[[6]float32]
	case 8:
		f = rowCopy[[8]float32]
	case 14:
		f = rowCopy[[14]float32]
	case 16:
		f = rowCopy[[16]float32]
	case 32:
		f = rowCopy[[32]float32]
	case 64:
		f = rowCopy[[64]float32]
	default:
		return false
	}
	for p := range uintptr(panels) {
		f(unsafe.Add(dp, p*dps), unsafe.Add(sp, p*uintptr(4*w)), rows, ds, ss)
	}
	return true
}

// packCopyGo implements packCopy in Go.
func packCopyGo(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int) {
	packCopyRuns(dst, w, src, ld, r0, c0, kc, cnt, copyRunsGo)
}

// packCopyRuns implements packCopy with runs copying the rows of the
// whole panels, strip by strip (when it can); a partial panel, zero-padded,
// is copied here.
func packCopyRuns(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int,
	runs func(w, panels int, dp, sp unsafe.Pointer, rows int, ds, ss, dps uintptr) bool) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	dst = dst[:np*w*kc]
	_ = src[(r0+kc-1)*ld+c0+cnt-1]
	_ = src[r0*ld+c0]
	ds, ss, dps := uintptr(w)*4, uintptr(ld)*4, uintptr(w*kc)*4
	full := cnt / w
	for q0 := 0; q0 < kc; q0 += packStrip {
		rows := min(packStrip, kc-q0)
		s := 0
		if full > 0 && runs(w, full, unsafe.Pointer(&dst[q0*w]), unsafe.Pointer(&src[(r0+q0)*ld+c0]), rows, ds, ss, dps) {
			s = full
		}
		for ; s < np; s++ {
			n := min(w, cnt-s*w)
			for q := range rows {
				d := dst[s*w*kc+(q0+q)*w:][:w]
				copy(d, src[(r0+q0+q)*ld+c0+s*w:][:n])
				clear(d[n:])
			}
		}
	}
}

// packGatherGo implements packGather in Go, interleaving four source rows
// at a time.
func packGatherGo(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int) {
	packGatherRows(dst, w, src, ld, r0, c0, kc, cnt, gather6, gather8)
}

// packGatherRows implements packGather with g6 and g8 for whole 6-row
// panels and 8-row groups (the signature of gather6).
func packGatherRows(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int,
	g6, g8 func(dp, sp unsafe.Pointer, ss, ds uintptr, kc int)) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	dst = dst[:np*w*kc]
	_ = src[(r0+cnt-1)*ld+c0+kc-1]
	_ = src[r0*ld+c0]
	ds, ss := uintptr(w)*4, uintptr(ld)*4
	for s := 0; s < np; s++ {
		n := min(w, cnt-s*w)
		panel := dst[s*w*kc : (s+1)*w*kc]
		rs := r0 + s*w
		j := 0
		// Whole panels of 6 rows (the AVX2 kernel's A) and groups of 8
		// rows (its B, 16 wide) first: each k-step then writes 24 or 32
		// contiguous bytes.
		if n == 6 && w == 6 {
			g6(unsafe.Pointer(&panel[0]), unsafe.Pointer(&src[rs*ld+c0]), ss, ds, kc)
			j = 6
		}
		for ; w%8 == 0 && j+8 <= n; j += 8 {
			g8(unsafe.Pointer(&panel[j]), unsafe.Pointer(&src[(rs+j)*ld+c0]), ss, ds, kc)
		}
		for ; j+4 <= n; j += 4 {
			dp := unsafe.Pointer(&panel[j])
			s0 := unsafe.Pointer(&src[(rs+j)*ld+c0])
			s1 := unsafe.Add(s0, ss)
			s2 := unsafe.Add(s0, 2*ss)
			s3 := unsafe.Add(s0, 3*ss)
			for q := range uintptr(kc) {
				d := (*[4]float32)(unsafe.Add(dp, q*ds))
				d[0] = *(*float32)(unsafe.Add(s0, 4*q))
				d[1] = *(*float32)(unsafe.Add(s1, 4*q))
				d[2] = *(*float32)(unsafe.Add(s2, 4*q))
				d[3] = *(*float32)(unsafe.Add(s3, 4*q))
			}
		}
		for ; j < n; j++ {
			sr := src[(rs+j)*ld+c0:][:kc]
			for q, v := range sr {
				panel[q*w+j] = v
			}
		}
		if n < w {
			for q := 0; q < kc; q++ {
				clear(panel[q*w+n : q*w+w])
			}
		}
	}
}

// gather6 writes, for q < kc, the 6 floats at sp + i·ss + 4q (i < 6) to
// dp + q·ds: six source rows interleaved. The caller has checked the bounds.
func gather6(dp, sp unsafe.Pointer, ss, ds uintptr, kc int) {
	s1, s2 := unsafe.Add(sp, ss), unsafe.Add(sp, 2*ss)
	s3, s4, s5 := unsafe.Add(sp, 3*ss), unsafe.Add(sp, 4*ss), unsafe.Add(sp, 5*ss)
	for q := range uintptr(kc) {
		d := (*[6]float32)(unsafe.Add(dp, q*ds))
		o := 4 * q
		d[0] = *(*float32)(unsafe.Add(sp, o))
		d[1] = *(*float32)(unsafe.Add(s1, o))
		d[2] = *(*float32)(unsafe.Add(s2, o))
		d[3] = *(*float32)(unsafe.Add(s3, o))
		d[4] = *(*float32)(unsafe.Add(s4, o))
		d[5] = *(*float32)(unsafe.Add(s5, o))
	}
}

// gather8 is gather6 for 8 rows.
func gather8(dp, sp unsafe.Pointer, ss, ds uintptr, kc int) {
	s1, s2, s3 := unsafe.Add(sp, ss), unsafe.Add(sp, 2*ss), unsafe.Add(sp, 3*ss)
	s4, s5, s6, s7 := unsafe.Add(sp, 4*ss), unsafe.Add(sp, 5*ss), unsafe.Add(sp, 6*ss), unsafe.Add(sp, 7*ss)
	for q := range uintptr(kc) {
		d := (*[8]float32)(unsafe.Add(dp, q*ds))
		o := 4 * q
		d[0] = *(*float32)(unsafe.Add(sp, o))
		d[1] = *(*float32)(unsafe.Add(s1, o))
		d[2] = *(*float32)(unsafe.Add(s2, o))
		d[3] = *(*float32)(unsafe.Add(s3, o))
		d[4] = *(*float32)(unsafe.Add(s4, o))
		d[5] = *(*float32)(unsafe.Add(s5, o))
		d[6] = *(*float32)(unsafe.Add(s6, o))
		d[7] = *(*float32)(unsafe.Add(s7, o))
	}
}
