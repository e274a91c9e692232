//go:build amd64 && !purego

package optkernel

import "ferry/internal/isa"

//go:generate go run gen.go

// bestISA picks the widest vector loops the CPU (and the system, which
// must save the wider registers) supports, capped by FERRY_CPU (package
// isa). Under GOAMD64=v3 and above the Go compiler fuses multiply-adds in
// the Go loops, and the loops that fuse the same ones (the FMA variants)
// run (Note [host bits]).
func bestISA() string {
	switch {
	case isa.AVX512:
		return "avx512"
	case isa.AVX2:
		return "avx2"
	}
	return "go"
}

// ISAs lists the loops this machine can run, best first, whatever
// FERRY_CPU says (tests compare them all): isa's hardware facts, which
// count a vector width only where the system saves its registers.
func ISAs() []string {
	var isas []string
	if isa.HasAVX512F {
		isas = append(isas, "avx512")
	}
	if isa.HasAVX2 {
		isas = append(isas, "avx2")
	}
	return append(isas, "go")
}

// adamwAVX512 and adamwAVX2 run adamwGo's loop over n elements (n a
// multiple of 16, respectively 8).
//
//go:noescape
func adamwAVX512(w, gr, m, v *float32, n int, c *adamConsts)

//go:noescape
func adamwAVX2(w, gr, m, v *float32, n int, c *adamConsts)

// sgdAVX512 and sgdAVX2 run sgdGo's loop over n elements (n a multiple of
// 16, respectively 8), flags (sgdWD...) choosing its branches; buf may be
// nil without sgdMomentum.
//
//go:noescape
func sgdAVX512(w, gr, buf *float32, n int, c *sgdConsts, flags int)

//go:noescape
func sgdAVX2(w, gr, buf *float32, n int, c *sgdConsts, flags int)

// The FMA variants fuse the multiply-adds Go fuses under GOAMD64=v3 (a
// build that guarantees FMA); the others fuse none.
//
//go:noescape
func adamwFMAAVX512(w, gr, m, v *float32, n int, c *adamConsts)

//go:noescape
func adamwFMAAVX2(w, gr, m, v *float32, n int, c *adamConsts)

//go:noescape
func sgdFMAAVX512(w, gr, buf *float32, n int, c *sgdConsts, flags int)

//go:noescape
func sgdFMAAVX2(w, gr, buf *float32, n int, c *sgdConsts, flags int)
