package digest

import "math/bits"

// castagnoli is the CRC-32C polynomial, bit-reversed (hash/crc32's
// Castagnoli): the CRC runs least significant bit first.
const castagnoli = 0x82f63b78

// crc32cTable is the slicing-by-8 table: crc32cTable[0][v] is the CRC
// register after feeding the byte v into a register of zero, and
// crc32cTable[k][v] the same followed by k zero bytes, so that eight
// lookups advance the register over eight bytes at once. It is reached
// through a pointer variable so that the compiler indexes from a register
// rather than computing each of the eight tables' addresses on every
// step, as it does for a global array.
var crc32cTable = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	for v := range 256 {
		r := uint32(v)
		for range 8 {
			if r&1 != 0 {
				r = r>>1 ^ castagnoli
			} else {
				r >>= 1
			}
		}
		t[0][v] = r
	}
	for k := 1; k < 8; k++ {
		for v := range 256 {
			r := t[k-1][v]
			t[k][v] = r>>8 ^ t[0][byte(r)]
		}
	}
	return t
}()

// CRC32C returns the CRC-32C (Castagnoli) checksum of b, the value of
// hash/crc32's Checksum(b, MakeTable(Castagnoli)).
func CRC32C(b []byte) uint32 { return UpdateCRC32C(0, b) }

// UpdateCRC32C returns the CRC-32C checksum of the bytes whose checksum is
// crc followed by b, as hash/crc32's Update(crc, MakeTable(Castagnoli), b)
// does: UpdateCRC32C(CRC32C(x), y) == CRC32C(x+y).
func UpdateCRC32C(crc uint32, b []byte) uint32 {
	// The checksum is the register inverted, and the register starts at
	// all ones: un-invert, feed b, invert again.
	if useSSE42 {
		return ^crc32cSSE42(^crc, b)
	}
	return ^crc32cGeneric(^crc, b)
}

// crc32cGeneric feeds b into the CRC register r (not inverted), eight
// bytes per step by slicing-by-8, the rest one at a time.
func crc32cGeneric(r uint32, b []byte) uint32 {
	t := crc32cTable
	for len(b) >= 8 {
		r ^= uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		r = t[0][b[7]] ^ t[1][b[6]] ^ t[2][b[5]] ^ t[3][b[4]] ^
			t[4][r>>24] ^ t[5][byte(r>>16)] ^ t[6][byte(r>>8)] ^ t[7][byte(r)]
		b = b[8:]
	}
	for _, c := range b {
		r = t[0][byte(r)^c] ^ r>>8
	}
	return r
}

// crc32cZeros is the linear map that feeds n zero bytes into a CRC
// register, as four tables of 256: the register r goes to
// z[0][byte(r)] ^ z[1][byte(r>>8)] ^ z[2][byte(r>>16)] ^ z[3][r>>24].
// (A CRC register is a vector over GF(2) and feeding bytes is linear in
// it: feeding x then y gives the register of feeding x then len(y) zero
// bytes, xored with the register of feeding y into zero. The three-stream
// assembly joins its streams so.)
type crc32cZeros [4][256]uint32

// apply feeds the tables' n zero bytes into r.
func (z *crc32cZeros) apply(r uint32) uint32 {
	return z[0][byte(r)] ^ z[1][byte(r>>8)] ^ z[2][byte(r>>16)] ^ z[3][r>>24]
}

// makeCRC32CZeros builds the tables for n zero bytes: the matrix of one
// zero bit raised to the power 8n by squaring, then its images of every
// byte value in each byte of the register.
func makeCRC32CZeros(n int) *crc32cZeros {
	// A matrix is its 32 columns: m[i] is the image of the register 1<<i.
	mul := func(a, b *[32]uint32) (c [32]uint32) { // a·b: b's map, then a's
		for i, col := range b {
			c[i] = gf2Apply(a, col)
		}
		return c
	}
	var bit [32]uint32 // one zero bit: shift down, xor the polynomial if a 1 fell out
	bit[0] = castagnoli
	for i := 1; i < 32; i++ {
		bit[i] = 1 << (i - 1)
	}
	var m [32]uint32 // the identity, then bit^(8n)
	for i := range m {
		m[i] = 1 << i
	}
	for e := 8 * n; e > 0; e >>= 1 {
		if e&1 != 0 {
			m = mul(&m, &bit)
		}
		bit = mul(&bit, &bit)
	}
	z := new(crc32cZeros)
	for k := range 4 {
		for v := 1; v < 256; v++ {
			low := v & -v // v's lowest bit: z of v is z of the rest xor its column
			z[k][v] = z[k][v^low] ^ m[8*k+bits.TrailingZeros(uint(low))]
		}
	}
	return z
}

// gf2Apply is the image of the vector v under the matrix m of 32 columns:
// the xor of the columns of v's set bits.
func gf2Apply(m *[32]uint32, v uint32) (r uint32) {
	for ; v != 0; v &= v - 1 {
		r ^= m[bits.TrailingZeros32(v)]
	}
	return r
}
