package digest

import "math/bits"

// SHA256Size is the length of a SHA-256 digest in bytes, and
// SHA256BlockSize the length of the blocks the compression function eats.
const (
	SHA256Size      = 32
	SHA256BlockSize = 64
)

// sha256Init is H(0), FIPS 180-4 section 5.3.3: the first 32 bits of the
// fractional parts of the square roots of the first 8 primes
// (TestSHA256Constants recomputes them).
var sha256Init = [8]uint32{
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}

// sha256K is K(0)..K(63), FIPS 180-4 section 4.2.2: the first 32 bits of
// the fractional parts of the cube roots of the first 64 primes
// (TestSHA256Constants recomputes them). sha256block_amd64.s holds the
// same table for the assembly.
var sha256K = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// SHA256 returns the SHA-256 digest of b, as crypto/sha256.Sum256 does.
func SHA256(b []byte) [32]byte {
	var d SHA256Hash
	d.Reset()
	d.Write(b)
	return d.Sum256()
}

// SHA256Hash computes a SHA-256 digest of the bytes written to it, as
// crypto/sha256.New's hash does: Write never fails, Sum and Sum256 leave
// the state as it was, so writing may go on. The zero value is not ready;
// NewSHA256 or Reset makes it so. It is an io.Writer.
type SHA256Hash struct {
	h   [8]uint32             // the chaining value, H(i) of FIPS 180-4
	buf [SHA256BlockSize]byte // buf[:nbuf]: written bytes not yet in a block
	n   uint64                // bytes written since Reset
	// nbuf < SHA256BlockSize between calls: a full block is always
	// compressed at once.
	nbuf int
}

// NewSHA256 returns a SHA256Hash ready for writing.
func NewSHA256() *SHA256Hash {
	d := new(SHA256Hash)
	d.Reset()
	return d
}

// Reset forgets everything written: the state is that of NewSHA256.
func (d *SHA256Hash) Reset() {
	d.h = sha256Init
	d.nbuf = 0
	d.n = 0
}

// Size returns SHA256Size, the digest's length in bytes.
func (d *SHA256Hash) Size() int { return SHA256Size }

// BlockSize returns SHA256BlockSize: writes of whole blocks go straight to
// the compression function, without a copy.
func (d *SHA256Hash) BlockSize() int { return SHA256BlockSize }

// Write adds p to the message. It always returns len(p), nil.
func (d *SHA256Hash) Write(p []byte) (int, error) {
	n := len(p)
	d.n += uint64(n)
	if d.nbuf > 0 {
		c := copy(d.buf[d.nbuf:], p)
		d.nbuf += c
		p = p[c:]
		if d.nbuf < SHA256BlockSize {
			return n, nil
		}
		sha256Block(&d.h, d.buf[:])
		d.nbuf = 0
	}
	if whole := len(p) &^ (SHA256BlockSize - 1); whole > 0 {
		sha256Block(&d.h, p[:whole])
		p = p[whole:]
	}
	d.nbuf = copy(d.buf[:], p)
	return n, nil
}

// Sum appends the digest of what was written so far to b and returns the
// result, as hash.Hash's Sum does; d is unchanged.
func (d *SHA256Hash) Sum(b []byte) []byte {
	s := d.Sum256()
	return append(b, s[:]...)
}

// Sum256 returns the digest of what was written so far; d is unchanged.
func (d *SHA256Hash) Sum256() [32]byte {
	c := *d // pad a copy: the caller may go on writing to d
	// FIPS 180-4 section 5.1.1: a 1 bit, zeros up to 56 bytes past a block
	// boundary, then the message length in bits as 64 bits big-endian.
	var pad [SHA256BlockSize + 8]byte
	pad[0] = 0x80
	zeros := (55 - c.n) % SHA256BlockSize // bytes between the 0x80 and the length
	bitLen := c.n << 3
	tail := pad[:1+zeros+8]
	for i := range 8 {
		tail[len(tail)-1-i] = byte(bitLen >> (8 * i))
	}
	c.Write(tail)
	// c.nbuf == 0 now: the padded message is a whole number of blocks.
	var s [32]byte
	for i, v := range c.h {
		s[4*i] = byte(v >> 24)
		s[4*i+1] = byte(v >> 16)
		s[4*i+2] = byte(v >> 8)
		s[4*i+3] = byte(v)
	}
	return s
}

// sha256Block runs the compression function over each 64-byte block of p
// (len(p) a multiple of 64), updating h: the SHA extensions where
// useSHANI, portable Go otherwise.
func sha256Block(h *[8]uint32, p []byte) {
	if useSHANI {
		sha256BlockSHANI(h, p)
		return
	}
	sha256BlockGeneric(h, p)
}

// sha256BlockGeneric is the compression function of FIPS 180-4 section
// 6.2.2, over each 64-byte block of p; a trailing partial block is
// ignored. The message schedule W is computed in the round loop, a word
// ahead of its use, which leaves the CPU more independent work per round.
func sha256BlockGeneric(h *[8]uint32, p []byte) {
	var w [64]uint32
	h0, h1, h2, h3, h4, h5, h6, h7 := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
	for len(p) >= SHA256BlockSize {
		a, b, c, d, e, f, g, hh := h0, h1, h2, h3, h4, h5, h6, h7
		for i := range 64 {
			if i < 16 { // the block's sixteen big-endian words
				j := 4 * i
				w[i] = uint32(p[j])<<24 | uint32(p[j+1])<<16 | uint32(p[j+2])<<8 | uint32(p[j+3])
			} else { // W(t) = σ1(W(t-2)) + W(t-7) + σ0(W(t-15)) + W(t-16)
				w2, w15 := w[i-2], w[i-15]
				s1 := bits.RotateLeft32(w2, -17) ^ bits.RotateLeft32(w2, -19) ^ w2>>10
				s0 := bits.RotateLeft32(w15, -7) ^ bits.RotateLeft32(w15, -18) ^ w15>>3
				w[i] = s1 + w[i-7] + s0 + w[i-16]
			}
			// Ch(e, f, g) = e&f ^ ^e&g and Maj(a, b, c) = a&b ^ a&c ^ b&c,
			// in fewer operations.
			t1 := hh + (bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)) +
				(g ^ e&(f^g)) + sha256K[i] + w[i]
			t2 := (bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)) +
				(a&b | c&(a|b))
			hh = g
			g = f
			f = e
			e = d + t1
			d = c
			c = b
			b = a
			a = t1 + t2
		}
		h0 += a
		h1 += b
		h2 += c
		h3 += d
		h4 += e
		h5 += f
		h6 += g
		h7 += hh
		p = p[SHA256BlockSize:]
	}
	h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7] = h0, h1, h2, h3, h4, h5, h6, h7
}
