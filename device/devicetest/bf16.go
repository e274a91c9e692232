package devicetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"ferry/device"
)

// The bfloat16 kernels (Note [bfloat16] in package device). ConvertBF16
// runs where the device's Kernels implement device.ConvertKernels, and
// GemmBF16 where Gemm does not refuse a bfloat16 product with an
// *UnsupportedError; each skips, saying so, elsewhere (the device then
// holds float32 only). Both check that the pairs of element types no
// device takes are refused with an *UnsupportedError. Results are compared
// bit for bit with device.ToBFloat16 and FromBFloat16, products with a
// float64 reference on the widened operands.
//
// Storages are uploaded and downloaded whole, from element 0, and read
// through views with offsets: a view's Off and strides count elements of
// its DType (2 bytes for bfloat16).

func init() {
	kernelTests = append(kernelTests,
		test{name: "ConvertBF16", fn: testConvertBF16},
		test{name: "GemmBF16", fn: testGemmBF16})
}

var allDTypes = []device.DType{device.Float32, device.Int32, device.BFloat16, device.Float16}

// bf16Specials are float32 bit patterns whose rounding to bfloat16 is
// easy to get wrong.
var bf16Specials = []uint32{
	0x00000000, 0x80000000, // ±0
	0x7f800000, 0xff800000, // ±Inf
	// NaNs: quiet, signalling (kept NaN, made quiet), payloads high and
	// low (a payload only in the dropped half must not round to Inf).
	0x7fc00000, 0xffc00000, 0x7fc00001, 0x7f800001, 0xff800001, 0x7fa00000, 0x7fbfffff, 0xffe12345, 0x7f80ffff,
	// Denormals: the smallest, ties at the bottom (to even: 0 and 2),
	// above a tie, the largest (rounds up to the smallest normal).
	0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x00008001, 0x0000ffff, 0x007fffff, 0x807fffff, 0x00400000,
	0x00800000, 0x80800000, // the smallest normals
	// Ties to even: down from an even value, up from an odd one; just
	// above and just below a tie.
	0x3f808000, 0x3f818000, 0xbf808000, 0xbf818000, 0x3f808001, 0x3f807fff, 0xbf80ffff,
	// Overflow: the largest float32 and a tie at the top round to ±Inf;
	// just below the tie and the largest bfloat16 stay finite.
	0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0xff7f8000, 0x7f7f7fff, 0x7f7f0000, 0x7f7effff,
	0x3f800000, 0x40490fdb, 0xc2f6e979, 0x3eaaaaab, // 1, π, -123.456, 1/3
}

// bf16Pool returns n float32 bit patterns: the specials, and between them
// ordinary values of either sign.
func bf16Pool(n int) []uint32 {
	vals := seq(n, -300, 300)
	out := make([]uint32, n)
	for i := range out {
		if i%3 == 0 {
			out[i] = bf16Specials[(i/3)%len(bf16Specials)]
		} else {
			out[i] = math.Float32bits(vals[i])
		}
	}
	return out
}

// convertBits is Convert's reference on one element: bits of type src in,
// bits of type dst out.
func convertBits(dst, src device.DType, b uint32) uint32 {
	switch {
	case dst == src:
		return b
	case dst == device.BFloat16:
		return uint32(device.ToBFloat16(math.Float32frombits(b)))
	default:
		return math.Float32bits(device.FromBFloat16(uint16(b)))
	}
}

// bitsOf returns the patterns of pool as elements of type dt (bfloat16:
// rounded, so the bfloat16 values include NaNs, infinities and denormals).
func bitsOf(dt device.DType, pool []uint32) []uint32 {
	if dt != device.BFloat16 {
		return pool
	}
	out := make([]uint32, len(pool))
	for i, b := range pool {
		out[i] = convertBits(device.BFloat16, device.Float32, b)
	}
	return out
}

