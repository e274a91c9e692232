package ferry

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"unsafe"

	"ferry/device"
)

// Tensor is a handle to an n-dimensional array on a device: a shape and
// strides over a storage that several handles (views) may share.
//
// # Ownership
//
// Every function that returns a *Tensor returns a new handle that the
// caller owns. A handle holds its storage's memory until it is released:
// explicitly with Release, by a container that consumed it (nn.Sequential
// releases what its layers return once the next layer has used it), or by
// the tape it belongs to when the tape is closed (see Step). Memory is
// freed when the last handle and the last reference autograd saved for
// backward are gone, at that moment; Go's garbage collector plays no part.
// Using a released handle panics with an *Error that says where it was
// released.
//
// A handle belongs to a tape when it was made by an op on a tensor of that
// tape (or by Tape.Input). Handles on no tape (parameters, optimizer state,
// tensors made by the constructors below) live until released.
//
// A Tensor is not safe for concurrent use.
//
// # Misuse
//
// Using a tensor in a way that cannot work panics with an *Error, which
// Step and Catch return as an error: a released handle, a tensor whose
// device was closed (its memory went with the device), tensors of two
// devices in one op, a tensor of a tape used from a goroutine other than
// the tape's. Releasing a tensor of a closed device is allowed and does
// nothing more.
type Tensor struct {
	shape        []int
	strides      []int // in elements
	offset       int   // elements from the start of the storage
	st           *storage
	tape         *Tape   // owns the handle (releases it at Close); nil: the caller does
	node         *node   // the recorded op that produced this tensor
	grad         *Tensor // leaves: the accumulated gradient (PyTorch's .grad)
	name         string
	releasedAt   stackTrace
	widenedFrom  *Tensor      // the bfloat16 tensor this float32 one widens, while an op runs (ops_precision.go)
	dtype        device.DType // the small fields together: no padding between them
	requiresGrad bool
	released     bool
}

// storage is memory shared by the handles of one tensor and its views.
// refs counts live handles plus references autograd saved for backward;
// the block goes back to the allocator when it reaches zero. version
// counts in-place changes, so that backward can tell a saved tensor was
// modified.
//
// tapeHandles counts the live handles among refs that a tape owns (and so
// releases at the latest when the step ends); the rest are held outside
// any tape (see OutsideHandles).
type storage struct {
	dev         device.Device
	alloc       *device.Allocator // dev's, kept to check closing cheaply
	block       *device.Block     // nil for a tensor without elements
	refs        int32
	tapeHandles int32
	version     uint32
	lastInPlace string // the in-place op that last bumped version
	// pager, when set, owns the data while pagedOut (paging.go); bytes is
	// the storage's size then, when block is nil.
	pager    Pager
	pagedOut bool
	bytes    int64
	// noSites: Release records no call stack for its handles (a device
	// whose ReleaseSites says false: the meta device, whose steps the
	// planner replays by the thousand, a quarter of their time went to
	// runtime.Callers).
	noSites bool
}

func newStorage(dev device.Device, block *device.Block) *storage {
	return &storage{dev: dev, alloc: dev.Allocator(), block: block, refs: 1, noSites: noReleaseSites(dev)}
}

// noReleaseSites says whether dev's tensors skip recording where they
// were released (a device whose ReleaseSites says false).
func noReleaseSites(dev device.Device) bool {
	r, ok := dev.(interface{ ReleaseSites() bool })
	return ok && !r.ReleaseSites()
}

func (s *storage) retain() { s.refs++ }

func (s *storage) drop() {
	s.refs--
	if s.refs == 0 && s.block != nil {
		s.alloc.Free(s.block) // after the device's Close, a no-op: the memory went with it
		s.block = nil
	} else if s.refs < 0 {
		panicf("release", "internal error: a storage was released more times than retained")
	}
}

// bumpVersion records an in-place change by op.
func (s *storage) bumpVersion(op string) {
	s.version++
	s.lastInPlace = op
}

