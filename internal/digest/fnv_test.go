package digest

import (
	"hash/fnv"
	"io"
	"math/rand"
	"testing"
)

var _ io.Writer = (*FNV64a)(nil)

func TestFNV64aMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for n := 0; n <= 300; n++ {
		b := randomBytes(rng, n, 1)
		ours, std := NewFNV64a(), fnv.New64a()
		if m, err := ours.Write(b[:n/2]); m != n/2 || err != nil {
			t.Fatalf("Write: %d, %v", m, err)
		}
		ours.Write(b[n/2:])
		std.Write(b)
		if ours.Sum64() != std.Sum64() {
			t.Fatalf("%d bytes: %#x, want %#x", n, ours.Sum64(), std.Sum64())
		}
		ours.Reset()
		if ours.Sum64() != fnv.New64a().Sum64() {
			t.Fatal("Reset")
		}
	}
}