// typed allocates a storage of len(bits) elements of type dt, uploads
// bits (nil: uninitialised; each element's low dt.Size() bytes) and
// returns a flat view of it.
func (e *env) typed(dt device.DType, n int, bits []uint32) device.View {
	e.Helper()
	b := e.alloc(e.dev, int64(max(n, 1)*dt.Size()), device.Activation)
	v := device.View{Block: b, Shape: []int{n}, Strides: []int{1}, DType: dt}
	if bits != nil && e.caps.HasData {
		e.ok(e.k.Upload(v, packBits(dt, bits)), "Upload of %d %s", n, dt)
	}
	return v
}

// readTyped downloads the n elements of type dt at the start of block b;
// nil without data.
func (e *env) readTyped(dt device.DType, b *device.Block, n int) []uint32 {
	e.Helper()
	if !e.caps.HasData {
		return nil
	}
	buf := make([]byte, n*dt.Size())
	e.ok(e.k.Download(buf, device.View{Block: b, Shape: []int{n}, Strides: []int{1}, DType: dt}), "Download of %d %s", n, dt)
	out := make([]uint32, n)
	for i := range out {
		if dt.Size() == 2 {
			out[i] = uint32(binary.NativeEndian.Uint16(buf[2*i:]))
		} else {
			out[i] = binary.NativeEndian.Uint32(buf[4*i:])
		}
	}
	return out
}

func packBits(dt device.DType, bits []uint32) []byte {
	buf := make([]byte, len(bits)*dt.Size())
	for i, x := range bits {
		if dt.Size() == 2 {
			binary.NativeEndian.PutUint16(buf[2*i:], uint16(x))
		} else {
			binary.NativeEndian.PutUint32(buf[4*i:], x)
		}
	}
	return buf
}

// sameBits checks got against want bit for bit; nothing without data.
func (e *env) sameBits(what string, dt device.DType, got, want []uint32) {
	e.Helper()
	if got == nil {
		return
	}
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			bad++
			e.Errorf("%s[%d] = %#x, want %#x (%s)", what, i, got[i], want[i], dt)
			if bad >= 5 {
				e.Fatalf("%s: giving up after %d wrong values", what, bad)
			}
		}
	}
}

func unsupported(err error) bool {
	var u *device.UnsupportedError
	return errors.As(err, &u)
}

// convertPairs are the (dst, src) pairs Convert takes.
var convertPairs = [][2]device.DType{
	{device.BFloat16, device.Float32}, {device.Float32, device.BFloat16},
	{device.BFloat16, device.BFloat16}, {device.Float32, device.Float32}, {device.Int32, device.Int32},
}