// allocate makes a contiguous tensor of shape on dev, uninitialised. It
// panics with an *Error when the shape's size overflows (wrapping
// device.ErrTooLarge), when the device is full (wrapping
// *device.OutOfMemoryError) or closed (wrapping device.ErrClosed).
func allocate(dev device.Device, dtype device.DType, cat device.Category, shape []int) *Tensor {
	if dev == nil {
		panicf("allocate", "no device (nil)")
	}
	_, bytes, err := device.ShapeBytes(shape, dtype.Size())
	if err != nil {
		panic(&Error{Op: "allocate", Msg: fmt.Sprintf("%s tensor on %s", dtype, dev.Name()), Err: err})
	}
	alloc := dev.Allocator()
	// One Go allocation holds the handle, the storage and, for up to
	// inlineRank dimensions, the shape and strides.
	a := &allocation{st: storage{dev: dev, alloc: alloc, refs: 1, noSites: noReleaseSites(dev)}}
	t := &a.t
	t.dtype, t.st = dtype, &a.st
	if len(shape) <= inlineRank {
		t.shape = append(a.dims[:0:len(shape)], shape...)
		t.strides = a.dims[inlineRank : inlineRank+len(shape) : inlineRank+len(shape)]
	} else {
		t.shape = cloneShape(shape)
		t.strides = make([]int, len(shape))
	}
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		t.strides[i] = n
		n *= shape[i]
	}
	if bytes > 0 {
		b, err := alloc.Alloc(bytes, cat)
		if err != nil {
			panic(&Error{Op: "allocate", Msg: fmt.Sprintf("%v %s tensor on %s", t.shape, dtype, dev.Name()), Err: err})
		}
		a.st.block = b
	}
	return t
}

// inlineRank is the most dimensions allocate keeps inside its allocation.
const inlineRank = 4

// allocation is what allocate makes in one piece.
type allocation struct {
	t    Tensor
	st   storage
	dims [2 * inlineRank]int
}

func cloneShape(s []int) []int { return append([]int(nil), s...) }

// Empty returns an uninitialised float32 tensor (with PoisonFreed on, its
// elements are NaN).
//
// The constructors count their memory as activations; their -As forms
// (ZerosAs, UniformAs, RandnAs) take the category, so that the
// allocator's statistics, and an out-of-memory error's advice, say what the
// memory is from the first byte: nn makes weights with
// UniformAs(..., device.Parameter, ...).
func Empty(dev device.Device, shape ...int) *Tensor {
	return allocate(dev, device.Float32, device.Activation, shape)
}

// Full returns a float32 tensor with every element v.
func Full(dev device.Device, v float32, shape ...int) *Tensor {
	return fullAs(dev, device.Activation, v, shape)
}

func fullAs(dev device.Device, cat device.Category, v float32, shape []int) *Tensor {
	t := allocate(dev, device.Float32, cat, shape)
	if t.st.block != nil {
		if err := dev.Kernels().Fill(t.view(), v); err != nil {
			t.Release()
			check("full", err)
		}
	}
	return t
}

// Zeros returns a float32 tensor of zeros.
func Zeros(dev device.Device, shape ...int) *Tensor { return Full(dev, 0, shape...) }

// ZerosAs is Zeros, counting the memory as cat (optimizers make their
// state with device.OptimizerState).
func ZerosAs(dev device.Device, cat device.Category, shape ...int) *Tensor {
	return fullAs(dev, cat, 0, shape)
}

// Ones returns a float32 tensor of ones.
func Ones(dev device.Device, shape ...int) *Tensor { return Full(dev, 1, shape...) }

// FromFloat32s copies data into a new tensor of the given shape (a
// vector of len(data) when shape is empty).
func FromFloat32s(dev device.Device, data []float32, shape ...int) *Tensor {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	if n := checkedNumel("from_float32s", shape, 4); n != len(data) {
		panicf("from_float32s", "%d values for shape %v (%d elements)", len(data), shape, n)
	}
	t := Empty(dev, shape...)
	t.upload(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), len(data)*4))
	return t
}

// FromInt32s copies data into a new int32 tensor (class indices).
func FromInt32s(dev device.Device, data []int32, shape ...int) *Tensor {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	if n := checkedNumel("from_int32s", shape, 4); n != len(data) {
		panicf("from_int32s", "%d values for shape %v (%d elements)", len(data), shape, n)
	}
	t := allocate(dev, device.Int32, device.Activation, shape)
	t.upload(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), len(data)*4))
	return t
}

