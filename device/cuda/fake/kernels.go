package fake

import (
	"fmt"
	"math"
	"unsafe"

	"ferry/device"
	"ferry/device/cpu"
)

// Note [one source per kernel]. A kernel's arithmetic is written once for
// the GPU, in device/cuda/kernels/*.cu, and once for the host, in the CPU
// device; the fake driver has none of its own. A launch runs the CPU
// device's kernels (cpu.Kernels) over the fake's device memory: each
// kernel below reads its parameters by position and its structs by field
// offset as the C declarations lay them out, turns its pointers into
// views of the memory behind them (device.ForeignBlock), each checked to
// lie inside its allocation, and calls the CPU kernel that computes what
// it computes. What stays here is the launch's contract: the block shape
// a kernel is written for, 32-bit index arithmetic that would overflow,
// the bad-index word of the embedding kernels, and which launches of a
// multi-launch op carry which operands.
//
// Why not run the .cu sources themselves, as the C stand-in does
// (device/cuda/standin, RunKernelsFromSource)? They need g++ and cgo-free
// loading of a compiled library, and the fake must work with
// CGO_ENABLED=0 and no compiler at all (it is what `fakecuda` and most of
// the CUDA device's tests run on); a fake that ran the sources where g++
// exists and something else elsewhere would be two drivers. The stand-in
// runs the sources; the conformance suite compares both with the CPU
// device.
//
// Where the GPU splits one op over launches with intermediate buffers
// only its own launches read, the fake runs the whole op at the launch
// that has the operands, and the others do what is left:
//   - the finishing launches of split sums (ferry_sum_finish,
//     ferry_layer_norm_params_finish) do nothing: the first launch wrote
//     the result, and the partial buffer is left unwritten;
//   - ferry_nll_grad_scale stores the output gradient itself in its word
//     of scratch, and ferry_nll_backward and ferry_cross_entropy_backward
//     give it to the CPU kernels, which divide by the count;
//   - ferry_embedding_links does nothing: the CPU's ScatterAdd sums
//     repeated indices in order, which is what the links are for;
//   - ferry_attention_delta computes each row's Σ dO·O with the CPU's
//     Binary and Sum, and each of the backward launches runs the CPU's
//     whole backward from it (cpu.AttentionBackwardFromDelta), keeping
//     the gradients it is launched for.
//
// Results are the CPU device's, not bit for bit a GPU's: the order of a
// sum is the CPU's.

// host are the kernels every launch runs.
var host = cpu.Kernels()

// kernelsByName maps each kernel of device/cuda/kernels to its launch.
var kernelsByName = map[string]kernelFunc{}

func register(m map[string]kernelFunc) {
	for name, f := range m {
		kernelsByName[name] = f
	}
}

// block is the block size of the one-dimensional launches (BLOCK in
// reduce.cu).
const block = 256

// hostBytes is device memory as the CPU device's kernels see it.
type hostBytes []byte

func (b hostBytes) Bytes() []byte { return b }

// viewAt is device memory from address p on as a view of dt with shape
// and strides (in elements), checked to lie inside p's allocation; what
// names the pointer in a fault. A null p gives a View without a Block (an
// absent operand).
func (k *launch) viewAt(what string, p uint64, dt device.DType, shape, strides []int) device.View {
	if p == 0 {
		return device.View{}
	}
	b, ok := k.mem(p)
	if !ok {
		k.fail("%s: %#x is not device memory", what, p)
	}
	size := uint64(dt.Size())
	if p%size != 0 {
		k.fail("%s: %#x is not aligned to %d bytes", what, p, size)
	}
	last, empty := 0, false
	for d, n := range shape {
		if strides[d] < 0 {
			k.fail("%s: negative stride %d", what, strides[d])
		}
		empty = empty || n == 0
		last += (n - 1) * strides[d]
	}
	if !empty && uint64(last+1)*size > uint64(len(b)) {
		k.fail("%s: %s elements of shape %v and strides %v reach past the %d bytes of its allocation after %#x",
			what, dt, shape, strides, len(b), p)
	}
	return device.View{Block: device.ForeignBlock(hostBytes(b), 0, int64(len(b))), Shape: shape, Strides: strides, DType: dt}
}

