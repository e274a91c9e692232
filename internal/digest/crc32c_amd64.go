//go:build amd64 && !purego

package digest

import "ferry/internal/isa"

// useSSE42 says whether UpdateCRC32C runs crc32cSSE42. Tests clear it to
// run the portable code on the same machine.
var useSSE42 = isa.HasSSE42

// The CRC32 instruction takes about three cycles but a core can start one
// every cycle, so one chain of them runs at a third of the speed three
// independent chains do. crc32cSSE42 therefore cuts the input into pieces
// of three streams of k bytes, checksums the three streams at once, and
// joins them with the crc32cZeros table for k: first as many pieces as fit
// with the longest k, then with the next, and so on; what is left, under
// three of the shortest streams, runs as one chain. Joining costs a few
// table lookups per piece, so the longest pieces serve long inputs and
// the shorter ones mid-sized inputs and the ends of long ones.
//
// The lengths are multiples of 8, as crc32cSSE42x3 needs, and none is
// near a power of two: streams 4096 bytes apart ran at half the speed on
// the AMD EPYC these were timed on (BenchmarkCRC32C). There 2720, 168 and
// 64 match or beat hash/crc32 from 64 bytes to 1 MiB.
var crc32cStreamLengths = [...]int{2720, 168, 64}

// crc32cTier is one stream length and its join table.
type crc32cTier struct {
	k     int          // bytes in each of the three streams
	zeros *crc32cZeros // feeds k zero bytes
}

// crc32cTiers holds crc32cStreamLengths, longest first, with their
// tables; built only where the assembly may run.
var crc32cTiers []crc32cTier

func init() {
	if useSSE42 {
		for _, k := range crc32cStreamLengths {
			crc32cTiers = append(crc32cTiers, crc32cTier{k, makeCRC32CZeros(k)})
		}
	}
}

// crc32cSSE42 feeds b into the CRC register r (not inverted) with the
// CRC32 instruction.
func crc32cSSE42(r uint32, b []byte) uint32 {
	for i := range crc32cTiers {
		t := &crc32cTiers[i]
		for len(b) >= 3*t.k {
			r = crc32cJoin3(r, b[:3*t.k], t.zeros)
			b = b[3*t.k:]
		}
	}
	return crc32cSSE42Serial(r, b)
}

// crc32cJoin3 feeds p, three streams of k bytes where z is the table for
// k zero bytes, into r. With A, B and C the streams and O k zero bytes,
// crc32cSSE42x3 gives a = feed(r, A), b = feed(0, B), c = feed(0, C), and
// by linearity (crc32cZeros)
//
//	feed(r, A B C) = feed(feed(a, O) ^ b, O) ^ c.
func crc32cJoin3(r uint32, p []byte, z *crc32cZeros) uint32 {
	a, b, c := crc32cSSE42x3(r, p, len(p)/3)
	return z.apply(z.apply(a)^b) ^ c
}

// crc32cSSE42Serial feeds b into r, eight bytes per CRC32Q, then the
// last four, two and one (crc32c_amd64.s).
//
//go:noescape
func crc32cSSE42Serial(r uint32, b []byte) uint32

// crc32cSSE42x3 feeds the three streams p[:k], p[k:2k] and p[2k:3k] into
// r, 0 and 0 respectively (crc32c_amd64.s); k must be a positive multiple
// of 8 and len(p) at least 3k.
//
//go:noescape
func crc32cSSE42x3(r uint32, p []byte, k int) (a, b, c uint32)
