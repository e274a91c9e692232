package device

import "fmt"

// DType is an element type.
type DType uint8

const (
	Float32  DType = iota
	Int32          // class indices for losses
	BFloat16       // bfloat16: Gemm's operands and ConvertKernels (Note [bfloat16])
	Float16        // reserved: no kernel takes it
	Uint8          // bytes: quantised optimizer state (codes), moved by Upload and Download only
)

var dtypeNames = []string{"float32", "int32", "bfloat16", "float16", "uint8"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size is the bytes per element.
func (d DType) Size() int {
	switch d {
	case BFloat16, Float16:
		return 2
	case Uint8:
		return 1
	default:
		return 4
	}
}

// View is how a kernel sees a tensor: a block, an element offset into it,
// and a shape with strides in elements. Kernels write only contiguous
// outputs (row-major, strides as Contiguous gives) unless a method says
// otherwise; inputs may have any strides, 0 included (broadcast).
//
// DType is the element type; the zero value is Float32. Kernels take
// float32 views (and Int32 where a method says so) unless a method says
// otherwise: only ConvertKernels and Gemm (GemmParams' types) take
// BFloat16 (Note [bfloat16]).
type View struct {
	Block   *Block
	Off     int // elements from the start of the block
	Shape   []int
	Strides []int
	DType   DType
}

// Numel is the number of elements the view covers.
func (v View) Numel() int { return Numel(v.Shape) }

// Numel is the product of shape.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Contiguous returns row-major strides for shape.
func Contiguous(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// IsContiguous reports whether v's strides are row-major for its shape
// (dimensions of size 1 may have any stride).
func (v View) IsContiguous() bool {
	s := 1
	for i := len(v.Shape) - 1; i >= 0; i-- {
		if v.Shape[i] != 1 && v.Strides[i] != s {
			return false
		}
		s *= v.Shape[i]
	}
	return true
}

// The elementwise op enums, UnaryOp and BinaryOp, are generated with
// their copy for the CUDA kernels from one list (internal/opgen):
//
//go:generate go run ./internal/opgen

// GemmParams describe a batched, strided matrix product on row-major
// matrices: for each i < Batch,
//
//	C[i] = Alpha·op(A[i])·op(B[i]) + Beta·C[i]
//
// where op(A) is M×K, op(B) is K×N and C is M×N. A[i] starts StrideA
// elements after A[i-1] (0 reuses one matrix for the whole batch). With
// Beta 0, C is not read.
type GemmParams struct {
	TransA, TransB            bool
	M, N, K                   int
	Alpha, Beta               float32
	A, B, C                   *Block
	OffA, OffB, OffC          int // elements
	LDA, LDB, LDC             int
	Batch                     int
	StrideA, StrideB, StrideC int
	// TypeA, TypeB and TypeC are the element types of A, B and C; the zero
	// value is Float32. A and B may be BFloat16 together (both or
	// neither), with C Float32 or BFloat16: the products and their sums
	// are float32 (bfloat16 operands multiply exactly in float32), and a
	// BFloat16 C receives the float32 result Alpha·AB + Beta·C rounded to
	// nearest even, C read as float32. A device without bfloat16 products
	// returns an *UnsupportedError.
	TypeA, TypeB, TypeC DType
}

// Mixed reports whether the product has an operand that is not float32.
func (p GemmParams) Mixed() bool {
	return p.TypeA != Float32 || p.TypeB != Float32 || p.TypeC != Float32
}

// CheckGemmTypes returns an *UnsupportedError for a combination of element
// types no device multiplies (see GemmParams), naming device dev.
func CheckGemmTypes(dev string, p GemmParams) error {
	switch {
	case !p.Mixed():
		return nil
	case p.TypeA == BFloat16 && p.TypeB == BFloat16 && (p.TypeC == Float32 || p.TypeC == BFloat16):
		return nil
	}
	return &UnsupportedError{Op: "gemm", DType: fmt.Sprintf("%s×%s→%s", p.TypeA, p.TypeB, p.TypeC), Device: dev}
}

// SGDParams are PyTorch's SGD hyper-parameters for one step.
type SGDParams struct {
	LR, Momentum, Dampening, WeightDecay float32
	Nesterov                             bool
	// First is true on the first step, when the momentum buffer is
	// initialised from the gradient instead of updated.
	First bool
}

// AdamWParams are PyTorch's AdamW hyper-parameters for step Step (1-based).
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Step                               int
}

// Kernels is the arithmetic a device provides, on float32 data unless a
// method says otherwise. Each call enqueues work on the device's compute
// stream; on an asynchronous device an error may instead surface at the
// next synchronization. Arguments are validated by the caller (the tensor
// layer): kernels may assume shapes agree.
type Kernels interface {
	// Gemm runs a batched matrix product (see GemmParams).
	Gemm(p GemmParams) error
	// Copy writes src (any strides) into dst (contiguous, same shape).
	// With dtype Int32 it copies 4-byte integers.
	Copy(dst, src View) error
	// Fill sets every element of dst (contiguous) to v.
	Fill(dst View, v float32) error
	// Unary writes op(src) into dst; alpha parametrises Scale, AddScalar
	// and PowScalar. dst may be src (same block, offset and layout).
	Unary(op UnaryOp, dst, src View, alpha float32) error
	// Binary writes op(a, b) into dst, a and b broadcast to dst's shape
	// (their shapes have dst's rank; a broadcast dimension has stride 0).
	// dst may be a.
	Binary(op BinaryOp, dst, a, b View) error
	// Sum writes alpha times the sum of src over the axes where dst's size
	// is 1 and src's is not (dst has src's rank).
	Sum(dst, src View, alpha float32) error
	// Softmax writes softmax (or, with log, log-softmax) of src over its
	// last axis into dst; both contiguous.
	Softmax(dst, src View, log bool) error
	// SoftmaxBackward writes the gradient with respect to the softmax
	// input, given the output's gradient and the output (log or not).
	SoftmaxBackward(dst, grad, out View, log bool) error
	// NLL writes to the scalar dst the mean over rows of -logp[r, target[r]],
	// skipping rows whose target is negative; target is Int32 with one
	// entry per row of logp (rows × classes). With no row counted, dst is NaN.
	NLL(dst, logp, target View) error
	// NLLBackward writes into dst (rows × classes) the gradient of NLL
	// given the scalar output gradient grad: -grad/count at each row's
	// target, 0 elsewhere.
	NLLBackward(dst, grad, target View) error
	// Upload copies host bytes into dst (contiguous, any DType: its Off
	// counts elements of that type) and Download copies src (contiguous)
	// into host bytes; both block until done. On the meta device they do
	// nothing.
	Upload(dst View, src []byte) error
	Download(dst []byte, src View) error
}

// FusedKernels is implemented by the Kernels of devices that fuse a Linear
// layer's bias and a following ReLU into one pass over the product (the
// CPU device). The tensor layer uses them when present and otherwise runs
// Binary and Unary, with the same allocations either way.
type FusedKernels interface {
	// BiasReLU writes max(src + bias, 0) into dst; src and dst are
	// contiguous [rows, cols] (dst may be src), bias contiguous [cols].
	// NaN propagates, as in Unary's ReLU.
	BiasReLU(dst, src, bias View) error
	// ReLUBackwardSum writes Binary's ReLUGrad of grad and out into dst
	// (grad where out > 0 or out is NaN, else 0) and, unless sum.Block is nil, the sum of dst over its rows into sum,
	// with the bits Sum would give: grad, out and dst are contiguous
	// [rows, cols] (dst may be grad), sum contiguous [cols].
	ReLUBackwardSum(dst, sum, grad, out View) error
}

// StridedCopyKernels is implemented by the Kernels of devices that copy
// into a strided destination in one call: the tensor layer writes a
// region of a larger tensor (Cat, the backward of Narrow and Split) with
// it, and otherwise with one Copy per contiguous run of the region — on a
// GPU one launch per row, which for a GPT's q, k, v split is B·T launches
// per piece and layer.
type StridedCopyKernels interface {
	// CopyStrided writes src into dst, both of one shape and any strides;
	// dst's elements must not overlap one another (a view with a zero
	// stride is not a destination). With dtype Int32 it copies 4-byte
	// integers.
	CopyStrided(dst, src View) error
}

// FusedGELUKernels is implemented by the Kernels of devices that fuse a
// Linear layer's bias and a following tanh-approximated GELU (GPT-2's
// MLP) into one pass over the product, and, in backward, the GELU's
// derivative and the bias gradient into one pass over the output's
// gradient. The tensor layer uses them when present and otherwise runs
// Unary, Binary and Sum, with the same allocations either way.
type FusedGELUKernels interface {
	// BiasGELUTanh adds bias to z in place (Binary's Add) and writes the
	// tanh-approximated GELU of the sum (Unary's GELUTanh) into dst: z and
	// dst are contiguous [rows, cols] and distinct, bias contiguous
	// [cols]. z keeps the pre-activation, which backward needs.
	BiasGELUTanh(dst, z, bias View) error
	// GELUTanhBackwardSum writes grad·GELUTanh'(z) into dst (Binary's
	// GELUTanhGrad) and, unless sum.Block is nil, the sum of dst over its
	// rows into sum, with the bits Sum would give: grad, z and dst are
	// contiguous [rows, cols] (dst may be grad), sum contiguous [cols].
	GELUTanhBackwardSum(dst, sum, grad, z View) error
}

// FusedAddLayerNormKernels is implemented by the Kernels of devices that
// add a residual and normalise the sum in one pass (a pre-LN transformer
// block's x + attn(ln_1(x)) followed by ln_2). The tensor layer uses it
// when present and otherwise runs Binary and LayerNorm.
type FusedAddLayerNormKernels interface {
	// AddLayerNorm writes x + r into sum (Binary's Add) and does what
	// LayerNormKernels.LayerNorm does with sum as its input, with its
	// bits: x, r, sum and dst are contiguous [rows, C] and distinct; mean
	// and rstd contiguous [rows]; weight and bias contiguous [C] or a View
	// with a nil Block.
	AddLayerNorm(sum, dst, mean, rstd, x, r, weight, bias View, eps float32) error
}

// OptimizerKernels is implemented by the Kernels of devices with fused
// steps for the two optimizers PyTorch users meet first (the CPU, CUDA
// and meta devices). Package optim uses them when present; a device
// without them, and every other optimizer, updates through HostLoopKernels
// or tensor ops (optim's Note [update paths]), so an optimizer needs no
// kernel of its own on any device.
type OptimizerKernels interface {
	// SGDStep updates param in place (and momentum, when p.Momentum ≠ 0).
	SGDStep(param, grad, momentum View, p SGDParams) error
	// AdamWStep updates param, expAvg and expAvgSq in place.
	AdamWStep(param, grad, expAvg, expAvgSq View, p AdamWParams) error
}

// HostLoopKernels is implemented by the Kernels of devices whose memory
// Go code on the host addresses directly (the CPU device), and of devices
// that price work without doing it (meta). With it, an update written once
// as a Go loop over host memory (an optimizer's, package optim) runs in
// place on the device's memory, in stream order, with no kernel of its own.
type HostLoopKernels interface {
	// HostLoop calls body over the elements [0, n) of a loop, cut into
	// pieces [lo, hi) whose lo is a multiple of grain (≥ 1), possibly on
	// several goroutines at once (body must be safe on disjoint pieces),
	// and returns when every piece has run. mem[i] is the memory of
	// views[i]: its block's bytes from the view's offset (counted in its
	// DType's elements) to the block's end; views are contiguous. On a
	// device that holds no data body is never called: the device charges
	// the loop as moving bytes bytes (read plus written) instead.
	HostLoop(n, grain int, views []View, bytes int64, body func(mem [][]byte, lo, hi int)) error
}

// AdamWTensors are one parameter's tensors for a multi-tensor AdamW step:
// the parameter, its gradient and its two moments, contiguous, of one
// length.
type AdamWTensors struct {
	Param, Grad, ExpAvg, ExpAvgSq View
}

// MultiTensorOptimKernels is implemented by the Kernels of devices that
// update many parameters in one launch (the CUDA device), where a step
// of a model of many small tensors would otherwise be one launch per
// tensor. The optimizers use it when present and otherwise step each
// parameter alone.
type MultiTensorOptimKernels interface {
	// AdamWSteps does what AdamWStep does for each entry of ts, with the
	// same hyper-parameters (step included) for all, and the same float32
	// operations per element, so the same bits. The tensors of distinct
	// entries do not overlap.
	AdamWSteps(ts []AdamWTensors, p AdamWParams) error
}

// Note [bfloat16]. A bfloat16 tensor reaches a device's kernels in two
// places only: as a matrix product's operand or result (GemmParams'
// types, float32 accumulation) and in ConvertKernels, which copies and
// converts between float32 and bfloat16. Every other kernel takes float32:
// the tensor layer widens a bfloat16 input into a float32 temporary,
// runs the float32 kernel, and rounds a bfloat16 result back, so that a
// bfloat16 op computes in float32 exactly as PyTorch's bfloat16 CPU and
// CUDA kernels do (load, widen, compute in float32, round the store), and
// what autograd saves stays bfloat16. A device may later take bfloat16
// in more kernels natively, with the same bits.

// ConvertKernels is implemented by the Kernels of devices that hold
// bfloat16 tensors. A device without it holds float32 only: the tensor
// layer refuses bfloat16 there with an *UnsupportedError.
type ConvertKernels interface {
	// Convert writes src into dst, of one shape and any strides (dst's
	// elements must not overlap one another), from src.DType to
	// dst.DType: Float32 to BFloat16 rounds to nearest, ties to even, a
	// NaN stays a NaN (ToBFloat16's bits); BFloat16 to Float32 is exact;
	// equal types copy (Int32 to Int32 too). Other pairs return an
	// *UnsupportedError.
	Convert(dst, src View) error
}

// ElementwiseBF16Kernels is implemented by the Kernels of devices whose
// elementwise kernels also take bfloat16 views, so that the tensor layer
// computes a bfloat16 op in one pass instead of widening its inputs into
// float32 temporaries first (Note [bfloat16]).
type ElementwiseBF16Kernels interface {
	// ElementwiseBF16 reports whether Unary, Binary, Sum and, on a device
	// with DropoutKernels, Dropout take views of float32 and bfloat16 in
	// any mix (each View's DType says which): every bfloat16 input element
	// is widened exactly, the float32 arithmetic is that of float32 views,
	// and a bfloat16 dst receives the float32 result rounded to nearest
	// even (ToBFloat16's bits) — the bits of Convert, the float32 kernel
	// and Convert. Layouts are as for float32 views (dst contiguous; dst
	// may be an input only when both have one type). Dropout's src and dst
	// have one type.
	ElementwiseBF16() bool
}

// TakesElementwiseBF16 reports whether k's elementwise kernels take
// bfloat16 views (ElementwiseBF16Kernels).
func TakesElementwiseBF16(k Kernels) bool {
	e, ok := k.(ElementwiseBF16Kernels)
	return ok && e.ElementwiseBF16()
}

// UnsupportedError says a device has no kernel for an op on an element
// type: ferry never reinterprets one type's bits as another's.
type UnsupportedError struct {
	Op     string // the kernel or op ("gemm", "convert", "layer_norm")
	DType  string // the element type or combination ("bfloat16", "float32→int32")
	Device string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: %s is not supported on %s", e.Op, e.DType, e.Device)
}

// CheckConvertTypes returns an *UnsupportedError for a pair of element
// types Convert does not take, naming device dev.
func CheckConvertTypes(dev string, dst, src DType) error {
	ok := dst == src && dst != Float16 && dst != Uint8 ||
		dst == BFloat16 && src == Float32 || dst == Float32 && src == BFloat16
	if ok {
		return nil
	}
	return &UnsupportedError{Op: "convert", DType: fmt.Sprintf("%s→%s", src, dst), Device: dev}
}

// DataLess is implemented by devices whose memory holds no data (the meta
// device): the tensor layer skips preparing host-side values for them.
type DataLess interface{ DataLess() }

// HasData reports whether d's memory holds values.
func HasData(d Device) bool {
	_, ok := d.(DataLess)
	return !ok
}
