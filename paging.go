package ferry

import (
	"fmt"

	"ferry/device"
)

// Paging: a tensor whose data lives elsewhere (a parameter streamed from
// host memory) between its uses.
//
// A Pager owns the data of the storages given to it with SetPager: while
// such a storage is paged out it holds no device block, and the first use
// of any handle on it (an op's input, a saved tensor backward needs, View,
// Float32s) asks the pager to bring it back with PageIn, which hands the
// storage a block holding its data (InstallBlock). PageOut frees the block
// again; the pager decides when (package offload's Streamer: after the op
// that used a parameter in forward, when its gradient is complete in
// backward).
//
// Invariants: a paged storage's values are the pager's while it is paged
// out, and the device block's while it is resident; Version counts
// in-place changes either way (a pager whose copy is updated, as a host
// optimizer does, bumps it with BumpVersion, which does not page in). A
// pager that must keep its copy in step with in-place changes made on the
// device compares Version at PageIn and at PageOut.

// Pager brings a paged-out storage's data back to its device.
type Pager interface {
	// PageIn is called, on the goroutine using t, when t's storage is
	// paged out and its data is about to be used: it must install a block
	// of t's device holding the data (InstallBlock) or return an error.
	PageIn(t *Tensor) error
}

// HostReader is a Pager that keeps a paged-out storage's data in host
// memory, where Float32s reads it without bringing it back.
type HostReader interface {
	// HostData returns the tensor holding t's storage's data (same size,
	// on the host), or nil.
	HostData(t *Tensor) *Tensor
}

// SetPager hands t's storage (every handle and view on it) to p: from now
// on PageOut may free its device block, and p brings the data back on
// use. Pass nil to take the storage back (it must be resident).
func (t *Tensor) SetPager(p Pager) {
	t.live("set_pager")
	if p == nil && t.st.pagedOut {
		panicf("set_pager", "%s is paged out; page it in before taking it from its pager", t.describe())
	}
	if t.st.block != nil {
		t.st.bytes = t.st.block.Requested()
	}
	t.st.pager = p
}

// Pager is the pager of t's storage, or nil.
func (t *Tensor) Pager() Pager { return t.st.pager }

// PagedOut reports whether t's storage is paged out (its data is its
// pager's, and it holds no device memory).
func (t *Tensor) PagedOut() bool { return t.st.pagedOut }

// PageOut frees the device block of t's storage: its pager keeps the data
// (the caller, being the pager, has made sure of that). Paging out a
// paged-out storage does nothing.
func (t *Tensor) PageOut() {
	t.live("page_out")
	st := t.st
	if st.pager == nil {
		panicf("page_out", "%s has no pager (SetPager)", t.describe())
	}
	if st.pagedOut || st.block == nil {
		return
	}
	st.alloc.Free(st.block)
	st.block = nil
	st.pagedOut = true
}

// TakeBlock pages out t's storage without freeing its device block,
// which it returns (nil if the storage was already paged out or holds no
// block): the caller, being the pager, owns the block from now on and
// keeps the data elsewhere, typically to refill the block and give it
// back (InstallBlock) at the next page-in. A parameter that stays on the
// device while its host copy is updated pages out this way, so that its
// next use waits for the new values while its memory stays allocated.
func (t *Tensor) TakeBlock() *device.Block {
	t.live("page_out")
	st := t.st
	if st.pager == nil {
		panicf("page_out", "%s has no pager (SetPager)", t.describe())
	}
	if st.pagedOut || st.block == nil {
		return nil
	}
	b := st.block
	st.block = nil
	st.pagedOut = true
	return b
}

// InstallBlock gives a paged-out storage the device block b holding its
// data, making it resident again; the storage owns b from now on. For
// pagers, from PageIn (or ahead of it). b must be of t's device and as
// large as the storage was.
func (t *Tensor) InstallBlock(b *device.Block) {
	st := t.st
	if !st.pagedOut {
		panicf("page_in", "%s is not paged out", t.describe())
	}
	if b == nil || b.Requested() < st.bytes {
		panicf("page_in", "%s needs a block of %d bytes", t.describe(), st.bytes)
	}
	st.block = b
	st.pagedOut = false
}

