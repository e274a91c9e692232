package cpu_test

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"ferry/device"
	"ferry/device/cpu"
)

// typed allocates a contiguous view of element type dt.
func (f *fixture) typed(dt device.DType, shape ...int) device.View {
	n := device.Numel(shape)
	b, err := f.dev.Allocator().Alloc(int64(max(n, 1)*dt.Size()), device.Activation)
	if err != nil {
		f.t.Fatal(err)
	}
	return device.View{Block: b, Shape: shape, Strides: device.Contiguous(shape), DType: dt}
}

// words are the 4-byte elements of v's block from its offset; halves the
// 2-byte ones.
func words(v device.View) []uint32 {
	b := cpu.Bytes(v.Block)
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)[v.Off:]
}

func halves(v device.View) []uint16 {
	b := cpu.Bytes(v.Block)
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)[v.Off:]
}

// bf16Specials are float32 bits whose rounding to bfloat16 is worth
// checking one by one.
var bf16Specials = []uint32{
	0x00000000, 0x80000000, // ±0
	0x7F800000, 0xFF800000, // ±Inf
	0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA50000, 0x7F81FFFF, // NaNs, quiet and signalling, payloads
	0x00000001, 0x007FFFFF, 0x80000001, 0x00008000, 0x00018000, 0x00007FFF, 0x0000FFFF, 0x807F8000, // denormals, ties
	0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000, 0x3F808001, 0x3F817FFF, // ties down and up, just off ties
	0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7EFFFF, 0x7F7E8000, // largest finite: overflow to Inf, tie, below
	0x00800000, 0x007FFF80, 0x3F800000, 0x3F7FFFFF,
}

// TestConvertFloat32ToBFloat16 checks Convert's rounding bit for bit
// against device.ToBFloat16: the special values, random bits, every
// length up to 70 (SIMD tails) and a large tensor split over goroutines.
func TestConvertFloat32ToBFloat16(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	f := newFixture(t)
	for _, n := range []int{1, 2, 15, 16, 17, 31, 33, 63, 64, 70, 1001, 200_003} {
		for off := range 2 { // an odd offset misaligns both sides
			src, dst := f.typed(device.Float32, n+off), f.typed(device.BFloat16, n+off)
			src.Off, src.Shape, src.Strides = off, []int{n}, []int{1}
			dst.Off, dst.Shape, dst.Strides = off, []int{n}, []int{1}
			s := words(src)[:n]
			for i := range s {
				if i < len(bf16Specials) && n > 100 {
					s[i] = bf16Specials[i]
				} else {
					s[i] = f.r.Uint32()
				}
			}
			for i := range halves(dst)[:n] {
				halves(dst)[i] = 0xABCD
			}
			f.ok(f.k.(device.ConvertKernels).Convert(dst, src))
			d := halves(dst)[:n]
			for i, u := range s {
				if want := device.ToBFloat16(math.Float32frombits(u)); d[i] != want {
					t.Fatalf("n %d off %d: %#08x -> %#04x, want %#04x", n, off, u, d[i], want)
				}
			}
		}
	}
	// Every special value at every position of a SIMD block.
	for shift := range 16 {
		n := len(bf16Specials) + shift
		src, dst := f.typed(device.Float32, n), f.typed(device.BFloat16, n)
		s := words(src)[:n]
		copy(s[shift:], bf16Specials)
		f.ok(f.k.(device.ConvertKernels).Convert(dst, src))
		for i, u := range s {
			if want := device.ToBFloat16(math.Float32frombits(u)); halves(dst)[i] != want {
				t.Fatalf("shift %d: %#08x -> %#04x, want %#04x", shift, u, halves(dst)[i], want)
			}
		}
	}
}

