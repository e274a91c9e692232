package cpu

import (
	"fmt"
	"os"
	"sync/atomic"

	"ferry/internal/blas"
	"ferry/internal/gemm"
	"ferry/internal/isa"
)

// matmulMode chooses the matrix-product library for every CPU device of the
// process: 0 auto, 1 pure Go, 2 OpenBLAS.
//
// Auto picks by a fixed rule, never by timing, so a machine always gets the
// same library (and the same bits): the pure-Go kernel where the CPU has
// AVX-512, where its 6×64 micro-kernel beats OpenBLAS (about 300 against
// 180 GFLOP/s at 1024³ on the 2-core Zen 5 this was written on; see
// docs/perf.md); OpenBLAS elsewhere when it loads, for every shape: with
// AVX2 only (FERRY_CPU=avx2 against OpenBLAS's Haswell kernels), OpenBLAS
// took 2-40% less CPU time than the Go AVX2 kernel on each of the GPT
// step's 21 product shapes and on squares from 32 to 128, and tied on
// smaller ones (BenchmarkGemmChoice, docs/perf.md "AVX2"), so no shape
// is better served by Go there; pure Go otherwise.
var matmulMode atomic.Int32

func init() {
	if v := os.Getenv("FERRY_MATMUL"); v != "" {
		if err := SetMatmulBackend(v); err != nil {
			fmt.Fprintf(os.Stderr, "ferry: FERRY_MATMUL=%s ignored: %v\n", v, err)
		}
	}
}

// SetMatmulBackend chooses which library runs matrix products, for every CPU
// device of the process: "go" forces the pure-Go kernel, "blas" requires
// OpenBLAS (an error when it cannot be loaded), "auto" (the default) uses
// the rule above. The environment variable FERRY_MATMUL sets it at start;
// FERRY_BLAS=off still forbids OpenBLAS. It is safe to call at any time; a
// batched product running meanwhile may use both.
func SetMatmulBackend(name string) error {
	switch name {
	case "auto", "":
		matmulMode.Store(0)
	case "go":
		matmulMode.Store(1)
	case "blas":
		if !blas.Available() {
			return fmt.Errorf("cpu: no native BLAS: %s", blas.Reason())
		}
		matmulMode.Store(2)
	default:
		return fmt.Errorf("cpu: unknown matmul backend %q (known: auto, go, blas)", name)
	}
	return nil
}

func useBLAS() bool {
	switch matmulMode.Load() {
	case 1:
		return false
	case 2:
		return blas.Available()
	}
	return gemm.Kernel() != "avx512" && blas.Available()
}

// MatmulBackend says which library runs matrix products, and why: "openblas
// (path)" or "pure Go (kernel), because …".
func MatmulBackend() string {
	if useBLAS() {
		if blasOwnThreads() {
			return "openblas (" + blas.Library() + ") on its own threads"
		}
		return "openblas (" + blas.Library() + ") on one thread per goroutine, large products split by ferry"
	}
	var why string
	switch {
	case matmulMode.Load() == 1:
		why = "it was chosen (SetMatmulBackend or FERRY_MATMUL=go)"
	case os.Getenv("FERRY_BLAS") != "" && !blas.Available():
		why = "FERRY_BLAS=" + os.Getenv("FERRY_BLAS")
	case !blas.Available():
		why = blas.Reason()
	default:
		why = "this CPU has AVX-512, where it is faster than OpenBLAS (FERRY_MATMUL=blas uses OpenBLAS, loaded from " + blas.Library() + ")"
	}
	return "pure Go (" + gemm.Kernel() + " kernel), because " + why
}

// Paths says which code runs the CPU device's work on this machine: the
// vector instruction set of its loops (FERRY_CPU caps it), the pure-Go
// GEMM kernel, MatmulBackend's choice, and the kernel of bfloat16
// products (always pure Go). Benchmarks print it.
func Paths() string {
	return "simd " + isa.Level() + ", gemm kernel " + gemm.Kernel() + ", matrix products: " + MatmulBackend() +
		"; bfloat16 products: " + gemm.KernelBF16() + " kernel"
}
