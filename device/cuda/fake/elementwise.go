package fake

import (
	"ferry/device"
)

// The launches of device/cuda/kernels/elementwise.cu (copies, conversions,
// unary and binary ops, the *_mixed variants that take bfloat16) on the
// CPU device's kernels (Note [one source per kernel]).

func init() {
	register(map[string]kernelFunc{
		"ferry_copy_strided32":    func(k *launch) { copyStrided(k, true) },
		"ferry_copy_strided64":    func(k *launch) { copyStrided(k, false) },
		"ferry_convert_strided32": func(k *launch) { convertStrided(k, true) },
		"ferry_convert_strided64": func(k *launch) { convertStrided(k, false) },
		"ferry_unary_contig":      unaryContig,
		"ferry_unary_strided32":   func(k *launch) { unaryStrided(k, true) },
		"ferry_unary_strided64":   func(k *launch) { unaryStrided(k, false) },
		"ferry_unary_mixed32":     func(k *launch) { unaryMixed(k, true) },
		"ferry_unary_mixed64":     func(k *launch) { unaryMixed(k, false) },
		"ferry_binary_contig":     binaryContig,
		"ferry_binary_strided32":  func(k *launch) { binaryStrided(k, true) },
		"ferry_binary_strided64":  func(k *launch) { binaryStrided(k, false) },
		"ferry_binary_mixed32":    func(k *launch) { binaryMixed(k, true) },
		"ferry_binary_mixed64":    func(k *launch) { binaryMixed(k, false) },
	})
}

// checkLayout checks a strided launch over n elements of l with nops
// operands.
func (k *launch) checkLayout(n int64, l strided, nops int, i32 bool) {
	var m int64
	for op := 0; op < nops; op++ {
		m = max(m, l.maxOff(op))
	}
	k.oneD(n, i32, m)
	if int64(device.Numel(l.shape)) != n {
		k.fail("%d elements in a layout of shape %v", n, l.shape)
	}
}

// copyStrided is ferry_copy_strided(dst, src, n, L): 4-byte words, copied
// as Int32 so that every bit pattern travels.
func copyStrided(k *launch, i32 bool) {
	n, l := k.i64(2), k.strided(3)
	k.checkLayout(n, l, 2, i32)
	k.must(host.(device.StridedCopyKernels).CopyStrided(k.operand(0, device.Int32, l, 0), k.operand(1, device.Int32, l, 1)))
}

// The modes of ferry_convert_strided (CONVERT_* in elementwise.cu): the
// element types of dst and src.
var convertModes = [][2]device.DType{{device.BFloat16, device.Float32}, {device.Float32, device.BFloat16}, {device.BFloat16, device.BFloat16}}

// convertStrided is ferry_convert_strided(mode, dst, src, n, L); an
// unknown mode writes nothing, as in the kernel.
func convertStrided(k *launch, i32 bool) {
	mode, n, l := k.i32(0), k.i64(3), k.strided(4)
	k.checkLayout(n, l, 2, i32)
	if mode < 0 || int(mode) >= len(convertModes) {
		return
	}
	t := convertModes[mode]
	k.must(host.(device.ConvertKernels).Convert(k.operand(1, t[0], l, 0), k.operand(2, t[1], l, 1)))
}

func (k *launch) unaryOp(i int) device.UnaryOp {
	op := k.i32(i)
	if op < 0 || op >= int32(device.NumUnaryOps) {
		k.fail("unary op %d is not a device.UnaryOp", op)
	}
	return device.UnaryOp(op)
}

func (k *launch) binaryOp(i int) device.BinaryOp {
	op := k.i32(i)
	if op < 0 || op >= int32(device.NumBinaryOps) {
		k.fail("binary op %d is not a device.BinaryOp", op)
	}
	return device.BinaryOp(op)
}

// unaryContig is ferry_unary_contig(op, alpha, dst, src, n).
func unaryContig(k *launch) {
	op, alpha, n := k.unaryOp(0), k.f32(1), k.i64(4)
	k.oneD(n, false, 0)
	k.must(host.Unary(op, k.contig(2, device.Float32, int(n)), k.contig(3, device.Float32, int(n)), alpha))
}

// unaryStrided is ferry_unary_strided(op, alpha, dst, src, n, L).
func unaryStrided(k *launch, i32 bool) {
	op, alpha, n, l := k.unaryOp(0), k.f32(1), k.i64(4), k.strided(5)
	k.checkLayout(n, l, 2, i32)
	k.must(host.Unary(op, k.operand(2, device.Float32, l, 0), k.operand(3, device.Float32, l, 1), alpha))
}

// unaryMixed is ferry_unary_mixed(op, alpha, types, dst, src, n, L).
func unaryMixed(k *launch, i32 bool) {
	op, alpha, types, n, l := k.unaryOp(0), k.f32(1), k.i32(2), k.i64(5), k.strided(6)
	k.checkLayout(n, l, 2, i32)
	k.must(host.Unary(op, k.operand(3, typeOf(types, 0), l, 0), k.operand(4, typeOf(types, 1), l, 1), alpha))
}

// binaryContig is ferry_binary_contig(op, dst, a, b, n).
func binaryContig(k *launch) {
	op, n := k.binaryOp(0), int(k.i64(4))
	k.oneD(int64(n), false, 0)
	k.must(host.Binary(op, k.contig(1, device.Float32, n), k.contig(2, device.Float32, n), k.contig(3, device.Float32, n)))
}

// binaryStrided is ferry_binary_strided(op, dst, a, b, n, L).
func binaryStrided(k *launch, i32 bool) {
	op, n, l := k.binaryOp(0), k.i64(4), k.strided(5)
	k.checkLayout(n, l, 3, i32)
	k.must(host.Binary(op, k.operand(1, device.Float32, l, 0), k.operand(2, device.Float32, l, 1), k.operand(3, device.Float32, l, 2)))
}

// binaryMixed is ferry_binary_mixed(op, types, dst, a, b, n, L).
func binaryMixed(k *launch, i32 bool) {
	op, types, n, l := k.binaryOp(0), k.i32(1), k.i64(5), k.strided(6)
	k.checkLayout(n, l, 3, i32)
	k.must(host.Binary(op, k.operand(2, typeOf(types, 0), l, 0), k.operand(3, typeOf(types, 1), l, 1), k.operand(4, typeOf(types, 2), l, 2)))
}
