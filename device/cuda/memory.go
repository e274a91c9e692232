package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// devMemory is the GPU memory under the device's allocator: each segment is
// one cuMemAlloc.
type devMemory struct{ d *Device }

// devSegment is a cuMemAlloc'd range.
type devSegment struct {
	d    *Device
	ptr  cu.DevicePtr
	size int64
}

func (m *devMemory) Reserve(size int64) (device.Segment, error) {
	p, err := m.d.ctx.MemAlloc(size)
	if err != nil {
		return nil, err
	}
	return &devSegment{d: m.d, ptr: p, size: size}, nil
}

// Release frees a segment. The allocator only releases segments with no
// block in use, but kernels enqueued before the last free may still be
// reading them: wait for the GPU first.
func (m *devMemory) Release(s device.Segment) error {
	if err := m.d.ctx.Synchronize(); err != nil {
		return err
	}
	return m.d.ctx.MemFree(s.(*devSegment).ptr)
}

// nanBits is the float32 quiet NaN the poisoner writes.
var nanBits = math.Float32bits(float32(math.NaN()))

// Poison fills freed bytes with NaN on the compute stream, after the work
// that used them (the allocator calls it when a block becomes reusable,
// which on the compute stream is in stream order).
func (m *devMemory) Poison(s device.Segment, off, n int64) {
	seg := s.(*devSegment)
	if err := m.d.ctx.MemsetD32Async(seg.ptr+cu.DevicePtr(off), nanBits, n/4, m.d.compute.h); err != nil {
		m.d.noteAsync(fmt.Errorf("%s: poisoning a freed block: %w", m.d.name, err))
	}
}

// hostMemory is the pinned memory under the host device's allocator.
type hostMemory struct{ d *Device }

// hostSegment is a cuMemHostAlloc'd range; it is a cpu.Segment, so the CPU
// kernels of the host device work on it directly.
type hostSegment struct {
	d    *Device
	p    unsafe.Pointer
	size int64
}

func (s *hostSegment) Bytes() []byte { return unsafe.Slice((*byte)(s.p), s.size) }

func (m *hostMemory) Reserve(size int64) (device.Segment, error) {
	p, err := m.d.ctx.MemHostAlloc(size)
	if err != nil {
		return nil, err
	}
	return &hostSegment{d: m.d, p: p, size: size}, nil
}

// Release frees a pinned segment. Copies still queued on a stream may read
// or write it: wait for the GPU first.
func (m *hostMemory) Release(s device.Segment) error {
	if err := m.d.ctx.Synchronize(); err != nil {
		return err
	}
	return m.d.ctx.MemFreeHost(s.(*hostSegment).p)
}

// place is where a span or view lives: device memory (ptr) or pinned host
// memory (host).
type place struct {
	dev  bool
	ptr  cu.DevicePtr
	host unsafe.Pointer
}

// locate resolves bytes [off, off+n) of block b, which must be this
// device's memory or its host pool's.
func (d *Device) locate(b *device.Block, off, n int64) (place, error) {
	if b == nil {
		return place{}, fmt.Errorf("%s: nil block", d.name)
	}
	if off < 0 || n < 0 || off+n > b.Size() {
		return place{}, fmt.Errorf("%s: bytes [%d, %d) out of a block of %d", d.name, off, off+n, b.Size())
	}
	switch s := b.Segment().(type) {
	case *devSegment:
		if s.d != d {
			return place{}, fmt.Errorf("%s: a block of %s", d.name, s.d.name)
		}
		return place{dev: true, ptr: s.ptr + cu.DevicePtr(b.Offset()+off)}, nil
	case *hostSegment:
		if s.d != d {
			return place{}, fmt.Errorf("%s: a block of %s's host", d.name, s.d.name)
		}
		return place{host: unsafe.Add(s.p, b.Offset()+off)}, nil
	}
	return place{}, fmt.Errorf("%s: a block of another device (%T)", d.name, b.Segment())
}

// ptr is the device address of a view's first element (nil block: 0, for
// views with no elements): Off counts elements of the view's DType.
func (d *Device) ptr(v device.View) (cu.DevicePtr, error) {
	if v.Block == nil {
		return 0, nil
	}
	s, ok := v.Block.Segment().(*devSegment)
	if !ok || s.d != d {
		return 0, fmt.Errorf("%s: kernel operand is not %s memory (%T)", d.name, d.name, v.Block.Segment())
	}
	return s.ptr + cu.DevicePtr(v.Block.Offset()+int64(v.Off)*int64(v.DType.Size())), nil
}

// Copy enqueues on s a copy between spans of this device's memory and its
// host pool's (device to device, host to device, device to host, or host to
// host), with cuMemcpy*Async.
func (d *Device) Copy(s device.Stream, dst, src device.Span) error {
	st, ok := s.(*stream)
	if !ok || st.d != d {
		return fmt.Errorf("%s: Copy on a stream of another device (%T)", d.name, s)
	}
	if dst.Len != src.Len {
		return fmt.Errorf("%s: copy of %d bytes into a span of %d", d.name, src.Len, dst.Len)
	}
	if src.Len == 0 {
		return nil
	}
	to, err := d.locate(dst.Block, dst.Off, dst.Len)
	if err != nil {
		return fmt.Errorf("copy destination: %w", err)
	}
	from, err := d.locate(src.Block, src.Off, src.Len)
	if err != nil {
		return fmt.Errorf("copy source: %w", err)
	}
	n := src.Len
	switch {
	case to.dev && from.dev:
		err = d.ctx.MemcpyDtoDAsync(to.ptr, from.ptr, n, st.h)
	case to.dev:
		err = d.ctx.MemcpyHtoDAsync(to.ptr, from.host, n, st.h)
	case from.dev:
		err = d.ctx.MemcpyDtoHAsync(to.host, from.ptr, n, st.h)
	default:
		err = d.ctx.MemcpyHtoHAsync(to.host, from.host, n, st.h)
	}
	if err != nil {
		return fmt.Errorf("%s: copy on stream %s: %w", d.name, st.name, err)
	}
	return nil
}