// checkedNumel is the number of elements of shape, or a panic with an
// *Error when its size overflows (see device.ShapeBytes).
func checkedNumel(op string, shape []int, elemSize int) int {
	n, _, err := device.ShapeBytes(shape, elemSize)
	if err != nil {
		panic(&Error{Op: op, Msg: "bad shape", Err: err})
	}
	return n
}

func (t *Tensor) upload(b []byte) {
	if t.st.block != nil && len(b) > 0 {
		check("upload", t.st.dev.Kernels().Upload(t.view(), b))
	}
}

// Uniform returns a tensor of values drawn uniformly from [lo, hi) with
// rng. Values are drawn on the host, so a seed gives the same tensor on
// every device; on a device that holds no data nothing is drawn.
//
// The device's memory is asked for first, so a size that cannot fit fails
// with an *Error (wrapping device.ErrTooLarge or an out-of-memory error)
// before anything is drawn; values then go up in pieces of at most
// stagingElems, so host memory stays small whatever the tensor's size.
func Uniform(dev device.Device, rng *rand.Rand, lo, hi float32, shape ...int) *Tensor {
	return UniformAs(dev, device.Activation, rng, lo, hi, shape...)
}

// UniformAs is Uniform, counting the memory as cat.
func UniformAs(dev device.Device, cat device.Category, rng *rand.Rand, lo, hi float32, shape ...int) *Tensor {
	t := allocate(dev, device.Float32, cat, shape)
	t.fillFromHost("uniform", func(v []float32) {
		for i := range v {
			v[i] = lo + (hi-lo)*rng.Float32()
		}
	})
	return t
}

// Randn returns a tensor of standard normal values drawn with rng (on the
// host, as Uniform).
func Randn(dev device.Device, rng *rand.Rand, shape ...int) *Tensor {
	return RandnAs(dev, device.Activation, rng, shape...)
}

// RandnAs is Randn, counting the memory as cat.
func RandnAs(dev device.Device, cat device.Category, rng *rand.Rand, shape ...int) *Tensor {
	t := allocate(dev, device.Float32, cat, shape)
	t.fillFromHost("randn", func(v []float32) {
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
	})
	return t
}

// stagingElems bounds the host buffer of fillFromHost: 4 MiB of float32.
const stagingElems = 1 << 20

// fillFromHost fills t (new, contiguous float32) in order, stagingElems at
// a time: draw fills its slice with the next values, and each piece is
// uploaded before the next is drawn. On a device without data it does
// nothing. If an upload fails, t is released and the error panics.
func (t *Tensor) fillFromHost(op string, draw func([]float32)) {
	if t.st.block == nil || !device.HasData(t.st.dev) {
		return
	}
	n := t.Numel()
	buf := make([]float32, min(n, stagingElems))
	for start := 0; start < n; start += len(buf) {
		piece := buf[:min(len(buf), n-start)]
		draw(piece)
		v := device.View{Block: t.st.block, Off: t.offset + start, Shape: []int{len(piece)}, Strides: []int{1}}
		if err := t.st.dev.Kernels().Upload(v, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(piece))), len(piece)*4)); err != nil {
			t.Release()
			check(op, err)
		}
	}
}

// live panics unless t can be used: not nil, not released, and its device
// not closed.
func (t *Tensor) live(op string) {
	if t == nil {
		panicf(op, "nil tensor")
	}
	if t.released {
		if t.releasedAt[0] == 0 {
			panicf(op, "%s was released and cannot be used (%s does not record where)", t.describe(), t.st.dev.Name())
		}
		panicf(op, "%s was released at %s and cannot be used", t.describe(), t.releasedAt)
	}
	if t.st.alloc.Closed() {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%s is on %s, and its memory went with the device; "+
			"use a device's tensors only before closing it", t.describe(), device.Identify(t.st.dev)), Err: device.ErrClosed})
	}
}

func (t *Tensor) describe() string {
	if t.name != "" {
		return fmt.Sprintf("tensor %q %v", t.name, t.shape)
	}
	return fmt.Sprintf("tensor %v", t.shape)
}

