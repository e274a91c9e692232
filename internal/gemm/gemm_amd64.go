//go:build amd64 && !purego

package gemm

import "ferry/internal/isa"

//go:generate go run gen_kernels.go

//go:noescape
func kernAVX512x14x32(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernAVX512x6x64(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernAVX2x6x16(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// The VDPBF16PS kernels take panels of bfloat16 pairs (pack_bf16.go).

//go:noescape
func kernBF16x14x32(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernBF16x6x64(kc int, a, b, c *float32, ldc int, alpha, beta float32)

func registerArch() {
	if isa.AVX512 {
		// 6×64 first: it is the default; 14×32 for narrow products.
		register("avx512", &kernelInfo{name: "avx512/6x64", fn: kernAVX512x6x64, mr: 6, nr: 64,
			mc: 192, kc: 256, nc: 2048, packCopy: packCopy512, packGather: packGather512})
		register("avx512", &kernelInfo{name: "avx512/14x32", fn: kernAVX512x14x32, mr: 14, nr: 32,
			mc: 168, kc: 256, nc: 2048, cost: 1.05, packCopy: packCopy512, packGather: packGather512})
	}
	if isa.AVX512BF16 {
		// kc counts k-steps: 512 bfloat16 steps fill a panel as 256 floats do.
		bf16Dot = &family{name: "avx512bf16", variants: []*kernelInfo{
			{name: "avx512bf16/6x64", fn: kernBF16x6x64, mr: 6, nr: 64, mc: 192, kc: 512, nc: 2048, cost: 1,
				pairs: true, pairCopy: pairCopy512, pairGather: pairGather512},
			{name: "avx512bf16/14x32", fn: kernBF16x14x32, mr: 14, nr: 32, mc: 168, kc: 512, nc: 2048, cost: 1.05,
				pairs: true, pairCopy: pairCopy512, pairGather: pairGather512},
		}}
	}
	if isa.AVX2 {
		register("avx2", &kernelInfo{name: "avx2/6x16", fn: kernAVX2x6x16, mr: 6, nr: 16,
			mc: 144, kc: 256, nc: 2048, packCopy: packCopyAVX2, packGather: packGatherAVX2})
	}
}

// tr16x16 loads nrows (≤16) rows of 16 floats from src (stride lds; missing
// rows are zero), transposes the block and stores column t at dst+t*ldd,
// writing only the lanes set in mask. Requires AVX-512F.
//
//go:noescape
func tr16x16(src *float32, lds, nrows int, dst *float32, ldd int, mask uint16)

// copy16 copies nrows rows: lanes lmask of src (others zero) are stored to
// the lanes smask of dst; strides lds and ldd. Requires AVX-512F.
//
//go:noescape
func copy16(src *float32, lds, nrows int, dst *float32, ldd int, lmask, smask uint16)

// packCopy512 implements packCopy with AVX-512 masked copies.
func packCopy512(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	dst = dst[:np*w*kc]
	_ = src[(r0+kc-1)*ld+c0+cnt-1]
	for q0 := 0; q0 < kc; q0 += packStrip {
		rows := min(packStrip, kc-q0)
		for s := 0; s < np; s++ {
			base := s*w*kc + q0*w
			for j0 := 0; j0 < w; j0 += 16 {
				n := max(0, min(16, cnt-s*w-j0))
				smask := uint16(1)<<min(16, w-j0) - 1
				if w-j0 >= 16 {
					smask = 0xFFFF
				}
				sp := &dst[0] // not read when n == 0 (zero fill)
				if n > 0 {
					sp = &src[(r0+q0)*ld+c0+s*w+j0]
				}
				copy16(sp, ld, rows, &dst[base+j0], w, uint16(1)<<n-1, smask)
			}
		}
	}
}

// packGather512 implements packGather with 16×16 AVX-512 register
// transposes; the last kc%16 steps are done in Go.
func packGather512(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int) {
	if kc == 0 || cnt == 0 {
		return
	}
	np := (cnt + w - 1) / w
	dst = dst[:np*w*kc]
	_ = src[(r0+cnt-1)*ld+c0+kc-1]
	k16 := kc &^ 15
	for s := 0; s < np; s++ {
		panel := dst[s*w*kc : (s+1)*w*kc]
		n := min(w, cnt-s*w)
		rs := r0 + s*w
		for j0 := 0; j0 < w; j0 += 16 {
			rows := max(0, min(16, n-j0))
			mask := uint16(1)<<min(16, w-j0) - 1
			if w-j0 >= 16 {
				mask = 0xFFFF
			}
			for q0 := 0; q0 < k16; q0 += 16 {
				sp := &panel[0] // not read when rows == 0
				if rows > 0 {
					sp = &src[(rs+j0)*ld+c0+q0]
				}
				tr16x16(sp, ld, rows, &panel[q0*w+j0], w, mask)
			}
		}
		for q := k16; q < kc; q++ {
			d := panel[q*w : q*w+w]
			for j := 0; j < n; j++ {
				d[j] = src[(rs+j)*ld+c0+q]
			}
			clear(d[n:])
		}
	}
}
