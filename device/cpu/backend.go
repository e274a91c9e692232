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
// Auto never times anything itself, so a machine always gets the same
// library (and the same bits). Where this machine has a table measured by
// `ferry tune` (Note [matmul table]), auto follows it for the shape classes
// it holds. Elsewhere it follows a fixed rule: the pure-Go kernel where the
// CPU has AVX-512, where its 6×64 micro-kernel beat OpenBLAS (about 300
// against 180 GFLOP/s at 1024³ on the 2-core VM this was written on; see
// docs/perf.md); OpenBLAS elsewhere when it loads: with AVX2 only
// (FERRY_CPU=avx2 against OpenBLAS's Haswell kernels), OpenBLAS took
// 2-40% less CPU time than the Go AVX2 kernel on each of the GPT step's 21
// product shapes timed alone (BenchmarkGemmChoice, docs/perf.md "AVX2"),
// though later whole steps of that GPT ran faster on pure Go (docs/perf.md
// "AVX2, second pass"): the rule is a default, the table the answer; pure
// Go where OpenBLAS does not load.
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
// the table of this machine where it has one, and the rule above
// elsewhere. The environment variable FERRY_MATMUL sets it at start;
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

// MatmulForced names the library FERRY_MATMUL or SetMatmulBackend forced
// ("go" or "blas"), or "" in auto mode, the one mode that reads a table.
func MatmulForced() string {
	switch matmulMode.Load() {
	case 1:
		return "go"
	case 2:
		return "blas"
	}
	return ""
}

// useBLAS reports whether the fixed rule (or the forced mode) takes
// OpenBLAS: what a product whose class the table does not hold runs on.
func useBLAS() bool {
	switch matmulMode.Load() {
	case 1:
		return false
	case 2:
		return blas.Available()
	}
	return RuleLibrary() == libBLAS && blas.Available()
}

// choose reports whether OpenBLAS runs the product s: in auto mode by the
// table's choice for its class where it has one (Note [matmul table]),
// else by useBLAS. It records s while RecordMatmulShapes is on, and counts
// the product under its library.
func choose(s MatmulShape) bool {
	if recording.Load() {
		record(s)
	}
	use := useBLAS()
	if matmulMode.Load() == 0 && blas.Available() {
		if t := activeTable().t; t != nil {
			if b, ok := t.Lookup(s); ok {
				use = b
			}
		}
	}
	if use {
		blasOwnThreads() // sets OpenBLAS to one thread before its first product
		matmulCalls[1].Add(1)
	} else {
		matmulCalls[0].Add(1)
	}
	return use
}

// matmulCalls counts the products run in pure Go ([0]) and in OpenBLAS
// ([1]) since the process started.
var matmulCalls [2]atomic.Int64

// MatmulCalls is how many float32 products the CPU devices have run on
// each library since the process started: benchmarks print it to say
// which path the products took.
func MatmulCalls() (goCalls, blasCalls int64) {
	return matmulCalls[0].Load(), matmulCalls[1].Load()
}

// MatmulBackend says which library runs matrix products, and why: "openblas
// (path)" or "pure Go (kernel), because …".
func MatmulBackend() string {
	return matmulRule() + matmulTableNote()
}

// matmulTableNote says how the table in use (Note [matmul table]) departs
// from the rule, or why a table file was refused; "" without one.
func matmulTableNote() string {
	if matmulMode.Load() != 0 || !blas.Available() {
		return ""
	}
	t, from, refused := MatmulTableInUse()
	if t == nil {
		switch {
		case refused != "":
			return "; no per-shape table: " + refused
		case from == "":
			return "; no per-shape table measured here yet (ferry tune --model NAME measures one)"
		}
		return ""
	}
	onGo, onBLAS := 0, 0
	for _, b := range t.byClass {
		if b {
			onBLAS++
		} else {
			onGo++
		}
	}
	return fmt.Sprintf("; per shape, the measured table %s: %d shape classes on pure Go, %d on OpenBLAS, others by the rule", from, onGo, onBLAS)
}

// matmulRule is MatmulBackend without the table.
func matmulRule() string {
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
// CPU (CPUName), the vector instruction set of its loops (FERRY_CPU caps
// it), the pure-Go GEMM kernel, MatmulBackend's choice, and the kernel of
// bfloat16 products (always pure Go). Benchmarks print it.
func Paths() string {
	return "cpu " + CPUName() + ", simd " + isa.Level() + ", gemm kernel " + gemm.Kernel() + ", matrix products: " + MatmulBackend() +
		"; bfloat16 products: " + gemm.KernelBF16() + " kernel"
}
