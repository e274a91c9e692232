package fake

import (
	"fmt"
	"sort"
	"time"
	"unsafe"

	"ferry/device/cuda/cu"
)

// ---- memory ----

// alloc is a device or pinned host allocation, backed by Go memory (8-byte
// aligned). Device allocations are addressed by fake device pointers;
// pinned ones by the address of their Go memory.
type alloc struct {
	base  uint64 // device address, or the host address for pinned memory
	words []uint64
	size  int64
	host  bool
}

func (a *alloc) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&a.words[0])), len(a.words)*8)[:a.size]
}

func newAlloc(n int64) *alloc {
	return &alloc{words: make([]uint64, (n+7)/8+1), size: n}
}

func (c *Context) insert(a *alloc) {
	i := sort.Search(len(c.allocs), func(i int) bool { return c.allocs[i].base >= a.base })
	c.allocs = append(c.allocs, nil)
	copy(c.allocs[i+1:], c.allocs[i:])
	c.allocs[i] = a
}

// find returns the allocation holding address p, and p's offset in it.
func (c *Context) find(p uint64, host bool) (*alloc, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.allocs), func(i int) bool { return c.allocs[i].base > p }) - 1
	if i < 0 {
		return nil, 0, false
	}
	a := c.allocs[i]
	if a.host != host || p >= a.base+uint64(a.size) {
		return nil, 0, false
	}
	return a, int64(p - a.base), true
}

// deviceTail returns device memory from p to the end of its allocation.
func (c *Context) deviceTail(p uint64) ([]byte, bool) {
	a, off, ok := c.find(p, false)
	if !ok {
		return nil, false
	}
	return a.bytes()[off:], true
}

// deviceBytes returns device memory [p, p+n), or an error naming why not.
func (c *Context) deviceBytes(p cu.DevicePtr, n int64) ([]byte, error) {
	a, off, ok := c.find(uint64(p), false)
	if !ok || off+n > a.size {
		return nil, fmt.Errorf("device address %#x (+%d bytes) is not allocated device memory", uint64(p), n)
	}
	return a.bytes()[off : off+n], nil
}

// hostBytes returns host memory [p, p+n) and whether it is pinned.
func (c *Context) hostBytes(p unsafe.Pointer, n int64) ([]byte, bool) {
	a, off, ok := c.find(uint64(uintptr(p)), true)
	pinned := ok && off+n <= a.size
	return unsafe.Slice((*byte)(p), n), pinned
}

func (c *Context) MemAlloc(n int64) (cu.DevicePtr, error) {
	if err := c.enter("cuMemAlloc_v2"); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, errorOf("cuMemAlloc_v2", cu.ErrInvalidValue, "size 0")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used+n > c.drv.opts.Memory {
		return 0, errorOf("cuMemAlloc_v2", cu.ErrOutOfMemory, "")
	}
	a := newAlloc(n)
	if c.drv.opts.HostAddresses {
		a.base = uint64(uintptr(unsafe.Pointer(&a.words[0])))
	} else {
		a.base = c.next
		c.next += (uint64(n) + 2<<20) &^ 0xfff // a gap after each allocation
	}
	c.used += n
	c.insert(a)
	return cu.DevicePtr(a.base), nil
}

func (c *Context) MemFree(p cu.DevicePtr) error {
	if err := c.enter("cuMemFree_v2"); err != nil {
		return err
	}
	return c.remove("cuMemFree_v2", uint64(p), false)
}

func (c *Context) remove(call string, p uint64, host bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.allocs {
		if a.base == p && a.host == host {
			c.allocs = append(c.allocs[:i], c.allocs[i+1:]...)
			if !host {
				c.used -= a.size
			}
			return nil
		}
	}
	return errorOf(call, cu.ErrInvalidValue, fmt.Sprintf("%#x was not allocated", p))
}

func (c *Context) MemHostAlloc(n int64) (unsafe.Pointer, error) {
	if err := c.enter("cuMemHostAlloc"); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, errorOf("cuMemHostAlloc", cu.ErrInvalidValue, "size 0")
	}
	a := newAlloc(n)
	a.host = true
	p := unsafe.Pointer(&a.words[0])
	a.base = uint64(uintptr(p))
	c.mu.Lock()
	c.insert(a)
	c.mu.Unlock()
	return p, nil
}

