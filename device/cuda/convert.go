package cuda

import (
	"ferry/device"
)

// The modes of ferry_convert_strided (CONVERT_* in kernels/elementwise.cu).
const (
	convertF32BF16 = 0 // float32 → bfloat16, ToBFloat16's bits
	convertBF16F32 = 1 // bfloat16 → float32, exact
	convertCopy16  = 2 // 2-byte elements, copied
)

// Convert writes src into dst, converting between float32 and bfloat16
// (device.ConvertKernels). Both may have any strides, each counted in its
// own element type. Equal 4-byte types go through Copy's kernels (a
// memcpy when both are contiguous); everything else through
// ferry_convert_strided, whose float32 → bfloat16 rounding is
// device.ToBFloat16 in integer operations, so the bits agree, NaNs
// included.
func (k *kernels) Convert(dst, src device.View) error {
	if err := device.CheckConvertTypes(k.d.name, dst.DType, src.DType); err != nil {
		return err
	}
	if dst.DType == src.DType && dst.DType.Size() == 4 {
		return k.copy32(dst, src)
	}
	mode, memcpyBytes := int32(convertCopy16), int64(2) // 2-byte copies are a memcpy where contiguous
	switch {
	case dst.DType == device.BFloat16 && src.DType == device.Float32:
		mode, memcpyBytes = convertF32BF16, 0
	case dst.DType == device.Float32 && src.DType == device.BFloat16:
		mode, memcpyBytes = convertBF16F32, 0
	}
	return k.stridedCopy("convert", "ferry_convert_strided", dst, src, memcpyBytes, mode)
}

var _ device.ConvertKernels = (*kernels)(nil)