func testConvertBF16(e *env) {
	ck, ok := e.k.(device.ConvertKernels)
	if !ok {
		e.Skipf("%s has no ConvertKernels: it holds float32 only (the tensor layer refuses bfloat16 there)", e.dev.Name())
	}
	// Pairs no device takes are refused, before any element is touched.
	scratch := e.alloc(e.dev, 64, device.Activation)
	for _, dst := range allDTypes {
		for _, src := range allDTypes {
			if device.CheckConvertTypes("", dst, src) == nil {
				continue
			}
			v := func(dt device.DType) device.View {
				return device.View{Block: scratch, Shape: []int{2, 3}, Strides: []int{3, 1}, DType: dt}
			}
			if err := ck.Convert(v(dst), v(src)); !unsupported(err) {
				e.Errorf("Convert %s→%s: %v, want an *device.UnsupportedError", src, dst, err)
			}
		}
	}

	// Every bfloat16 value widens exactly.
	all := make([]uint32, 1<<16)
	for i := range all {
		all[i] = uint32(i)
	}
	src, dst := e.typed(device.BFloat16, len(all), all), e.typed(device.Float32, len(all), nil)
	e.ok(ck.Convert(dst, src), "Convert of every bfloat16")
	want := make([]uint32, len(all))
	for i, b := range all {
		want[i] = convertBits(device.Float32, device.BFloat16, b)
	}
	e.sameBits("every bfloat16 widened", device.Float32, e.readTyped(device.Float32, dst.Block, len(all)), want)

	// The specials and many float32 bit patterns (every exponent, the
	// mantissa's rounding bits in every state) round to nearest even.
	many := append([]uint32(nil), bf16Specials...)
	x := uint32(12345)
	for len(many) < 1<<16 {
		x = x*1664525 + 1013904223
		many = append(many, x)
	}
	src, dst = e.typed(device.Float32, len(many), many), e.typed(device.BFloat16, len(many), nil)
	e.ok(ck.Convert(dst, src), "Convert of %d float32 bit patterns", len(many))
	want = make([]uint32, len(many))
	for i, b := range many {
		want[i] = convertBits(device.BFloat16, device.Float32, b)
	}
	e.sameBits("float32 bit patterns rounded", device.BFloat16, e.readTyped(device.BFloat16, dst.Block, len(many)), want)

	// Strided, transposed and broadcast sources into a contiguous
	// destination, each pair.
	for _, pair := range convertPairs {
		for _, l := range copyLayouts {
			name := fmt.Sprintf("Convert %s→%s from %s", pair[1], pair[0], l.name)
			vals := bitsOf(pair[1], bf16Pool(l.size))
			s := e.typed(pair[1], l.size, vals)
			s.Off, s.Shape, s.Strides = l.off, l.shape, l.strides
			d := e.typed(pair[0], device.Numel(l.shape), nil)
			d.Shape, d.Strides = l.shape, device.Contiguous(l.shape)
			e.ok(ck.Convert(d, s), "%s", name)
			var want []uint32
			forEach(l.shape, func(idx []int) {
				want = append(want, convertBits(pair[0], pair[1], vals[offset(l.off, idx, l.strides)]))
			})
			e.sameBits(name, pair[0], e.readTyped(pair[0], d.Block, len(want)), want)
		}
	}

	// Strided destinations (offsets, gaps, transposed; no zero stride),
	// from a contiguous source and from a transposed one: the elements
	// between the destination's keep their bits.
	for _, pair := range convertPairs {
		for _, l := range copyLayouts {
			if hasZeroStride(l.strides) {
				continue
			}
			for _, transposed := range []bool{false, true} {
				name := fmt.Sprintf("Convert %s→%s into %s", pair[1], pair[0], l.name)
				n := device.Numel(l.shape)
				vals := bitsOf(pair[1], bf16Pool(n))
				s := e.typed(pair[1], n, vals)
				s.Shape, s.Strides = l.shape, device.Contiguous(l.shape)
				srcAt := func(i int, idx []int) int { return i }
				if transposed {
					name += " from column-major"
					s.Strides = columnMajor(l.shape)
					srcAt = func(_ int, idx []int) int { return offset(0, idx, s.Strides) }
				}
				sentinel := bitsOf(pair[0], []uint32{math.Float32bits(-7.5)})[0]
				stor := make([]uint32, l.size)
				for i := range stor {
					stor[i] = sentinel
				}
				d := e.typed(pair[0], l.size, stor)
				d.Off, d.Shape, d.Strides = l.off, l.shape, l.strides
				e.ok(ck.Convert(d, s), "%s", name)
				i := 0
				forEach(l.shape, func(idx []int) {
					stor[offset(l.off, idx, l.strides)] = convertBits(pair[0], pair[1], vals[srcAt(i, idx)])
					i++
				})
				e.sameBits(name, pair[0], e.readTyped(pair[0], d.Block, l.size), stor)
			}
		}
	}
}

func hasZeroStride(strides []int) bool {
	for _, s := range strides {
		if s == 0 {
			return true
		}
	}
	return false
}

