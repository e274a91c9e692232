//go:build amd64 && !purego

package gemm

import "unsafe"

// tr16x16h is tr16x16 on 32-bit elements (bfloat16 pairs) of rows whose
// stride lds is in 2-byte elements. Requires AVX-512F.
//
//go:noescape
func tr16x16h(src *uint16, lds, nrows int, dst *float32, ldd int, mask uint16)

// pairRows512 interleaves pairs of rows into bfloat16 pairs (see the
// assembly). Requires AVX-512F.
//
//go:noescape
func pairRows512(dst *uint32, src *uint16, ld, pairs, nfull int, mask uint16, nzero int)

// pairRowsNarrow is pairRows512 for panels narrower than 16 (see the
// assembly). Requires AVX-512F.
//
//go:noescape
func pairRowsNarrow(dst *uint32, w int, src *uint16, ld, pairs int, lmask, smask uint16)

// pairCopy512 is pairCopy with AVX-512 for panels of a multiple of 16
// columns or of fewer than 16; the last step of an odd kc in Go.
func pairCopy512(dst []uint32, w int, src []uint16, ld, r0, c0, kc, cnt int) {
	if w%16 != 0 && w > 16 {
		pairCopy(dst, w, src, ld, r0, c0, kc, cnt)
		return
	}
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	kp := (kc + 1) / 2
	dst = dst[:np*w*kp]
	_ = src[(r0+kc-1)*ld+c0+cnt-1]
	for s := 0; s < np; s++ {
		n := min(w, cnt-s*w)
		switch {
		case kc < 2:
		case w < 16:
			pairRowsNarrow(&dst[s*w*kp], w, &src[r0*ld+c0+s*w], ld, kc/2, uint16(1)<<n-1, uint16(1)<<w-1)
		default:
			nfull, rem := n/16, n%16
			nzero := w/16 - nfull
			if rem > 0 {
				nzero--
			}
			pairRows512(&dst[s*w*kp], &src[r0*ld+c0+s*w], ld, kc/2, nfull, uint16(1)<<rem-1, nzero)
		}
		if kc%2 == 1 {
			d := dst[s*w*kp+(kp-1)*w:][:w]
			for j, v := range src[(r0+kc-1)*ld+c0+s*w:][:n] {
				d[j] = uint32(v)
			}
			clear(d[n:])
		}
	}
}

// pairGather512 is pairGather with 16×16 AVX-512 transposes of 32-bit
// pairs; the last (kc/2)%16 pairs and the half pair of an odd kc in Go.
func pairGather512(dst []uint32, w int, src []uint16, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	kp := (kc + 1) / 2
	dst = dst[:np*w*kp]
	_ = src[(r0+cnt-1)*ld+c0+kc-1]
	k16 := (kc / 2) &^ 15
	for s := 0; s < np; s++ {
		panel := dst[s*w*kp : (s+1)*w*kp]
		n := min(w, cnt-s*w)
		rs := r0 + s*w
		for j0 := 0; j0 < w; j0 += 16 {
			rows := max(0, min(16, n-j0))
			mask := uint16(1)<<min(16, w-j0) - 1
			if w-j0 >= 16 {
				mask = 0xFFFF
			}
			for q0 := 0; q0 < k16; q0 += 16 {
				sp := &src[0] // not read when rows == 0
				if rows > 0 {
					sp = &src[(rs+j0)*ld+c0+2*q0]
				}
				tr16x16h(sp, ld, rows, (*float32)(unsafe.Pointer(&panel[q0*w+j0])), w, mask)
			}
		}
		for q := k16; q < kp; q++ {
			d := panel[q*w : q*w+w]
			for j := 0; j < n; j++ {
				row := src[(rs+j)*ld+c0:]
				v := uint32(row[2*q])
				if 2*q+1 < kc {
					v |= uint32(row[2*q+1]) << 16
				}
				d[j] = v
			}
			clear(d[n:])
		}
	}
}
