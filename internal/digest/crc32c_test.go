package digest

import (
	"hash/crc32"
	"math/rand"
	"testing"
)

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

func TestCRC32CKnown(t *testing.T) {
	forEachPath(t, &useSSE42, func(t *testing.T) {
		// The check value of CRC-32C, and RFC 3720's 32 zero bytes.
		if got := CRC32C([]byte("123456789")); got != 0xe3069283 {
			t.Errorf("CRC32C(123456789) = %#08x, want 0xe3069283", got)
		}
		if got := CRC32C(make([]byte, 32)); got != 0x8a9136aa {
			t.Errorf("CRC32C(32 zeros) = %#08x, want 0x8a9136aa", got)
		}
	})
}

func TestCRC32CMatchesStdlib(t *testing.T) {
	forEachPath(t, &useSSE42, func(t *testing.T) {
		rng := rand.New(rand.NewSource(4))
		for i, n := range testLengths(rng) {
			b := randomBytes(rng, n, 1+2*(i%4))
			want := crc32.Checksum(b, castagnoliTable)
			if got := CRC32C(b); got != want {
				t.Fatalf("CRC32C of %d bytes: %#08x, want %#08x", n, got, want)
			}
			// Update from a nonzero checksum, and in random pieces.
			seed := rng.Uint32()
			if got, want := UpdateCRC32C(seed, b), crc32.Update(seed, castagnoliTable, b); got != want {
				t.Fatalf("UpdateCRC32C(%#x) of %d bytes: %#08x, want %#08x", seed, n, got, want)
			}
			var crc uint32
			for rest := b; len(rest) > 0; {
				k := rng.Intn(len(rest) + 1)
				crc = UpdateCRC32C(crc, rest[:k])
				rest = rest[k:]
			}
			if crc != want {
				t.Fatalf("%d bytes in pieces: %#08x, want %#08x", n, crc, want)
			}
		}
	})
}

// The join tables feed zero bytes: checked against feeding them one by
// one, for the lengths the assembly uses and a few others.
func TestCRC32CZeros(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, n := range []int{0, 1, 3, 8, 64, 100, 168, 256, 2720, 4096} {
		z := makeCRC32CZeros(n)
		zeros := make([]byte, n)
		for range 50 {
			r := rng.Uint32()
			if got, want := z.apply(r), crc32cGeneric(r, zeros); got != want {
				t.Fatalf("%d zeros from %#08x: %#08x, want %#08x", n, r, got, want)
			}
		}
	}
}

func FuzzCRC32C(f *testing.F) {
	f.Add([]byte(""), uint32(0))
	f.Add([]byte("123456789"), uint32(0xffffffff))
	f.Add(make([]byte, 3*256+5), uint32(7))
	f.Fuzz(func(t *testing.T, b []byte, seed uint32) {
		want := crc32.Update(seed, castagnoliTable, b)
		saved := useSSE42
		defer func() { useSSE42 = saved }()
		for _, use := range []bool{saved, false} {
			useSSE42 = use
			if got := UpdateCRC32C(seed, b); got != want {
				t.Fatalf("asm %v: UpdateCRC32C(%#x, %d bytes) = %#08x, want %#08x", use, seed, len(b), got, want)
			}
		}
	})
}

// BenchmarkCRC32C times CRC-32C from 64 bytes to 1 MiB: ours with and
// without the CRC32 instruction, and hash/crc32's.
func BenchmarkCRC32C(b *testing.B) {
	benchPaths(b, 6, &useSSE42, "sse42", CRC32C, func(b []byte) uint32 { return crc32.Checksum(b, castagnoliTable) })
}
