package cuda

import (
	"ferry/device"
)

// Note [bfloat16 elementwise on the GPU]. Unary, Binary, Sum and Dropout
// take bfloat16 views (device.ElementwiseBF16Kernels) through kernels of
// their own, so that the float32 kernels stay as they were: a launch with
// a bfloat16 operand goes to ferry_unary_mixed, ferry_binary_mixed (32- or
// 64-bit indices, a contiguous layout collapsed to rank 1),
// ferry_sum_*_mixed or ferry_dropout_bf16. Each takes the operands' types
// as bits (ewTypes, TYPE_BF16 in kernels/common.cuh), widens a bfloat16
// input exactly, computes as the float32 kernel does, and rounds a
// bfloat16 dst with f32_to_bf16 (device.ToBFloat16's bits): the bits of
// Convert, the float32 kernel and Convert, in one pass and without
// temporaries. Operands' offsets and strides count their own elements, as
// the views' do.

// ElementwiseBF16 implements device.ElementwiseBF16Kernels.
func (k *kernels) ElementwiseBF16() bool { return true }

var _ device.ElementwiseBF16Kernels = (*kernels)(nil)

// mixedTypes returns the type bits of vs (bit i: vs[i] is bfloat16) and
// whether any is bfloat16, or an *UnsupportedError when one is neither
// float32 nor bfloat16 while another is bfloat16.
func (k *kernels) mixedTypes(op string, vs ...device.View) (int32, bool, error) {
	var types int32
	for i, v := range vs {
		if v.DType == device.BFloat16 {
			types |= 1 << i
		}
	}
	if types == 0 {
		return 0, false, nil
	}
	for _, v := range vs {
		if v.DType != device.Float32 && v.DType != device.BFloat16 {
			return 0, false, &device.UnsupportedError{Op: op, DType: v.DType.String(), Device: k.d.name}
		}
	}
	return types, true, nil
}

// dropoutBF16 is Dropout on bfloat16 src and dst (of one type, as
// device.ElementwiseBF16Kernels says): ferry_dropout_bf16, which also
// writes p ≥ 1's zeros (Fill writes 4-byte words).
func (k *kernels) dropoutBF16(dst, src device.View, n int64, p float32, key device.DropoutKey) error {
	if dst.DType != src.DType {
		return &device.UnsupportedError{Op: "dropout", DType: src.DType.String() + "→" + dst.DType.String(), Device: k.d.name}
	}
	ptr, err := k.ptrs(dst, src)
	if err != nil {
		return err
	}
	a := dropoutArgs(newArgs().Ptr(ptr[0]).Ptr(ptr[1]).I64(n), p, key).I32(b2i(p >= 1))
	return k.launch("ferry_dropout_bf16", k.grid1((n+3)/4), block1, a)
}

// zero writes +0 into every element of dst (contiguous), float32 by Fill,
// bfloat16 by ferry_dropout_bf16 with zero set (Fill writes 4-byte
// words).
func (k *kernels) zero(dst device.View) error {
	if dst.DType != device.BFloat16 {
		return k.Fill(dst, 0)
	}
	return k.dropoutBF16(dst, dst, int64(dst.Numel()), 1, device.DropoutKey{})
}

// sumWidened is Sum of a bfloat16 src that is not contiguous: src
// widened by Convert into a contiguous float32 temporary, then summed.
// The order of a sum's additions follows its layout, so a NaN's sign
// and payload (Inf - Inf, or NaNs of both signs) would otherwise depend
// on it; the temporary gives the sums of Convert and the float32 kernel
// bit for bit. Contiguous sources, bias gradients among them, are summed
// in one pass.
func (k *kernels) sumWidened(dst, src device.View, alpha float32) error {
	n := src.Numel()
	b, err := k.d.alloc.Alloc(int64(n)*4, device.Temporary)
	if err != nil {
		return err
	}
	// Freed at once: whoever gets the block next runs after us on the
	// compute stream.
	defer k.d.alloc.Free(b)
	w := device.View{Block: b, DType: device.Float32, Shape: src.Shape, Strides: device.Contiguous(src.Shape)}
	if err := k.Convert(w, src); err != nil {
		return err
	}
	return k.Sum(dst, w, alpha)
}
