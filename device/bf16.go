package device

import "math"

// bfloat16 conversions, as PyTorch makes them (c10::BFloat16): float32 to
// bfloat16 rounds to nearest, ties to even; a NaN stays a NaN (quiet, its
// sign and the top of its payload kept, where PyTorch's vector conversion
// makes every NaN 0xffff and its scalar one 0x7fc0); bfloat16 to float32
// is exact. They are the reference the
// bf16 kernels are checked against (testdata/bf16_golden.json, written by
// PyTorch).

// ToBFloat16 is f rounded to bfloat16's bits.
func ToBFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 { // NaN
		return uint16(u>>16) | 0x0040
	}
	// Add half an ulp less one, plus the kept part's lowest bit: a tie
	// rounds up only from an odd value. An overflow carries into the
	// exponent, to infinity, as it should.
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// FromBFloat16 is the float32 of bfloat16 bits b (exact).
func FromBFloat16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// ToBFloat16s rounds src into dst (len(dst) ≥ len(src)).
func ToBFloat16s(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = ToBFloat16(f)
	}
}

// FromBFloat16s widens src into dst (len(dst) ≥ len(src)).
func FromBFloat16s(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = FromBFloat16(b)
	}
}