// columnMajor returns column-major strides for shape.
func columnMajor(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := range shape {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// bf16HalfULP is half the spacing of bfloat16 values at |w|: the most
// rounding w to bfloat16 changes it by.
func bf16HalfULP(w float64) float64 {
	if w == 0 || math.IsInf(w, 0) || math.IsNaN(w) {
		return 0
	}
	_, exp := math.Frexp(math.Abs(w)) // |w| = f·2^exp, f in [0.5, 1)
	return math.Ldexp(1, max(exp-9, -134))
}

func testGemmBF16(e *env) {
	// Combinations no device multiplies are refused, on every device.
	scratch := e.typed(device.Float32, 64, make([]uint32, 64)).Block // zeros
	bf, f32 := device.BFloat16, device.Float32
	for _, ty := range [][3]device.DType{
		{bf, f32, f32}, {f32, bf, f32}, {f32, f32, bf}, {bf, f32, bf}, {bf, bf, device.Int32},
		{bf, bf, device.Float16}, {device.Int32, device.Int32, f32}, {device.Float16, device.Float16, f32},
	} {
		p := device.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, A: scratch, B: scratch, C: scratch, LDA: 2, LDB: 2, LDC: 2, Batch: 1,
			TypeA: ty[0], TypeB: ty[1], TypeC: ty[2]}
		if err := e.k.Gemm(p); !unsupported(err) {
			e.Errorf("Gemm %s×%s→%s: %v, want an *device.UnsupportedError", ty[0], ty[1], ty[2], err)
		}
	}
	probe := device.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, A: scratch, B: scratch, C: e.typed(f32, 4, nil).Block,
		LDA: 2, LDB: 2, LDC: 2, Batch: 1, TypeA: bf, TypeB: bf, TypeC: f32}
	if err := e.k.Gemm(probe); unsupported(err) {
		e.Skipf("%s has no bfloat16 products: %v", e.dev.Name(), err)
	} else {
		e.ok(err, "Gemm bfloat16×bfloat16→float32")
	}

	for _, typeC := range []device.DType{f32, bf} {
		for _, sh := range gemmShapes {
			for _, tr := range gemmTransposes {
				name := fmt.Sprintf("Gemm bfloat16→%s %s", typeC, sh.name(tr))
				p, na, nb, nc := gemmLayout(sh, tr)
				p.TypeA, p.TypeB, p.TypeC = bf, bf, typeC
				// Operands rounded to bfloat16; the reference multiplies
				// their exact float32 values.
				a, b := bitsOf(bf, f32Bits(seq(na, -1, 1))), bitsOf(bf, f32Bits(seq(nb, -1.5, 0.5)))
				c := f32Bits(seq(nc, -2, 2))
				if sh.beta == 0 {
					c = f32Bits(fill(nc, float32(math.NaN())))
				}
				c = bitsOf(typeC, c)
				va, vb, vc := e.typed(bf, na, a), e.typed(bf, nb, b), e.typed(typeC, nc, c)
				p.A, p.B, p.C = va.Block, vb.Block, vc.Block
				e.ok(e.k.Gemm(p), "%s", name)
				got := e.readTyped(typeC, vc.Block, nc)
				if got == nil {
					continue
				}
				want := refGemm(p, widen(bf, a), widen(bf, b), widen(typeC, c))
				tol := e.gemmTol() * math.Max(1, float64(sh.k)/16)
				if typeC == f32 {
					e.nearTol(name, widen(f32, got), want, tol)
					continue
				}
				// A bfloat16 C: within one rounding of the reference where
				// written, every other element's bits kept.
				written := gemmWritten(p, nc)
				bad := 0
				for i := range want {
					g, w := float64(device.FromBFloat16(uint16(got[i]))), want[i]
					ok := got[i] == c[i]
					if written[i] {
						ok = math.Abs(g-w) <= tol*math.Max(1, math.Abs(w))+bf16HalfULP(w)
					}
					if !ok {
						bad++
						e.Errorf("%s[%d] = %v (%#04x), want %v (written: %v)", name, i, g, got[i], w, written[i])
					}
					if bad >= 5 {
						e.Fatalf("%s: giving up after %d wrong values", name, bad)
					}
				}
			}
		}
	}
}

// gemmWritten marks the elements of C's storage (n elements) p writes.
func gemmWritten(p device.GemmParams, n int) []bool {
	w := make([]bool, n)
	for i := 0; i < p.Batch; i++ {
		for m := 0; m < p.M; m++ {
			for j := 0; j < p.N; j++ {
				w[p.OffC+i*p.StrideC+m*p.LDC+j] = true
			}
		}
	}
	return w
}

func f32Bits(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = math.Float32bits(x)
	}
	return out
}

// widen returns the float32 values of elements of type dt.
func widen(dt device.DType, bits []uint32) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		if dt == device.BFloat16 {
			out[i] = device.FromBFloat16(uint16(b))
		} else {
			out[i] = math.Float32frombits(b)
		}
	}
	return out
}