// Release gives up this handle: its storage's memory is freed once no
// other handle and no saved reference uses it. Releasing twice is allowed
// and does nothing, and so is releasing a tensor whose device was closed
// (its memory went with the device); using a released handle panics.
// Releasing a handle of a tape from a goroutine other than the tape's
// panics with an *Error, as any use of the tape does.
func (t *Tensor) Release() {
	if t == nil || t.released {
		return
	}
	if t.tape != nil {
		t.tape.checkOwner("release")
		t.st.tapeHandles--
	}
	t.released = true
	if !t.st.noSites {
		t.releasedAt = captureStack(1)
	}
	t.st.drop()
	if t.grad != nil {
		t.grad.Release()
		t.grad = nil
	}
}

// handle returns a new handle on t's storage with the same layout, owned by
// tape (nil: by the caller). It carries no autograd history.
func (t *Tensor) handle(tape *Tape) *Tensor {
	t.st.retain()
	h := &Tensor{shape: t.shape, strides: t.strides, offset: t.offset, dtype: t.dtype, st: t.st}
	if tape != nil {
		tape.own(h)
	}
	return h
}

// Detach returns a new handle on t's data, with no autograd history and on
// no tape: it outlives the step that made t, until released. (PyTorch:
// tensor.detach().)
func (t *Tensor) Detach() *Tensor {
	t.live("detach")
	return t.handle(nil)
}

// Shape returns a copy of t's dimensions.
func (t *Tensor) Shape() []int { return cloneShape(t.shape) }

// Dim returns the size of dimension i (negative counts from the end).
func (t *Tensor) Dim(i int) int { return t.shape[t.axis("dim", i)] }

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// Numel is the number of elements. (A tensor's shape was checked for
// overflow when it was made: see device.ShapeBytes.)
func (t *Tensor) Numel() int { return device.Numel(t.shape) }

// Bytes is the size of t's elements in bytes (not of its storage).
func (t *Tensor) Bytes() int64 { return int64(t.Numel() * t.dtype.Size()) }

// DType is the element type.
func (t *Tensor) DType() device.DType { return t.dtype }

// Device is where t's memory is.
func (t *Tensor) Device() device.Device { return t.st.dev }

// Tape is the tape that owns t, or nil.
func (t *Tensor) Tape() *Tape { return t.tape }

// RequiresGrad reports whether gradients flow to or through t.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// IsLeaf reports whether t was not produced by a recorded op.
func (t *Tensor) IsLeaf() bool { return t.node == nil }

// Name is a parameter's name ("layers.3.weight"), or "".
func (t *Tensor) Name() string { return t.name }

// SetName names t (nn's containers write a parameter's path in the model
// they build; nn.NamedParameters gives the path in any model).
func (t *Tensor) SetName(n string) *Tensor { t.name = n; return t }

// Grad is a leaf's accumulated gradient, or nil before backward. The leaf
// owns it: do not release it (ZeroGrad does).
func (t *Tensor) Grad() *Tensor { return t.grad }

// SetGrad replaces a leaf's gradient (nil clears it, releasing the old one).
func (t *Tensor) SetGrad(g *Tensor) {
	if t.grad != nil {
		t.grad.Release()
	}
	t.grad = g
}

// Version counts in-place changes to t's storage.
func (t *Tensor) Version() uint32 { return t.st.version }

// Storage identifies t's storage: views of one tensor share it. Offloaders
// use it to move shared storage once.
func (t *Tensor) Storage() any { return t.st }

// StorageBytes is the size of t's whole storage (what a view keeps alive).
func (t *Tensor) StorageBytes() int64 {
	if t.st.block == nil {
		return 0
	}
	return t.st.block.Requested()
}

// Block returns the device block under t (nil for an empty tensor), and t's
// offset into it in elements. For device code and offloaders.
func (t *Tensor) Block() (*device.Block, int) { return t.st.block, t.offset }

// Strides returns a copy of t's strides, in elements.
func (t *Tensor) Strides() []int { return cloneShape(t.strides) }

// IsContiguous reports whether t is laid out row-major without gaps.
func (t *Tensor) IsContiguous() bool { return t.view().IsContiguous() }

// RequireGrad marks a leaf as needing a gradient and returns it.
// PyTorch: tensor.requires_grad_().
func (t *Tensor) RequireGrad() *Tensor {
	t.live("require_grad")
	if t.node != nil {
		panicf("require_grad", "%s is the output of %s, not a leaf; gradients already flow through it", t.describe(), t.node.op)
	}
	t.requiresGrad = true
	return t
}