func (c *Context) MemFreeHost(p unsafe.Pointer) error {
	if err := c.enter("cuMemFreeHost"); err != nil {
		return err
	}
	return c.remove("cuMemFreeHost", uint64(uintptr(p)), true)
}

// Do runs f: the fake has no current context to make.
func (c *Context) Do(f func() error) error { return f() }

func (c *Context) MemGetInfo() (free, total int64, err error) {
	if err := c.enter("cuMemGetInfo_v2"); err != nil {
		return 0, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drv.opts.Memory - c.used, c.drv.opts.Memory, nil
}

// ---- copies ----

// memcpy enqueues a copy on s; resolve runs on the stream, when the copy
// does, and returns the destination and source bytes.
func (c *Context) memcpy(call string, s cu.Stream, n int64, resolve func() (dst, src []byte, pageable bool, err error)) error {
	if err := c.enter(call); err != nil {
		return err
	}
	st, err := c.stream(call, s)
	if err != nil {
		return err
	}
	delay := c.drv.opts.CopyDelay
	st.enqueue(func() *cu.Error {
		if c.faulted() {
			return nil
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		dst, src, pageable, err := resolve()
		if err != nil {
			return errorOf(call, cu.ErrIllegalAddress, err.Error())
		}
		copy(dst, src)
		c.mu.Lock()
		c.stats.Copies++
		c.stats.CopyBytes += n
		if pageable {
			c.stats.PageableCopies++
		}
		c.mu.Unlock()
		return nil
	})
	return nil
}

func (c *Context) MemcpyHtoDAsync(dst cu.DevicePtr, src unsafe.Pointer, n int64, s cu.Stream) error {
	return c.memcpy("cuMemcpyHtoDAsync_v2", s, n, func() ([]byte, []byte, bool, error) {
		d, err := c.deviceBytes(dst, n)
		h, pinned := c.hostBytes(src, n)
		return d, h, !pinned, err
	})
}

func (c *Context) MemcpyDtoHAsync(dst unsafe.Pointer, src cu.DevicePtr, n int64, s cu.Stream) error {
	return c.memcpy("cuMemcpyDtoHAsync_v2", s, n, func() ([]byte, []byte, bool, error) {
		d, err := c.deviceBytes(src, n)
		h, pinned := c.hostBytes(dst, n)
		return h, d, !pinned, err
	})
}

func (c *Context) MemcpyDtoDAsync(dst, src cu.DevicePtr, n int64, s cu.Stream) error {
	return c.memcpy("cuMemcpyDtoDAsync_v2", s, n, func() ([]byte, []byte, bool, error) {
		d, err := c.deviceBytes(dst, n)
		if err != nil {
			return nil, nil, false, err
		}
		sb, err := c.deviceBytes(src, n)
		return d, sb, false, err
	})
}

func (c *Context) MemcpyHtoHAsync(dst, src unsafe.Pointer, n int64, s cu.Stream) error {
	return c.memcpy("cuMemcpyAsync", s, n, func() ([]byte, []byte, bool, error) {
		d, p1 := c.hostBytes(dst, n)
		sb, p2 := c.hostBytes(src, n)
		return d, sb, !p1 || !p2, nil
	})
}

func (c *Context) MemsetD32Async(dst cu.DevicePtr, v uint32, n int64, s cu.Stream) error {
	const call = "cuMemsetD32Async"
	if err := c.enter(call); err != nil {
		return err
	}
	st, err := c.stream(call, s)
	if err != nil {
		return err
	}
	st.enqueue(func() *cu.Error {
		if c.faulted() {
			return nil
		}
		b, err := c.deviceBytes(dst, 4*n)
		if err != nil {
			return errorOf(call, cu.ErrIllegalAddress, err.Error())
		}
		w := unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n)
		for i := range w {
			w[i] = v
		}
		return nil
	})
	return nil
}
