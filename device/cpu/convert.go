package cpu

import (
	"fmt"
	"slices"
	"unsafe"

	"ferry/device"
	"ferry/internal/gemm"
)

// Convert implements device.ConvertKernels: float32 to bfloat16 rounds
// to nearest even with device.ToBFloat16's bits (NaN included),
// bfloat16 to float32 is exact, equal types copy bits. Like CopyStrided
// it walks the collapsed layout of dst and src row by row, over
// goroutines for large tensors; contiguous rows of a conversion run in
// package gemm's loops (assembly where AVX2 is allowed, the same bits).
func (k *kernels) Convert(dst, src device.View) error {
	if err := device.CheckConvertTypes("cpu", dst.DType, src.DType); err != nil {
		return err
	}
	if !slices.Equal(dst.Shape, src.Shape) {
		return fmt.Errorf("cpu: convert of shape %v into shape %v", src.Shape, dst.Shape)
	}
	n := dst.Numel()
	if n == 0 {
		return nil
	}
	row := convertRow(dst, src)
	l := collapse(dst.Shape, dst.Strides, src.Strides)
	last := len(l.shape) - 1
	ds, ss := l.strides[0][last], l.strides[1][last]
	parallelFor(n, elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, n int) { row(offs[0], ds, offs[1], ss, n) })
	})
	return nil
}

// convertRow returns the loop that converts n elements of src, from
// element so step ss, into dst from element do step ds (offsets relative
// to the views' own).
func convertRow(dst, src device.View) func(do, ds, so, ss, n int) {
	switch {
	case dst.DType == device.BFloat16 && src.DType == device.Float32:
		d, s := uint16s(dst), floats(src)
		return func(do, ds, so, ss, n int) {
			if ds == 1 && ss == 1 {
				gemm.RoundBF16s(d[do:do+n], s[so:so+n])
				return
			}
			for i := range n {
				d[do+i*ds] = device.ToBFloat16(s[so+i*ss])
			}
		}
	case dst.DType == device.Float32 && src.DType == device.BFloat16:
		d, s := floats(dst), uint16s(src)
		return func(do, ds, so, ss, n int) {
			if ds == 1 && ss == 1 {
				gemm.WidenBF16s(d[do:do+n], s[so:so+n])
				return
			}
			for i := range n {
				d[do+i*ds] = device.FromBFloat16(s[so+i*ss])
			}
		}
	case dst.DType.Size() == 2:
		return stridedCopy(uint16s(dst), uint16s(src))
	default: // Float32, Int32: bits
		return stridedCopy(uint32s(dst), uint32s(src))
	}
}

func stridedCopy[T uint16 | uint32](d, s []T) func(do, ds, so, ss, n int) {
	return func(do, ds, so, ss, n int) {
		if ds == 1 && ss == 1 {
			copy(d[do:do+n], s[so:so+n])
			return
		}
		for i := range n {
			d[do+i*ds] = s[so+i*ss]
		}
	}
}

// uint16s returns the 2-byte elements a view can reach, starting at its
// offset (bfloat16 bits).
func uint16s(v device.View) []uint16 {
	b := Bytes(v.Block)
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)[v.Off:]
}

// uint32s returns the 4-byte elements a view can reach, as bits.
func uint32s(v device.View) []uint32 {
	b := Bytes(v.Block)
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)[v.Off:]
}
