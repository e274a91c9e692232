package cpu

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"ferry/device"
	"ferry/internal/blas"
	"ferry/internal/gemm"
)

// Gemm runs each matrix product of the batch through OpenBLAS when the
// rule of useBLAS picks it (FERRY_BLAS=off forbids it; Note [OpenBLAS on
// one thread] says how it is threaded), and through the pure-Go kernel of
// package gemm otherwise. Products of bfloat16 run in package gemm
// (gemmBF16).
func (k *kernels) Gemm(p device.GemmParams) error {
	if p.Mixed() {
		if err := device.CheckGemmTypes("cpu", p); err != nil {
			return err
		}
		gemmBF16(p)
		return nil
	}
	a, b, c := floats(device.View{Block: p.A, Off: p.OffA}), floats(device.View{Block: p.B, Off: p.OffB}), floats(device.View{Block: p.C, Off: p.OffC})
	for i := 0; i < p.Batch; i++ {
		sgemm(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, a[i*p.StrideA:], p.LDA, b[i*p.StrideB:], p.LDB, p.Beta, c[i*p.StrideC:], p.LDC)
	}
	return nil
}

// sgemm is one row-major product, through OpenBLAS or the pure-Go kernel.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !choose(MatmulShape{transA, transB, m, n, k, lda, ldb, ldc, true}) {
		gemm.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if blasOwnThreads() {
		blasSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		blasCalled()
		return
	}
	blasSplit(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmSerial is sgemm on the calling goroutine alone (OpenBLAS on one
// thread: callers check blasOwnThreads).
func sgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !choose(MatmulShape{transA, transB, m, n, k, lda, ldb, ldc, false}) {
		gemm.SgemmSerial(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	blasSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func blasSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.Sgemm(transA, transB, m, n, k, alpha, unsafe.Pointer(&a[0]), lda, unsafe.Pointer(&b[0]), ldb, beta, unsafe.Pointer(&c[0]), ldc)
}

// Note [OpenBLAS on one thread]. OpenBLAS's own threads (Note [OpenBLAS
// threads]) poll for work for about 64 ms after each product, yielding the
// core between polls: in a training step they never sleep. A CPU profile of
// the baby GPT's step with OpenBLAS (forced AVX2, docs/perf.md "AVX2") had
// 15% of its samples in sched_yield, in the kernel on its behalf, with the
// Go work confined to one goroutine meanwhile; and the small products (an
// attention head's) ran at 1-22 GFLOP/s on OpenBLAS's two threads against
// 19-58 split by ferry over two one-thread calls, under load. So the CPU
// device sets OpenBLAS to one thread
// and parallelises around it: a large product is cut into blocks of rows
// (or of columns, when C is wider than tall) that ferry's goroutines claim
// one at a time (blasSplit), each an OpenBLAS call on its own goroutine;
// an attention runs its heads in parallel (Note [attention heads]). The
// blocks depend only on the shape and, beyond 2 cores, on GOMAXPROCS (not
// on which goroutines took part); the result may differ from one OpenBLAS
// call's in the last bit (OpenBLAS rounds some rows differently by where
// they fall), as OpenBLAS's own threads' results differ with their number.
// FERRY_BLAS_THREADS=openblas keeps OpenBLAS's own threads instead.

// blasOwnThreads reports whether OpenBLAS runs products on its own threads
// (FERRY_BLAS_THREADS=openblas, or a library that cannot be set to one
// thread); otherwise it has been set to one thread, on the first call.
var blasOwnThreads = sync.OnceValue(func() bool {
	if strings.TrimSpace(os.Getenv("FERRY_BLAS_THREADS")) == "openblas" {
		return true
	}
	return !blas.SetThreads(1)
})

// blasSplitMin is the least work (multiply-adds) split across goroutines:
// about 0.1 ms on one core.
const blasSplitMin = 1 << 22

// blasSplitMax is the most blocks a product is cut into: two per
// goroutine, at least 4. Each block packs the whole of the operand it
// shares with the others: with 8 blocks on 2 cores a split product cost
// 2.5-15% more CPU time than one call, with 4 blocks 0-5% (forced AVX2,
// the GPT step's Linear products).
func blasSplitMax() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// blasSplit runs a product as one-thread OpenBLAS calls on blocks of C's
// rows (or columns, when C is wide) claimed by ferry's goroutines: up to
// blasSplitMax blocks of a multiple of 16 rows, no smaller than
// blasSplitMin each but at least 2.
func blasSplit(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	work := m * n * k
	if work < blasSplitMin {
		blasSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	const align = 16
	if m >= n {
		blocks := min((m+align-1)/align, max(2, work/blasSplitMin), blasSplitMax())
		step := (m + blocks - 1) / blocks
		step = (step + align - 1) / align * align
		parallelEach((m+step-1)/step, func(i int) {
			r0 := i * step
			rows := min(step, m-r0)
			ao := r0 * lda
			if transA {
				ao = r0
			}
			blasSgemm(transA, transB, rows, n, k, alpha, a[ao:], lda, b, ldb, beta, c[r0*ldc:], ldc)
		})
		return
	}
	blocks := min((n+align-1)/align, max(2, work/blasSplitMin), blasSplitMax())
	step := (n + blocks - 1) / blocks
	step = (step + align - 1) / align * align
	parallelEach((n+step-1)/step, func(j int) {
		c0 := j * step
		cols := min(step, n-c0)
		bo := c0
		if transB {
			bo = c0 * ldb
		}
		blasSgemm(transA, transB, m, cols, k, alpha, a, lda, b[bo:], ldb, beta, c[c0:], ldc)
	})
}
