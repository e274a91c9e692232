package gemm

// Conversions between float32 and bfloat16 (its bits, as uint16), for
// GemmBF16's bfloat16 C and for the CPU device's Convert kernel. They give
// the bits of ferry's reference conversions (device.ToBFloat16 and
// FromBFloat16, which PyTorch's golden data checks): round to nearest
// even, a NaN kept a NaN, quiet, with its sign and the top of its payload;
// widening is exact. Where AVX2 is allowed the bulk runs in assembly
// (convert_amd64.s) with the same bits.

// RoundBF16s rounds s into d (one length).
func RoundBF16s(d []uint16, s []float32) {
	s = s[:len(d)]
	i := 0
	if haveAVX2 && len(d) >= 16 {
		i = len(d) &^ 15
		toBF16AVX2(&d[0], &s[0], i)
	}
	for ; i < len(d); i++ {
		d[i] = roundBF16(s[i])
	}
}

// WidenBF16s widens s into d (one length).
func WidenBF16s(d []float32, s []uint16) {
	s = s[:len(d)]
	i := 0
	if haveAVX2 && len(d) >= 16 {
		i = len(d) &^ 15
		fromBF16AVX2(&d[0], &s[0], i)
	}
	for ; i < len(d); i++ {
		d[i] = widen(s[i])
	}
}

// roundBF16 is f rounded to bfloat16 bits (device.ToBFloat16).
func roundBF16(f float32) uint16 {
	u := f32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 { // NaN: quiet, payload's top kept
		return uint16(u>>16) | 0x0040
	}
	// Half an ulp less one, plus the kept part's lowest bit: a tie rounds
	// up only from an odd value; an overflow carries into infinity.
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}
