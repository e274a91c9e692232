package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is an element type as the format spells it ("F32", "BF16").
type DType string

// The element types the format layer knows. Ferry's tensors are float32
// and int32 only; the others can be read, written and (for the floats)
// converted to float32 with Tensor.Float32s.
const (
	F64     DType = "F64"
	F32     DType = "F32"
	F16     DType = "F16"
	BF16    DType = "BF16"
	F8E4M3  DType = "F8_E4M3"
	F8E5M2  DType = "F8_E5M2"
	I64     DType = "I64"
	I32     DType = "I32"
	I16     DType = "I16"
	I8      DType = "I8"
	U64     DType = "U64"
	U32     DType = "U32"
	U16     DType = "U16"
	U8      DType = "U8"
	Bool    DType = "BOOL"
	unknown DType = ""
)

var dtypeSizes = map[DType]int{
	F64: 8, F32: 4, F16: 2, BF16: 2, F8E4M3: 1, F8E5M2: 1,
	I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, Bool: 1,
}

// Size is the bytes per element, or 0 for a dtype the format does not
// define.
func (d DType) Size() int { return dtypeSizes[d] }

// Known reports whether d is one of the format's dtypes.
func (d DType) Known() bool { return d.Size() > 0 }

// Tensor is one named tensor: its dtype, shape and raw little-endian bytes,
// row-major. A Tensor from Parse or ReadFile shares Data with the buffer it
// was parsed from; Float32s and Int32s return copies.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Numel is the number of elements (1 for a scalar, shape []), or -1 when
// the shape has a negative dimension or its size overflows.
func (t *Tensor) Numel() int {
	n, ok := shapeBytes(t.Shape, 1)
	if !ok {
		return -1
	}
	return int(n)
}

// Float32s decodes the data as float32 values: F32 as it is, F64, F16 and
// BF16 converted (F64 rounds to nearest; values beyond float32's range
// become ±Inf). Any other dtype is an error.
func (t *Tensor) Float32s() ([]float32, error) {
	n := t.Numel()
	if sz, ok := shapeBytes(t.Shape, t.DType.Size()); !ok || !t.DType.Known() || uint64(len(t.Data)) != sz {
		return nil, fmt.Errorf("tensor %q: %d bytes do not hold %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
	}
	out := make([]float32, n)
	b := t.Data
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case F16:
		for i := range out {
			out[i] = halfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %q is %s; only F32, F64, F16 and BF16 convert to float32", t.Name, t.DType)
	}
	return out, nil
}

// Int32s decodes I32 data. Any other dtype is an error (I64 included:
// narrowing indices silently is how bugs hide).
func (t *Tensor) Int32s() ([]int32, error) {
	if t.DType != I32 {
		return nil, fmt.Errorf("tensor %q is %s, not I32", t.Name, t.DType)
	}
	n := t.Numel()
	if sz, ok := shapeBytes(t.Shape, 4); !ok || uint64(len(t.Data)) != sz {
		return nil, fmt.Errorf("tensor %q: %d bytes do not hold %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// FromFloat32s makes an F32 tensor holding a copy of data. The shape is
// not checked here; Encode checks it.
func FromFloat32s(name string, data []float32, shape ...int) Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, DType: F32, Shape: append([]int{}, shape...), Data: b}
}

// FromInt32s makes an I32 tensor holding a copy of data.
func FromInt32s(name string, data []int32, shape ...int) Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return Tensor{Name: name, DType: I32, Shape: append([]int{}, shape...), Data: b}
}

// halfToFloat32 widens an IEEE 754 binary16 value exactly.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
	case frac == 0:
		return math.Float32frombits(sign)
	}
	// subnormal: frac · 2⁻²⁴
	v := float32(frac) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
