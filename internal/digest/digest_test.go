package digest

import (
	"math/rand"
	"testing"
)

// forEachPath runs f with the assembly behind *use (useSHANI or useSSE42)
// where this machine runs it, then with the portable Go code, and leaves
// *use as it was.
func forEachPath(t *testing.T, use *bool, f func(t *testing.T)) {
	saved := *use
	defer func() { *use = saved }()
	if saved {
		t.Run("asm", f)
	} else {
		t.Log("no assembly on this machine or build: the portable code only")
	}
	*use = false
	t.Run("generic", f)
}

// randomBytes returns n bytes from rng at an odd offset into a larger
// buffer, so that the code meets unaligned input.
func randomBytes(rng *rand.Rand, n, offset int) []byte {
	b := make([]byte, n+offset)
	rng.Read(b)
	return b[offset:]
}

// testLengths are the lengths the tests cover exhaustively, then random
// ones up to 1 MiB.
func testLengths(rng *rand.Rand) []int {
	var ns []int
	for n := 0; n <= 300; n++ {
		ns = append(ns, n)
	}
	// Around the block size, and around the piece lengths of the CRC-32C
	// assembly (crc32cStreamLengths: 3*168, 3*2720, and all three tiers).
	ns = append(ns, 503, 504, 505, 511, 512, 513, 695, 696, 697, 4095, 4096, 4097,
		8159, 8160, 8161, 8160+504+192+7, 1<<20-1, 1<<20)
	for range 24 {
		ns = append(ns, rng.Intn(1<<20+1))
	}
	return ns
}

func TestHex(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{nil, ""},
		{[]byte{0}, "00"},
		{[]byte{0x01, 0xab, 0xff, 0x10}, "01abff10"},
	} {
		if got := Hex(c.in); got != c.want {
			t.Errorf("Hex(%x) = %q, want %q", c.in, got, c.want)
		}
	}
}

// benchPaths times ours (with the assembly behind *use, named asm, where
// this machine runs it, then the portable code) and the standard
// library's std, at sizes from one block to 1 MiB, leaving *use as it
// was.
func benchPaths[T any](b *testing.B, seed int64, use *bool, asm string, ours, std func([]byte) T) {
	for _, size := range []struct {
		name string
		n    int
	}{{"64B", 64}, {"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		buf := randomBytes(rand.New(rand.NewSource(seed)), size.n, 0)
		run := func(name string, f func([]byte) T) {
			b.Run(name+"/"+size.name, func(b *testing.B) {
				b.SetBytes(int64(size.n))
				for b.Loop() {
					f(buf)
				}
			})
		}
		saved := *use
		if saved {
			run("ours-"+asm, ours)
		}
		*use = false
		run("ours-generic", ours)
		*use = saved
		run("stdlib", std)
	}
}