// SetCategory re-tags the memory under t, for the allocator's statistics
// (nn marks parameters, optimizers their state).
func (t *Tensor) SetCategory(c device.Category) *Tensor {
	t.live("set_category")
	if t.st.block != nil {
		t.st.dev.Allocator().SetCategory(t.st.block, c)
	}
	return t
}

// Category is what t's memory is counted as.
func (t *Tensor) Category() device.Category {
	if t.st.block == nil {
		return device.Activation
	}
	return t.st.block.Category()
}

func (t *Tensor) view() device.View {
	return device.View{Block: t.st.block, Off: t.offset, Shape: t.shape, Strides: t.strides, DType: t.dtype}
}

// View returns how kernels see t. For device code and offloaders.
func (t *Tensor) View() device.View { t.use("view"); return t.view() }

// Float32s copies t's elements to a new slice, in row-major order. It
// panics with an *Error on a device that holds no values (meta).
func (t *Tensor) Float32s() []float32 {
	t.live("float32s")
	if t.st.pagedOut {
		// Read a paged-out tensor where its pager keeps it, if it can say
		// (a checkpoint of a model larger than the device).
		if hr, ok := t.st.pager.(HostReader); ok {
			if m := hr.HostData(t); m != nil && m.Bytes() == t.st.bytes {
				v := m.AsStrided(t.shape, t.strides, t.offset)
				defer v.Release()
				return v.Float32s()
			}
		}
	}
	t.use("float32s")
	if t.dtype != device.Float32 {
		panicf("float32s", "%s is %s", t.describe(), t.dtype)
	}
	c := t.contiguousData("float32s")
	out := make([]float32, c.Numel())
	c.download(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(out)*4))
	if c != t {
		c.Release()
	}
	return out
}

// Int32s copies an int32 tensor's elements to a new slice.
func (t *Tensor) Int32s() []int32 {
	t.use("int32s")
	if t.dtype != device.Int32 {
		panicf("int32s", "%s is %s", t.describe(), t.dtype)
	}
	c := t.contiguousData("int32s")
	out := make([]int32, c.Numel())
	c.download(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(out)*4))
	if c != t {
		c.Release()
	}
	return out
}

// contiguousData returns t itself when contiguous, else a contiguous copy
// the caller releases.
func (t *Tensor) contiguousData(op string) *Tensor {
	if !device.HasData(t.st.dev) {
		panicf(op, "%s is on %s, which holds no values", t.describe(), t.st.dev.Name())
	}
	if t.IsContiguous() || t.st.block == nil { // (an empty view has nothing to copy)
		return t
	}
	c := allocate(t.st.dev, t.dtype, device.Temporary, t.shape)
	copyInto(op, t.st.dev, c.view(), t.view())
	return c
}

func (t *Tensor) download(b []byte) {
	if t.st.block != nil && len(b) > 0 {
		check("download", t.st.dev.Kernels().Download(b, t.view()))
	}
}

// Item returns the value of a one-element tensor.
func (t *Tensor) Item() float32 {
	if t.Numel() != 1 {
		panicf("item", "%s has %d elements, not 1", t.describe(), t.Numel())
	}
	return t.Float32s()[0]
}

// String describes t without its values: "tensor [256 1024] float32 on cpu".
func (t *Tensor) String() string {
	if t == nil {
		return "tensor <nil>"
	}
	var b strings.Builder
	b.WriteString(t.describe())
	fmt.Fprintf(&b, " %s on %s", t.dtype, t.st.dev.Name())
	if t.requiresGrad {
		b.WriteString(", requires grad")
	}
	if t.released {
		b.WriteString(", released")
	}
	return b.String()
}

// AllClose reports whether a and b have the same shape and every pair of
// elements satisfies |a-b| <= atol + rtol·|b| (NaNs never match).
func AllClose(a, b *Tensor, rtol, atol float64) bool {
	if !slices.Equal(a.shape, b.shape) {
		return false
	}
	x, y := a.Float32s(), b.Float32s()
	for i := range x {
		d := math.Abs(float64(x[i]) - float64(y[i]))
		if !(d <= atol+rtol*math.Abs(float64(y[i]))) {
			return false
		}
	}
	return true
}

