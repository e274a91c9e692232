// Package isa says which x86 vector instruction sets ferry's assembly may
// use: the CPU's own, capped by the environment variable FERRY_CPU, read
// once when the program starts.
//
//	FERRY_CPU=avx512   the default where the CPU has AVX-512F (and the
//	                   bfloat16 dot products of AVX512_BF16 where it has them)
//	FERRY_CPU=avx2     AVX2 and FMA only: what an AVX2-only CPU runs (the
//	                   GEMM micro-kernel, the elementwise loops, exp)
//	FERRY_CPU=generic  no assembly: the portable Go loops everywhere
//
// A level above what the CPU has is ignored (with a message on standard
// error). FERRY_CPU caps every SIMD path of the CPU device and of package
// gemm at once, so that a machine with AVX-512 can run, test and time the
// paths an AVX2-only machine takes; FERRY_GEMM_KERNEL still picks the GEMM
// micro-kernel alone. Neither changes what OpenBLAS runs: its own
// OPENBLAS_CORETYPE does (Haswell is its AVX2 kernel).
package isa

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/cpu"
)

var (
	// AVX2 reports whether AVX2 and FMA may be used.
	AVX2 bool
	// AVX512 reports whether AVX-512F may be used (AVX2 is then true too).
	AVX512 bool
	// AVX512BF16 reports whether AVX512_BF16 (VDPBF16PS, VCVTNEPS2BF16)
	// may be used, with AVX-512BW (AVX512 is then true too).
	AVX512BF16 bool
)

func init() {
	AVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	AVX512 = AVX2 && cpu.X86.HasAVX512F
	AVX512BF16 = AVX512 && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16
	if v := os.Getenv("FERRY_CPU"); v != "" {
		if err := lower(v); err != nil {
			fmt.Fprintf(os.Stderr, "ferry: FERRY_CPU=%s ignored: %v\n", v, err)
		}
	}
}

// lower lowers the level to name.
func lower(name string) error {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "avx512":
		if !AVX512 {
			return fmt.Errorf("this CPU's best is %s", Level())
		}
	case "avx2":
		if !AVX2 {
			return fmt.Errorf("this CPU's best is %s", Level())
		}
		AVX512, AVX512BF16 = false, false
	case "generic", "go", "none":
		AVX2, AVX512, AVX512BF16 = false, false, false
	default:
		return fmt.Errorf("unknown level (known: avx512, avx2, generic)")
	}
	return nil
}

// Level names the level in use: "avx512", "avx2" or "generic".
func Level() string {
	switch {
	case AVX512:
		return "avx512"
	case AVX2:
		return "avx2"
	}
	return "generic"
}