// TestConvertBFloat16ToFloat32 widens every bfloat16, at odd lengths.
func TestConvertBFloat16ToFloat32(t *testing.T) {
	f := newFixture(t)
	for _, n := range []int{1 << 16, 1<<16 - 7, 5} {
		src, dst := f.typed(device.BFloat16, n), f.typed(device.Float32, n)
		for i := range halves(src)[:n] {
			halves(src)[i] = uint16(i * 0x9E37) // every value once for n = 2^16
		}
		f.ok(f.k.(device.ConvertKernels).Convert(dst, src))
		for i, b := range halves(src)[:n] {
			if got, want := words(dst)[i], math.Float32bits(device.FromBFloat16(b)); got != want {
				t.Fatalf("n %d: %#04x -> %#08x, want %#08x", n, b, got, want)
			}
		}
	}
}

// TestConvertStrided converts and copies between strided views:
// a transposed source, a broadcast row, a transposed destination, for
// every pair of types Convert takes.
func TestConvertStrided(t *testing.T) {
	f := newFixture(t)
	const rows, cols = 37, 19
	pairs := [][2]device.DType{
		{device.BFloat16, device.Float32}, {device.Float32, device.BFloat16},
		{device.Float32, device.Float32}, {device.Int32, device.Int32}, {device.BFloat16, device.BFloat16},
	}
	// get reads element (r, c) of v as bits, put writes it.
	get := func(v device.View, r, c int) uint32 {
		i := r*v.Strides[0] + c*v.Strides[1]
		if v.DType.Size() == 2 {
			return uint32(halves(v)[i])
		}
		return words(v)[i]
	}
	for _, pr := range pairs {
		dt, st := pr[0], pr[1]
		for _, layout := range []string{"contiguous", "transposed source", "broadcast source", "transposed destination"} {
			src := f.typed(st, rows, cols)
			dst := f.typed(dt, rows, cols)
			if st.Size() == 2 {
				for i := range halves(src)[:rows*cols] {
					halves(src)[i] = uint16(f.r.Uint32())
				}
			} else {
				for i := range words(src)[:rows*cols] {
					words(src)[i] = f.r.Uint32()
				}
			}
			switch layout {
			case "transposed source":
				src.Strides = []int{1, rows}
			case "broadcast source":
				src.Strides = []int{0, 1}
			case "transposed destination":
				dst.Strides = []int{1, rows}
			}
			f.ok(f.k.(device.ConvertKernels).Convert(dst, src))
			for r := range rows {
				for c := range cols {
					s, d := get(src, r, c), get(dst, r, c)
					want := s
					switch {
					case dt == device.BFloat16 && st == device.Float32:
						want = uint32(device.ToBFloat16(math.Float32frombits(s)))
					case dt == device.Float32 && st == device.BFloat16:
						want = math.Float32bits(device.FromBFloat16(uint16(s)))
					}
					if d != want {
						t.Fatalf("%s→%s %s: (%d,%d) = %#x from %#x, want %#x", st, dt, layout, r, c, d, s, want)
					}
				}
			}
		}
	}
}

// TestConvertRejects checks the pairs Convert does not take.
func TestConvertRejects(t *testing.T) {
	f := newFixture(t)
	for _, pr := range [][2]device.DType{
		{device.Float32, device.Int32}, {device.Int32, device.Float32}, {device.BFloat16, device.Int32},
		{device.Int32, device.BFloat16}, {device.Float16, device.Float16}, {device.Float16, device.Float32}, {device.Float32, device.Float16},
	} {
		err := f.k.(device.ConvertKernels).Convert(f.typed(pr[0], 4), f.typed(pr[1], 4))
		var ue *device.UnsupportedError
		if !errors.As(err, &ue) || ue.Op != "convert" || ue.Device != "cpu" {
			t.Errorf("%s→%s: %v, want an *UnsupportedError", pr[1], pr[0], err)
		}
	}
	if err := f.k.(device.ConvertKernels).Convert(f.typed(device.BFloat16, 4), f.typed(device.Float32, 2, 2)); err == nil {
		t.Error("shapes [2 2] into [4]: no error")
	}
}
