package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackPrimitives checks packCopy and packGather of every kernel variant
// against a direct implementation of the layout, writing into a buffer full
// of NaNs so that missing zero padding is caught.
func TestPackPrimitives(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const ld = 203
	src := randSlice(r, 300*ld)
	nan := float32(math.NaN())
	for _, kern := range allKernels() {
		for _, w := range []int{kern.mr, kern.nr} {
			for _, kc := range []int{1, 5, 15, 16, 17, 33, 64} {
				for _, cnt := range []int{1, 4, 6, 8, 14, w / 2, w - 2, w - 1, w, w + 1, w + 4, 2*w + 3, 3 * w} {
					if cnt < 1 {
						continue
					}
					r0, c0 := r.IntN(20), r.IntN(20)
					np := (cnt + w - 1) / w
					for _, gather := range []bool{false, true} {
						name := fmt.Sprintf("%s/w%d/kc%d/cnt%d/gather%v", kern.name, w, kc, cnt, gather)
						dst := make([]float32, np*w*kc+7)
						for i := range dst {
							dst[i] = nan
						}
						if gather {
							kern.packGather(dst, w, src, ld, r0, c0, kc, cnt)
						} else {
							kern.packCopy(dst, w, src, ld, r0, c0, kc, cnt)
						}
						for s := 0; s < np; s++ {
							for q := 0; q < kc; q++ {
								for j := 0; j < w; j++ {
									x := s*w + j
									var want float32
									if x < cnt {
										if gather {
											want = src[(r0+x)*ld+c0+q]
										} else {
											want = src[(r0+q)*ld+c0+x]
										}
									}
									if got := dst[s*w*kc+q*w+j]; got != want {
										t.Fatalf("%s: panel %d [q=%d][j=%d] = %v, want %v", name, s, q, j, got, want)
									}
								}
							}
						}
						for i := np * w * kc; i < len(dst); i++ {
							if !math.IsNaN(float64(dst[i])) {
								t.Fatalf("%s: wrote past the panels at %d", name, i)
							}
						}
					}
				}
			}
		}
	}
}
