package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/big"
	"math/rand"
	"testing"
)

var _ io.Writer = (*SHA256Hash)(nil)

// The constants are the fractional parts FIPS 180-4 says they are: for
// the i-th prime p, K(i) = floor(frac(cbrt(p)) * 2^32), that is the low
// 32 bits of x = floor(cbrt(p * 2^96)), the integer with
// x^3 <= p*2^96 < (x+1)^3; H(0) likewise with square roots and 2^64.
func TestSHA256Constants(t *testing.T) {
	root := func(p int64, k uint) uint32 { // floor(p^(1/k) * 2^32), low 32 bits
		n := new(big.Int).Lsh(big.NewInt(p), 32*k)
		x := new(big.Int).Lsh(big.NewInt(1), 32+9) // above every root here
		lo := big.NewInt(0)
		pow := func(v *big.Int) *big.Int { return new(big.Int).Exp(v, big.NewInt(int64(k)), nil) }
		for new(big.Int).Sub(x, lo).Cmp(big.NewInt(1)) > 0 { // pow(lo) <= n < pow(x)
			mid := new(big.Int).Rsh(new(big.Int).Add(lo, x), 1)
			if pow(mid).Cmp(n) <= 0 {
				lo = mid
			} else {
				x = mid
			}
		}
		return uint32(lo.Uint64())
	}
	var primes []int64
	for p := int64(2); len(primes) < 64; p++ {
		if big.NewInt(p).ProbablyPrime(0) {
			primes = append(primes, p)
		}
	}
	for i, p := range primes {
		if got := root(p, 3); got != sha256K[i] {
			t.Errorf("K(%d) = %#08x, cube root of %d gives %#08x", i, sha256K[i], p, got)
		}
		if i < 8 {
			if got := root(p, 2); got != sha256Init[i] {
				t.Errorf("H0(%d) = %#08x, square root of %d gives %#08x", i, sha256Init[i], p, got)
			}
		}
	}
}

// FIPS 180-4's examples (the NIST example values), which crypto/sha256
// gives too.
func TestSHA256Known(t *testing.T) {
	forEachPath(t, &useSHANI, func(t *testing.T) {
		for _, c := range []struct{ in, want string }{
			{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
			{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
			{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
				"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		} {
			got := SHA256([]byte(c.in))
			if hex.EncodeToString(got[:]) != c.want {
				t.Errorf("SHA256(%q) = %x, want %s", c.in, got, c.want)
			}
		}
	})
}

func TestSHA256MatchesStdlib(t *testing.T) {
	forEachPath(t, &useSHANI, func(t *testing.T) {
		rng := rand.New(rand.NewSource(1))
		for i, n := range testLengths(rng) {
			b := randomBytes(rng, n, 1+2*(i%4)) // offsets 1, 3, 5, 7
			want := sha256.Sum256(b)
			if got := SHA256(b); got != want {
				t.Fatalf("SHA256 of %d bytes: %x, want %x", n, got, want)
			}
			// The same bytes written in random pieces, some empty.
			d := NewSHA256()
			for rest := b; len(rest) > 0; {
				k := rng.Intn(min(len(rest), 200) + 1)
				if rng.Intn(8) == 0 {
					k = rng.Intn(len(rest) + 1)
				}
				if m, err := d.Write(rest[:k]); m != k || err != nil {
					t.Fatalf("Write: %d, %v", m, err)
				}
				rest = rest[k:]
			}
			if got := d.Sum256(); got != want {
				t.Fatalf("written in pieces, %d bytes: %x, want %x", n, got, want)
			}
		}
	})
}

// Sum and Sum256 leave the state alone, Sum appends, Reset starts over.
func TestSHA256SumResetWriter(t *testing.T) {
	forEachPath(t, &useSHANI, func(t *testing.T) {
		rng := rand.New(rand.NewSource(2))
		b := randomBytes(rng, 1000, 3)
		for _, cut := range []int{0, 1, 55, 56, 63, 64, 65, 128, 999, 1000} {
			ours, std := NewSHA256(), sha256.New()
			ours.Write(b[:cut])
			std.Write(b[:cut])
			prefix := []byte("prefix")
			if got, want := ours.Sum(prefix), std.Sum(prefix); !bytes.Equal(got, want) {
				t.Fatalf("Sum after %d bytes: %x, want %x", cut, got, want)
			}
			if got, want := ours.Sum256(), ours.Sum256(); got != want {
				t.Fatal("Sum256 twice differs")
			}
			ours.Write(b[cut:])
			std.Write(b[cut:])
			if got, want := ours.Sum(nil), std.Sum(nil); !bytes.Equal(got, want) {
				t.Fatalf("writing on after Sum at %d: %x, want %x", cut, got, want)
			}
			ours.Reset()
			ours.Write(b[:cut])
			if got, want := ours.Sum256(), sha256.Sum256(b[:cut]); got != want {
				t.Fatalf("after Reset, %d bytes: %x, want %x", cut, got, want)
			}
		}
		// io.Copy works into it, with the reader's own chunking.
		d := NewSHA256()
		if n, err := io.Copy(d, io.LimitReader(rng, 100_003)); n != 100_003 || err != nil {
			t.Fatalf("io.Copy: %d, %v", n, err)
		}
		if d.Size() != sha256.Size || d.BlockSize() != sha256.BlockSize {
			t.Errorf("Size, BlockSize = %d, %d", d.Size(), d.BlockSize())
		}
	})
}

func TestSHA256Allocs(t *testing.T) {
	b := make([]byte, 1000)
	if n := testing.AllocsPerRun(10, func() { SHA256(b) }); n != 0 {
		t.Errorf("SHA256 allocates %v times", n)
	}
	d := NewSHA256()
	if n := testing.AllocsPerRun(10, func() { d.Write(b); d.Sum256() }); n != 0 {
		t.Errorf("Write and Sum256 allocate %v times", n)
	}
}

func FuzzSHA256(f *testing.F) {
	f.Add([]byte(""), uint(0))
	f.Add([]byte("abc"), uint(1))
	f.Add(bytes.Repeat([]byte{0xa5}, 200), uint(64))
	f.Fuzz(func(t *testing.T, b []byte, cut uint) {
		want := sha256.Sum256(b)
		cut %= uint(len(b) + 1)
		check := func(path string) {
			if got := SHA256(b); got != want {
				t.Fatalf("%s: SHA256 = %x, want %x", path, got, want)
			}
			d := NewSHA256()
			d.Write(b[:cut])
			d.Write(b[cut:])
			if got := d.Sum256(); got != want {
				t.Fatalf("%s: split at %d: %x, want %x", path, cut, got, want)
			}
		}
		saved := useSHANI
		defer func() { useSHANI = saved }()
		check("default")
		useSHANI = false
		check("generic")
	})
}

// BenchmarkSHA256 times SHA-256 over sizes from one block to 1 MiB: ours
// with and without the SHA extensions, and crypto/sha256's.
func BenchmarkSHA256(b *testing.B) {
	benchPaths(b, 3, &useSHANI, "shani", SHA256, sha256.Sum256)
}
