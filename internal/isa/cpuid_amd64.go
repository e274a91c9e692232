//go:build amd64 && gc

package isa

// cpuid executes CPUID with EAX=leaf and ECX=subleaf (cpuid_amd64.s).
// This is detection, not a fast path, so purego builds keep it, as they
// kept golang.org/x/sys/cpu's.
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// xgetbv returns XCR0 (cpuid_amd64.s). Call it only where CPUID leaf 1
// reports OSXSAVE: without it the instruction faults.
func xgetbv() (eax, edx uint32)

// CPUID bits, as the Intel and AMD manuals number them.
const (
	// leaf 1, ECX
	bitSSSE3   = 1 << 9
	bitFMA     = 1 << 12
	bitSSE41   = 1 << 19
	bitSSE42   = 1 << 20
	bitOSXSAVE = 1 << 27
	// leaf 7 subleaf 0, EBX
	bitAVX2     = 1 << 5
	bitAVX512F  = 1 << 16
	bitSHA      = 1 << 29
	bitAVX512BW = 1 << 30
	// leaf 7 subleaf 1, EAX
	bitAVX512BF16 = 1 << 5
)

// XCR0 bits: the register states the system saves.
const (
	xcr0SSE    = 1 << 1               // XMM
	xcr0AVX    = 1 << 2               // upper halves of YMM
	xcr0AVX512 = 1<<5 | 1<<6 | 1<<7   // opmask, upper halves of ZMM0-15, ZMM16-31
	xcr0YMM    = xcr0SSE | xcr0AVX    // what AVX needs
	xcr0ZMM    = xcr0YMM | xcr0AVX512 // what AVX-512 needs
)

// detect sets the Has* facts, and hasFMA, hasAVX512BW and hasAVX512BF16,
// from CPUID, by golang.org/x/sys/cpu's rules for x86: AVX2 needs the system
// to save YMM; the AVX-512 facts need it to save opmask and ZMM state too
// (osSavesZMM); FMA, SSSE3, SSE4.x and SHA are the CPUID bits alone.
func detect() {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 1 {
		return
	}
	_, _, ecx1, _ := cpuid(1, 0)
	HasSSSE3 = ecx1&bitSSSE3 != 0
	HasSSE41 = ecx1&bitSSE41 != 0
	HasSSE42 = ecx1&bitSSE42 != 0
	hasFMA = ecx1&bitFMA != 0

	var osYMM, osZMM bool
	if ecx1&bitOSXSAVE != 0 {
		xcr0, _ := xgetbv()
		osYMM = xcr0&xcr0YMM == xcr0YMM
		osZMM = osYMM && osSavesZMM(xcr0)
	}

	if maxLeaf < 7 {
		return
	}
	eax7, ebx7, _, _ := cpuid(7, 0)
	HasSHA = ebx7&bitSHA != 0
	HasAVX2 = ebx7&bitAVX2 != 0 && osYMM
	HasAVX512F = ebx7&bitAVX512F != 0 && osZMM
	if HasAVX512F {
		hasAVX512BW = ebx7&bitAVX512BW != 0
		if eax7 >= 1 { // subleaf 1 exists
			eax71, _, _, _ := cpuid(7, 1)
			hasAVX512BF16 = eax71&bitAVX512BF16 != 0
		}
	}
}
