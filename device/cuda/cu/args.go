package cu

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Args is a kernel's parameter list as cuLaunchKernel takes it: one value
// per parameter of the kernel, in declaration order, each in its own
// 8-byte-aligned slot. The driver copies each parameter's bytes (as many as
// the kernel's image declares) at launch, so Args may be reused as soon as
// LaunchKernel returns.
//
// A struct parameter is passed as its bytes (Bytes), laid out as the C
// compiler lays it out; ferry's kernel structs hold only 64-bit fields, so
// that layout is the plain sequence of fields.
type Args struct {
	words []uint64 // the slots, 8-byte aligned
	offs  []int    // byte offset of each parameter
	sizes []int    // byte size of each parameter
	ptrs  []unsafe.Pointer
}

// Reset empties the list, keeping its storage.
func (a *Args) Reset() *Args {
	a.words, a.offs, a.sizes = a.words[:0], a.offs[:0], a.sizes[:0]
	return a
}

// Len is the number of parameters.
func (a *Args) Len() int { return len(a.offs) }

func (a *Args) bytes() []byte {
	if len(a.words) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&a.words[0])), len(a.words)*8)
}

// slot appends a parameter of n bytes and returns its bytes.
func (a *Args) slot(n int) []byte {
	off := len(a.words) * 8
	a.words = append(a.words, make([]uint64, (n+7)/8)...)
	a.offs = append(a.offs, off)
	a.sizes = append(a.sizes, n)
	return a.bytes()[off : off+n]
}

// Ptr appends a device pointer (8 bytes).
func (a *Args) Ptr(p DevicePtr) *Args { return a.U64(uint64(p)) }

// U64 appends an unsigned 64-bit integer.
func (a *Args) U64(v uint64) *Args {
	binary.LittleEndian.PutUint64(a.slot(8), v)
	return a
}

// I64 appends a 64-bit integer (C long long).
func (a *Args) I64(v int64) *Args { return a.U64(uint64(v)) }

// I32 appends a 32-bit integer (C int).
func (a *Args) I32(v int32) *Args {
	binary.LittleEndian.PutUint32(a.slot(4), uint32(v))
	return a
}

// F32 appends a float.
func (a *Args) F32(v float32) *Args {
	binary.LittleEndian.PutUint32(a.slot(4), math.Float32bits(v))
	return a
}

// F64 appends a double.
func (a *Args) F64(v float64) *Args { return a.U64(math.Float64bits(v)) }

// Bytes appends a parameter whose bytes are b (a struct passed by value).
func (a *Args) Bytes(b []byte) *Args {
	copy(a.slot(len(b)), b)
	return a
}

// Int64s appends a struct made of the given 64-bit integers, in order.
func (a *Args) Int64s(v ...int64) *Args {
	b := a.slot(8 * len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return a
}

// Param returns the bytes of parameter i (the fake driver reads kernel
// arguments through it).
func (a *Args) Param(i int) []byte { return a.bytes()[a.offs[i] : a.offs[i]+a.sizes[i]] }

// Size is the byte size of parameter i.
func (a *Args) Size(i int) int { return a.sizes[i] }

// Pointers returns the kernelParams array: a pointer to each parameter's
// bytes. It is valid until a is next changed.
func (a *Args) Pointers() []unsafe.Pointer {
	a.ptrs = a.ptrs[:0]
	b := a.bytes()
	for _, off := range a.offs {
		a.ptrs = append(a.ptrs, unsafe.Pointer(&b[off]))
	}
	return a.ptrs
}