// axis resolves a possibly negative axis against t's rank.
func (t *Tensor) axis(op string, i int) int {
	r := len(t.shape)
	if i < 0 {
		i += r
	}
	if i < 0 || i >= r {
		panicf(op, "axis %d out of range for %s", i, t.describe())
	}
	return i
}

// BumpVersion records that op changed t's storage in place outside ferry's
// own in-place ops (an optimizer's fused kernel): a tensor saved for
// backward from that storage then fails backward's version check.
func BumpVersion(t *Tensor, op string) {
	t.live(op)
	t.st.bumpVersion(op)
}

// Wrap makes a tensor of the given geometry over block, which it takes
// over: the block is freed when the last handle on it is released. For
// device code and offloaders that allocate blocks themselves.
func Wrap(dev device.Device, block *device.Block, dtype device.DType, shape, strides []int, offset int) *Tensor {
	st := newStorage(dev, block)
	return &Tensor{shape: cloneShape(shape), strides: cloneShape(strides), offset: offset, dtype: dtype, st: st}
}

// AsStrided returns a new handle on t's storage with the given geometry,
// unrecorded and on no tape (PyTorch: as_strided). For offloaders that
// bring a saved view back; the geometry must stay inside the storage.
func (t *Tensor) AsStrided(shape, strides []int, offset int) *Tensor {
	t.live("as_strided")
	if len(shape) != len(strides) {
		panicf("as_strided", "shape %v and strides %v differ in rank", shape, strides)
	}
	// The last element's offset, in uint64 so that no geometry wraps around
	// into the storage.
	last, inside := uint64(offset), offset >= 0
	for i, d := range shape {
		if d < 0 || strides[i] < 0 {
			inside = false
			break
		}
		if d == 0 {
			last = uint64(offset)
			break
		}
		hi, reach := bits.Mul64(uint64(d-1), uint64(strides[i]))
		last += reach
		inside = inside && hi == 0 && reach <= uint64(device.MaxBytes) && last <= uint64(device.MaxBytes)
	}
	if !inside || t.st.block != nil && int64(last+1)*int64(t.dtype.Size()) > t.st.block.Requested() {
		panicf("as_strided", "geometry %v/%v+%d reaches outside the storage", shape, strides, offset)
	}
	h := t.handle(nil)
	h.shape, h.strides, h.offset = cloneShape(shape), cloneShape(strides), offset
	return h
}

// StorageHandles counts the handles and saved references that keep t's
// storage alive, t included.
func (t *Tensor) StorageHandles() int {
	t.live("storage_handles")
	return int(t.st.refs)
}

// OutsideHandles counts the references that keep t's storage alive other
// than t itself and the handles tapes own: the caller's own handles (the
// step's input batch, brought in with Tape.Input), detached handles,
// references autograd saved without hooks. They hold the memory until
// their owners let go, typically past the step's backward, whereas a
// tape's handles are released when the code of the step is done with them
// (nn.Sequential releases each layer's output once the next has used it).
// An offloader skips a storage with outside handles: copying it off the
// device would free nothing.
func (t *Tensor) OutsideHandles() int {
	t.live("outside_handles")
	n := t.st.refs - t.st.tapeHandles
	if t.tape == nil {
		n-- // t itself
	}
	return int(n)
}

// WeakRef refers to a tensor's storage without keeping it alive: an
// offloader that has copied a tensor away keeps one, so that if someone
// else still holds the storage when backward needs it, it uses the device
// data instead of copying it back.
type WeakRef struct {
	st      *storage
	shape   []int
	strides []int
	offset  int
	dtype   device.DType
}

// Weak returns a weak reference to t.
func (t *Tensor) Weak() WeakRef {
	t.live("weak")
	return WeakRef{st: t.st, shape: t.shape, strides: t.strides, offset: t.offset, dtype: t.dtype}
}

// Get returns a new handle (unrecorded, on no tape) if the storage is still
// alive, else nil.
func (w WeakRef) Get() *Tensor {
	if w.st == nil || w.st.refs == 0 || w.st.block == nil {
		return nil
	}
	w.st.retain()
	return &Tensor{shape: w.shape, strides: w.strides, offset: w.offset, dtype: w.dtype, st: w.st}
}
