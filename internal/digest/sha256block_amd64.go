//go:build amd64 && !purego

package digest

import "ferry/internal/isa"

// useSHANI says whether sha256Block runs sha256BlockSHANI. Tests clear it
// to run the portable code on the same machine. The code needs SHA and
// SSSE3 (and SSE2, which every amd64 CPU has); SSE4.1 is asked for too,
// though unused, so the choice is the one crypto/sha256 makes (it also
// asks for AVX, for its VEX-encoded moves): every CPU with SHA has both.
var useSHANI = isa.HasSHA && isa.HasSSSE3 && isa.HasSSE41

// sha256BlockSHANI compresses each whole 64-byte block of p into h with
// the SHA extensions (sha256block_amd64.s); only where useSHANI may be
// true.
//
//go:noescape
func sha256BlockSHANI(h *[8]uint32, p []byte)