// view is pointer parameter i as viewAt gives it.
func (k *launch) view(i int, dt device.DType, shape, strides []int) device.View {
	return k.viewAt(fmt.Sprintf("parameter %d", i), k.u64(i), dt, shape, strides)
}

// contig is pointer parameter i as a contiguous view of shape.
func (k *launch) contig(i int, dt device.DType, shape ...int) device.View {
	return k.view(i, dt, shape, device.Contiguous(shape))
}

// floatsAt is the n float32 elements at p (nil for a null p), checked
// as viewAt checks them.
func (k *launch) floatsAt(what string, p uint64, n int) []float32 {
	v := k.viewAt(what, p, device.Float32, []int{n}, []int{1})
	if v.Block == nil || n == 0 {
		return nil
	}
	b := v.Block.Segment().(hostBytes)
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

// floats is pointer parameter i's first n float32 elements.
func (k *launch) floats(i int, n int) []float32 {
	return k.floatsAt(fmt.Sprintf("parameter %d", i), k.u64(i), n)
}

// scratch is a contiguous float32 view of host memory, for what a CPU
// kernel writes that the launch does not keep.
func scratch(shape ...int) device.View {
	b := make([]byte, 4*max(device.Numel(shape), 1))
	return device.View{Block: device.ForeignBlock(hostBytes(b), 0, int64(len(b))), Shape: shape, Strides: device.Contiguous(shape)}
}

// must fails the launch with err, a CPU kernel's refusal.
func (k *launch) must(err error) {
	if err != nil {
		k.fail("%v", err)
	}
}

// ints is n values as ints.
func ints(v ...int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// oneD checks a grid-stride kernel's launch: a 1-D block and, for the
// 32-bit index variants (i32), index arithmetic over n elements and
// offsets up to maxOff that fits an int.
func (k *launch) oneD(n int64, i32 bool, maxOff int64) {
	if k.block.Y != 1 || k.block.Z != 1 {
		k.fail("a 1-D kernel launched with block %v", k.block)
	}
	if i32 && (n+int64(k.grid.X)*int64(k.block.X) > math.MaxInt32 || maxOff > math.MaxInt32) {
		k.fail("32-bit index loop over %d elements (offsets to %d) would overflow", n, maxOff)
	}
}

// requireBlock checks the block shape a kernel is written for.
func (k *launch) requireBlock(x, y uint32) {
	if k.block.X != x || k.block.Y != y || k.block.Z != 1 {
		k.fail("written for %dx%d threads per block, launched with %v", x, y, k.block)
	}
}

// oneBlock checks a kernel written for a single block of 256 threads.
func (k *launch) oneBlock() {
	k.requireBlock(block, 1)
	if k.grid.X != 1 || k.grid.Y != 1 || k.grid.Z != 1 {
		k.fail("written for one block, launched on grid %v", k.grid)
	}
}

// strided is struct Strided (common.cuh): rank, shape[8], stride[3][8].
type strided struct {
	shape   []int
	strides [3][]int
}

func (k *launch) strided(i int) strided {
	rank := int(k.field(i, 0))
	if rank < 0 || rank > 8 {
		k.fail("layout of rank %d", rank)
	}
	var l strided
	for d := 0; d < rank; d++ {
		l.shape = append(l.shape, int(k.field(i, 1+d)))
		for op := 0; op < 3; op++ {
			l.strides[op] = append(l.strides[op], int(k.field(i, 9+8*op+d)))
		}
	}
	return l
}

// maxOff is the largest offset of operand op.
func (l strided) maxOff(op int) int64 {
	var m int64
	for d, n := range l.shape {
		m += int64(max(n-1, 0)) * int64(l.strides[op][d])
	}
	return m
}

// operand is pointer parameter i as operand op of the layout.
func (k *launch) operand(i int, dt device.DType, l strided, op int) device.View {
	return k.view(i, dt, l.shape, l.strides[op])
}

// typeOf is the element type bit b of a mixed kernel's types parameter
// says (TYPE_BF16 in common.cuh).
func typeOf(types int32, b int) device.DType {
	if types>>b&1 != 0 {
		return device.BFloat16
	}
	return device.Float32
}