// NewPagedOut returns a contiguous tensor of shape on dev whose storage
// is paged out to p from the start: it holds no device memory until its
// first use asks p for its data. (A streamer gives backward a gradient
// accumulated in host memory this way, brought back only if backward
// adds to it.)
func NewPagedOut(dev device.Device, dtype device.DType, shape []int, p Pager) *Tensor {
	if p == nil {
		panicf("new_paged_out", "no pager")
	}
	_, bytes, err := device.ShapeBytes(shape, dtype.Size())
	if err != nil {
		panic(&Error{Op: "new_paged_out", Msg: fmt.Sprintf("%s tensor on %s", dtype, dev.Name()), Err: err})
	}
	t := &Tensor{shape: cloneShape(shape), strides: make([]int, len(shape)), dtype: dtype, st: newStorage(dev, nil)}
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		t.strides[i] = n
		n *= shape[i]
	}
	t.st.pager, t.st.bytes, t.st.pagedOut = p, bytes, bytes > 0
	return t
}

// PagedBytes is the size of t's storage whether resident or paged out:
// the bytes a pager keeps and brings back.
func (t *Tensor) PagedBytes() int64 { return t.st.bytes }

// pageIn makes t's storage resident if it is paged out, asking its pager.
func (t *Tensor) pageIn(op string) {
	st := t.st
	if !st.pagedOut {
		return
	}
	if err := st.pager.PageIn(t); err != nil {
		panic(&Error{Op: op, Msg: fmt.Sprintf("bringing %s back to %s", t.describe(), st.dev.Name()), Err: err})
	}
	if st.pagedOut {
		panicf(op, "the pager of %s returned without bringing it back", t.describe())
	}
}

// use is live for a use of t's data: it also brings a paged-out storage
// back.
func (t *Tensor) use(op string) {
	t.live(op)
	if t.st.pagedOut {
		t.pageIn(op)
	}
}

// SetRecordHook sets a function the tape calls after it records each op,
// with the op's inputs (nil: none). A pager uses it to learn that an op is
// done with a paged storage; the inputs are borrowed, for the call only.
func (tp *Tape) SetRecordHook(f func(op string, inputs []*Tensor)) {
	tp.checkOwner("set_record_hook")
	tp.recordHook = f
}

// SetCastSource sets a function the tape asks first for the bfloat16
// copy of a parameter that a matrix product under Autocast reads (nil:
// none, the tape casts the parameter itself). For p, any view of a
// parameter, it returns nil (the tape casts p) or a bfloat16 tensor on
// p's device holding, element for element, the rounding of p's whole
// storage: a contiguous tensor of as many elements, on no tape, owned by
// the source, typically paged (a ZeRO-3 FullShard gathers bfloat16 shards
// into it, so the float32 parameter is never brought whole to the device
// for a product, and a gather moves half the bytes; PyTorch FSDP's
// param_dtype). The tape lays p's view over it, with a handle of its own,
// and records that as p's cast, as it would its own: backward widens the
// copy's gradient into p's. The source must keep the copy's values equal
// to the rounding of p's while the tape uses it.
func (tp *Tape) SetCastSource(f func(p *Tensor) *Tensor) {
	tp.checkOwner("set_cast_source")
	tp.castSource = f
}

// MigrateToPager makes t, a whole contiguous tensor on dev's host
// (dev.Host()), a tensor of dev whose storage is paged out to p, without
// allocating device memory: t's host memory becomes the returned tensor
// (the master copy, which the caller, being p, owns and keeps), and every
// handle on t's storage is now a handle on dev's. A model too large for a
// device is built on its host and migrated this way.
func (t *Tensor) MigrateToPager(dev device.Device, p Pager) *Tensor {
	t.live("migrate")
	st := t.st
	switch {
	case p == nil:
		panicf("migrate", "no pager")
	case st.dev != dev.Host() || st.dev == dev:
		panicf("migrate", "%s is on %s, not on %s's host", t.describe(), st.dev.Name(), dev.Name())
	case st.pager != nil:
		panicf("migrate", "%s already has a pager", t.describe())
	case t.offset != 0 || !t.IsContiguous() || st.block != nil && st.block.Requested() != t.Bytes():
		panicf("migrate", "%s is a view of a larger storage; migrate whole tensors", t.describe())
	case t.tape != nil:
		panicf("migrate", "%s belongs to a tape", t.describe())
	}
	master := &Tensor{shape: t.shape, strides: t.strides, dtype: t.dtype, st: newStorage(st.dev, st.block), name: t.name}
	st.dev, st.alloc = dev, dev.Allocator()
	st.bytes = t.Bytes()
	st.block = nil
	st.pager, st.pagedOut = p, st.bytes > 0
	return master
}
