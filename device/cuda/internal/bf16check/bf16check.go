// Package bf16check holds the CUDA device's bfloat16 checks (Convert and
// bfloat16 Gemm), shared by the tests that run them over the fake driver
// (package cuda) and over the C stand-in with the kernels run from their
// sources (package standin). The references are device.ToBFloat16 and
// FromBFloat16, and a float64 product.
package bf16check

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/device"
)

// mem is one device block and its bytes' host image.
type mem struct {
	dev device.Device
	b   *device.Block
	n   int
}

func alloc(t *testing.T, dev device.Device, bytes int) *mem {
	t.Helper()
	b, err := dev.Allocator().Alloc(int64(max(bytes, 4)), device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Allocator().Free(b) })
	return &mem{dev: dev, b: b, n: bytes}
}

func (m *mem) upload(t *testing.T, raw []byte) {
	t.Helper()
	if err := m.dev.Kernels().Upload(device.View{Block: m.b}, raw); err != nil {
		t.Fatal(err)
	}
}

func (m *mem) download(t *testing.T) []byte {
	t.Helper()
	raw := make([]byte, m.n)
	if err := m.dev.Kernels().Download(raw, device.View{Block: m.b}); err != nil {
		t.Fatal(err)
	}
	return raw
}

// halves and words are the little-endian host images of 2- and 4-byte
// elements.
func halves(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func words(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func halvesOf(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

func wordsOf(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v
}

// Specials are float32 bit patterns at the edges of rounding to bfloat16:
// signed zeros, ties to even both ways, just past a tie, subnormals, the
// largest finite values (which round to infinity), infinities and NaNs of
// either sign and several payloads (quiet and signalling).
var Specials = []uint32{
	0x00000000, 0x80000000, 0x3f800000, 0xbf800000,
	0x3f808000, // 1 + 2⁻⁸: a tie, kept part even: down
	0x3f818000, // a tie, kept part odd: up
	0x3f808001, // just past a tie: up
	0x3f807fff, // just below a tie: down
	0xbf818000, // negative tie, odd: away from zero
	0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x007fffff, 0x00800000,
	0x7f7fffff, 0xff7fffff, // largest finite: to ±infinity
	0x7f7f7fff, 0x7f7f8000, // below the top tie; the top tie (odd): to infinity
	0x7f800000, 0xff800000,
	0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fffffff, 0xffffffff, 0x7fa5a5a5,
	0x40490fdb, 0xc2f6e979, 0x33800000, 0x477fe000, 0x477ff000,
}

// Convert checks Convert on dev: every pair of types it takes, special
// values bit for bit against device.ToBFloat16 and FromBFloat16, all
// 65536 bfloat16 patterns widened, strided and offset views on both sides
// (elements outside dst's view untouched), and the pairs it refuses.
func Convert(t *testing.T, dev device.Device) {
	ck, ok := dev.Kernels().(device.ConvertKernels)
	if !ok {
		t.Fatalf("%s has no ConvertKernels", dev.Name())
	}
	rng := rand.New(rand.NewPCG(3, 7))
	t.Run("specials", func(t *testing.T) {
		src := append([]uint32(nil), Specials...)
		for range 5000 { // random patterns, NaNs and all
			src = append(src, rng.Uint32())
		}
		n := len(src)
		s, d := alloc(t, dev, 4*n), alloc(t, dev, 2*n)
		s.upload(t, words(src))
		d.upload(t, halves(make([]uint16, n)))
		shape := []int{n}
		err := ck.Convert(device.View{Block: d.b, Shape: shape, Strides: []int{1}, DType: device.BFloat16},
			device.View{Block: s.b, Shape: shape, Strides: []int{1}, DType: device.Float32})
		if err != nil {
			t.Fatal(err)
		}
		got := halvesOf(d.download(t))
		bad := 0
		for i, u := range src {
			if want := device.ToBFloat16(math.Float32frombits(u)); got[i] != want && bad < 10 {
				t.Errorf("float32 %#08x → bfloat16 %#04x, want %#04x", u, got[i], want)
				bad++
			}
		}
	})
	t.Run("widen all", func(t *testing.T) {
		src := make([]uint16, 1<<16)
		for i := range src {
			src[i] = uint16(i)
		}
		s, d := alloc(t, dev, 2*len(src)), alloc(t, dev, 4*len(src))
		s.upload(t, halves(src))
		shape := []int{256, 256}
		err := ck.Convert(device.View{Block: d.b, Shape: shape, Strides: []int{256, 1}, DType: device.Float32},
			device.View{Block: s.b, Shape: shape, Strides: []int{256, 1}, DType: device.BFloat16})
		if err != nil {
			t.Fatal(err)
		}
		got := wordsOf(d.download(t))
		for i, b := range src {
			if want := math.Float32bits(device.FromBFloat16(b)); got[i] != want {
				t.Fatalf("bfloat16 %#04x → float32 %#08x, want %#08x", b, got[i], want)
			}
		}
	})
	for _, c := range []struct{ dst, src device.DType }{
		{device.BFloat16, device.Float32}, {device.Float32, device.BFloat16},
		{device.BFloat16, device.BFloat16}, {device.Float32, device.Float32}, {device.Int32, device.Int32},
	} {
		t.Run(fmt.Sprintf("strided %s to %s", c.src, c.dst), func(t *testing.T) {
			convertStrided(t, dev, ck, rng, c.dst, c.src)
		})
	}
	t.Run("refused", func(t *testing.T) {
		b := alloc(t, dev, 64)
		for _, c := range []struct{ dst, src device.DType }{
			{device.Int32, device.Float32}, {device.Float32, device.Int32}, {device.BFloat16, device.Int32},
			{device.Float16, device.Float16}, {device.Float16, device.Float32}, {device.BFloat16, device.Float16},
		} {
			v := func(dt device.DType) device.View {
				return device.View{Block: b.b, Shape: []int{4}, Strides: []int{1}, DType: dt}
			}
			err := ck.Convert(v(c.dst), v(c.src))
			var u *device.UnsupportedError
			if !errors.As(err, &u) {
				t.Errorf("Convert %s → %s: %v, want an *UnsupportedError", c.src, c.dst, err)
			}
		}
	})
}

// element is the bits of one element of a view's type, held in 32 bits.
func elementBits(raw []byte, dt device.DType, i int) uint32 {
	if dt.Size() == 2 {
		return uint32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return binary.LittleEndian.Uint32(raw[4*i:])
}

// convertStrided converts a transposed source (rank 3, a non-zero offset)
// into a region of a larger destination (strides that skip elements, an
// offset), at 40000+ elements, so that grid-stride loops go round, and a
// broadcast source (a zero stride). Elements of dst outside the view keep
// their sentinel.
func convertStrided(t *testing.T, dev device.Device, ck device.ConvertKernels, rng *rand.Rand, dt, st device.DType) {
	for _, c := range []struct {
		name                 string
		shape                []int
		srcStrides, dstStrid []int
		srcOff, dstOff       int
	}{
		// src: a [50, 40, 21] tensor's axes permuted to [21, 50, 40]; dst:
		// every other column of a [21, 50, 81] region.
		{"transposed into a region", []int{21, 50, 40}, []int{1, 40 * 21, 21}, []int{50 * 81, 81, 2}, 3, 5},
		// a row broadcast down a column; contiguous dst
		{"broadcast", []int{300, 7}, []int{0, 1}, []int{7, 1}, 1, 0},
		// both contiguous, offset (the memcpy path for equal types)
		{"contiguous", []int{1001}, []int{1}, []int{1}, 7, 3},
	} {
		srcLen, dstLen := c.srcOff+1, c.dstOff+1
		for d, n := range c.shape {
			srcLen += (n - 1) * c.srcStrides[d]
			dstLen += (n - 1) * c.dstStrid[d]
		}
		srcRaw := make([]byte, srcLen*st.Size())
		for i := range srcLen {
			f := float32(rng.NormFloat64() * 100)
			var bits uint32
			switch st {
			case device.BFloat16:
				bits = uint32(device.ToBFloat16(f))
				if i%97 == 0 {
					bits = uint32(rng.Uint32N(1 << 16)) // any pattern, NaNs too
				}
			case device.Int32:
				bits = rng.Uint32()
			default:
				bits = math.Float32bits(f)
				if i%89 == 0 {
					bits = Specials[i%len(Specials)]
				}
			}
			if st.Size() == 2 {
				binary.LittleEndian.PutUint16(srcRaw[2*i:], uint16(bits))
			} else {
				binary.LittleEndian.PutUint32(srcRaw[4*i:], bits)
			}
		}
		const sentinel = 0xa5a5a5a5
		dstRaw := make([]byte, dstLen*dt.Size())
		for i := range dstLen {
			if dt.Size() == 2 {
				binary.LittleEndian.PutUint16(dstRaw[2*i:], sentinel&0xffff)
			} else {
				binary.LittleEndian.PutUint32(dstRaw[4*i:], sentinel)
			}
		}
		s, d := alloc(t, dev, len(srcRaw)), alloc(t, dev, len(dstRaw))
		s.upload(t, srcRaw)
		d.upload(t, dstRaw)
		err := ck.Convert(device.View{Block: d.b, Off: c.dstOff, Shape: c.shape, Strides: c.dstStrid, DType: dt},
			device.View{Block: s.b, Off: c.srcOff, Shape: c.shape, Strides: c.srcStrides, DType: st})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := d.download(t)
		want := make([]uint32, dstLen)
		for i := range want {
			want[i] = sentinel
			if dt.Size() == 2 {
				want[i] &= 0xffff
			}
		}
		idx := make([]int, len(c.shape))
		for range device.Numel(c.shape) {
			so, do := c.srcOff, c.dstOff
			for ax, v := range idx {
				so += v * c.srcStrides[ax]
				do += v * c.dstStrid[ax]
			}
			x := elementBits(srcRaw, st, so)
			switch {
			case st == device.Float32 && dt == device.BFloat16:
				x = uint32(device.ToBFloat16(math.Float32frombits(x)))
			case st == device.BFloat16 && dt == device.Float32:
				x = math.Float32bits(device.FromBFloat16(uint16(x)))
			}
			want[do] = x
			for ax := len(idx) - 1; ax >= 0; ax-- {
				if idx[ax]++; idx[ax] < c.shape[ax] {
					break
				}
				idx[ax] = 0
			}
		}
		bad := 0
		for i, w := range want {
			if g := elementBits(got, dt, i); g != w {
				if bad++; bad <= 5 {
					t.Errorf("%s: dst element %d is %#x, want %#x", c.name, i, g, w)
				}
			}
		}
	}
}
