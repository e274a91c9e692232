package gemm

// Naive is the reference implementation used by the tests: a plain triple
// loop with float64 accumulation (each product and the sum are computed in
// float64 and rounded to float32 once, when stored), so it is usually more
// accurate than Sgemm. Conventions are those of Sgemm, including not reading
// C when beta == 0 and not reading A and B when alpha == 0.
func Naive(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			if alpha != 0 {
				for p := 0; p < k; p++ {
					var av, bv float32
					if transA {
						av = a[p*lda+i]
					} else {
						av = a[i*lda+p]
					}
					if transB {
						bv = b[j*ldb+p]
					} else {
						bv = b[p*ldb+j]
					}
					s += float64(av) * float64(bv)
				}
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(v)
		}
	}
}
