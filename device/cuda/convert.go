package cuda

import (
	"fmt"

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
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	p, err := k.ptrs(dst, src)
	if err != nil {
		return err
	}
	l, err := collapse(dst.Shape, dst.Strides, src.Strides)
	if err != nil {
		return fmt.Errorf("%s: convert: %w", k.d.name, err)
	}
	mode := int32(convertCopy16)
	switch {
	case dst.DType == device.BFloat16 && src.DType == device.Float32:
		mode = convertF32BF16
	case dst.DType == device.Float32 && src.DType == device.BFloat16:
		mode = convertBF16F32
	}
	if mode == convertCopy16 && l.contiguous(2) {
		if err := k.d.ctx.MemcpyDtoDAsync(p[0], p[1], n*2, k.d.compute.h); err != nil {
			return fmt.Errorf("%s: convert: %w", k.d.name, err)
		}
		return nil
	}
	name := "ferry_convert_strided64"
	if l.fits32(n, 2) && !k.d.index64 {
		name = "ferry_convert_strided32"
	}
	return k.launch(name, k.grid1(n), block1, newArgs().I32(mode).Ptr(p[0]).Ptr(p[1]).I64(n).Int64s(l.encode()...))
}

var _ device.ConvertKernels = (*kernels)(nil)
