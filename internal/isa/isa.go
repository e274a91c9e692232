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
//
// The package asks the CPU itself (CPUID and XGETBV, cpuid_amd64.s) and
// applies the rules golang.org/x/sys/cpu applies, so that it need not be
// linked in: a vector extension counts only where the operating system
// saves its registers on a context switch, and GODEBUG=cpu.<name>=off
// turns a feature off as it does there (gdebug.go). The Has* facts are
// the hardware's, before FERRY_CPU; they are all false off amd64.
package isa

import (
	"fmt"
	"os"
	"strings"
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

// The hardware facts, whatever FERRY_CPU says (GODEBUG=cpu.<name>=off
// still clears them, as golang.org/x/sys/cpu's do).
var (
	// HasAVX2 reports AVX2, with the system saving the YMM registers
	// (x/sys/cpu's X86.HasAVX2).
	HasAVX2 bool
	// HasAVX512F reports AVX-512 Foundation, with the system saving the
	// opmask and ZMM registers (x/sys/cpu's X86.HasAVX512F).
	HasAVX512F bool
	// HasSHA reports the SHA extensions (SHA256RNDS2, SHA256MSG1,
	// SHA256MSG2 on XMM registers): CPUID leaf 7, EBX bit 29.
	HasSHA bool
	// HasSSSE3 reports SSSE3 (PSHUFB, PALIGNR): CPUID leaf 1, ECX bit 9.
	HasSSSE3 bool
	// HasSSE41 reports SSE4.1: CPUID leaf 1, ECX bit 19.
	HasSSE41 bool
	// HasSSE42 reports SSE4.2 (the CRC32 instruction, which computes
	// CRC-32C): CPUID leaf 1, ECX bit 20.
	HasSSE42 bool
)

// Facts only AVX2, AVX512 and AVX512BF16 are derived from. hasFMA, like
// x/sys/cpu's HasFMA, is the CPUID bit alone; detect sets hasAVX512BW and
// hasAVX512BF16 only where it sets HasAVX512F.
var hasFMA, hasAVX512BW, hasAVX512BF16 bool

func init() {
	detect() // cpuid_amd64.go, or cpuid_other.go: all false
	disable(os.Getenv("GODEBUG"), features())
	AVX2 = HasAVX2 && hasFMA
	AVX512 = AVX2 && HasAVX512F
	AVX512BF16 = AVX512 && hasAVX512BW && hasAVX512BF16
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
