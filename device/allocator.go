package device

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Memory is the raw memory a driver gives an Allocator: cuMemAlloc on a GPU,
// anonymous mmap on the CPU, nothing at all on the meta device.
type Memory interface {
	// Reserve obtains a segment of exactly size bytes from the system.
	Reserve(size int64) (Segment, error)
	// Release gives a segment back to the system.
	Release(Segment) error
}

// Segment is memory obtained by Memory.Reserve, in the driver's own terms
// (a byte slice, a device pointer). The allocator only passes it around.
type Segment any

// Poisoner is implemented by Memory that can overwrite bytes with float32
// NaNs, so that a use after free shows up as a wrong number.
type Poisoner interface {
	Poison(seg Segment, off, n int64)
}

// Sizes that shape the allocator, as in PyTorch's CUDACachingAllocator.
const (
	minBlockSize  = 512      // every block is a multiple of this
	smallSize     = 1 << 20  // requests up to this go to the small pool
	smallBuffer   = 2 << 20  // small-pool segments are this big
	minLargeAlloc = 10 << 20 // requests below this get a segment of largeBuffer
	largeBuffer   = 20 << 20
	roundLarge    = 2 << 20 // larger segments are rounded up to this
)

// RoundSize is the size of the block that serves a request of n bytes.
func RoundSize(n int64) int64 {
	if n < minBlockSize {
		return minBlockSize
	}
	return (n + minBlockSize - 1) / minBlockSize * minBlockSize
}

func segmentSize(rounded int64) int64 {
	switch {
	case rounded <= smallSize:
		return smallBuffer
	case rounded < minLargeAlloc:
		return largeBuffer
	default:
		return (rounded + roundLarge - 1) / roundLarge * roundLarge
	}
}

type blockState uint8

const (
	stateFree      blockState = iota // in a free list, reusable
	stateAllocated                   // handed out
	statePending                     // freed by its owner, but a stream may still use it
	stateForeign                     // made by ForeignBlock: no allocator owns it
)

// Block is a piece of memory handed out by an Allocator. The caller that
// allocated it owns it until it calls Free; after Free the block must not be
// touched (the allocator may hand it to someone else).
type Block struct {
	seg       *segment
	off       int64 // bytes from the start of the segment
	size      int64 // rounded size; the bytes this block spans
	requested int64
	category  Category
	state     blockState
	prev      *Block // neighbours in the segment, for coalescing
	next      *Block
	streams   []Stream // side streams that used the block (see RecordStream)
	events    []Event  // for a pending block: what must pass before reuse
}

// Segment is the system memory the block lives in; Offset is where in it.
func (b *Block) Segment() Segment { return b.seg.raw }

// Offset is the block's distance in bytes from the start of its segment.
func (b *Block) Offset() int64 { return b.off }

// Size is the block's rounded size in bytes.
func (b *Block) Size() int64 { return b.size }

// Requested is the size the caller asked for.
func (b *Block) Requested() int64 { return b.requested }

// Category is what the block holds.
func (b *Block) Category() Category { return b.category }

// ForeignBlock returns a block over size bytes at off in seg that no
// Allocator owns, so that one device's kernels can run over memory that
// something else manages: the fake CUDA driver (device/cuda/fake) runs
// the CPU device's kernels over its device memory this way, seg being a
// cpu.Segment. The memory's owner keeps it alive while the block is used;
// Allocator.Free refuses the block.
func ForeignBlock(seg Segment, off, size int64) *Block {
	return &Block{seg: &segment{raw: seg, size: off + size}, off: off, size: size, requested: size, state: stateForeign}
}

type segment struct {
	raw   Segment
	size  int64
	small bool
	id    uint64
	first *Block
}

// AllocatorConfig sets an allocator's limits.
type AllocatorConfig struct {
	// Name appears in errors ("cpu", "cuda:0 pinned host").
	Name string
	// Capacity caps reserved bytes; 0 means no cap beyond what Memory gives.
	Capacity int64
	// PoisonFreed overwrites blocks with NaN when they become reusable
	// (needs Memory to implement Poisoner).
	PoisonFreed bool
}

// Allocator is a caching allocator, shaped like PyTorch's: freed blocks are
// kept in two pools (small and large requests) and reused, best fit first,
// split when much larger than asked and merged with free neighbours when
// freed; segments go back to the system only when the cache is flushed.
//
// A block that a side stream used (RecordStream) is, when freed, not reused
// until that stream has passed an event recorded at the time of the free:
// it counts as active but not allocated. This is what stops a copy on
// another stream from reading memory that compute has already handed to a
// new tensor.
//
// All methods are safe for concurrent use.
type Allocator struct {
	cfg      AllocatorConfig
	mem      Memory
	instance int // see Identify
	closed   atomic.Bool

	mu       sync.Mutex
	small    freeList
	large    freeList
	pending  []*Block
	segments map[*segment]struct{}
	nextID   uint64
	stats    Stats
	observer func(AllocEvent)
}

// AllocEvent describes one change, for a memory timeline.
type AllocEvent struct {
	Alloc     bool // false: a free (the block is no longer allocated), or a retag
	Bytes     int64
	Category  Category
	Allocated int64 // allocated bytes after the change
	// Retag is set when an allocated block's bytes moved from category From
	// to Category (SetCategory); nothing was allocated or freed.
	Retag bool
	From  Category
}

// NewAllocator makes an allocator over mem.
func NewAllocator(mem Memory, cfg AllocatorConfig) *Allocator {
	a := &Allocator{cfg: cfg, mem: mem, segments: map[*segment]struct{}{}, instance: nextInstance(cfg.Name)}
	a.stats.Capacity = cfg.Capacity
	return a
}

// ErrClosed is wrapped by the errors of an allocator, and of a device,
// used after Close.
var ErrClosed = errors.New("the device was closed")

// Closed reports whether Close was called. Memory of a closed allocator is
// gone: the tensor layer checks this before every use of a tensor, so that
// a tensor outliving its device fails with an error instead of reading
// unmapped memory.
func (a *Allocator) Closed() bool { return a.closed.Load() }

var instances struct {
	sync.Mutex
	byName map[string]int
}

// nextInstance numbers the allocators of one name in the order they are
// made, from 1.
func nextInstance(name string) int {
	instances.Lock()
	defer instances.Unlock()
	if instances.byName == nil {
		instances.byName = map[string]int{}
	}
	instances.byName[name]++
	return instances.byName[name]
}

// Identify names d for a message that must tell devices apart: "cpu #2"
// is the second device named "cpu" this process opened. Two devices opened
// separately have the same Name but never the same identity. It adds
// "(closed)" for a device that was closed.
func Identify(d Device) string {
	if d == nil {
		return "no device"
	}
	a := d.Allocator()
	s := fmt.Sprintf("%s #%d", d.Name(), a.instance)
	if a.Closed() {
		s += " (closed)"
	}
	return s
}

// Name is the allocator's name, as errors print it.
func (a *Allocator) Name() string { return a.cfg.Name }

// Observe registers fn to be called, under the allocator's lock, after each
// allocation and each free. fn must be quick and must not call back into the
// allocator. nil removes the observer.
func (a *Allocator) Observe(fn func(AllocEvent)) {
	a.mu.Lock()
	a.observer = fn
	a.mu.Unlock()
}

// Alloc returns a block of at least n bytes tagged with cat. When the block
// does not fit it flushes the cache and retries, then waits for pending
// frees and retries, then returns an *OutOfMemoryError.
func (a *Allocator) Alloc(n int64, cat Category) (*Block, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%s: allocation of %d bytes: size must be positive", a.cfg.Name, n)
	}
	if n > MaxBytes {
		return nil, fmt.Errorf("%s: allocation of %d bytes: %w (at most %s)", a.cfg.Name, n, ErrTooLarge, FormatBytes(MaxBytes))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, fmt.Errorf("%s: allocation of %s: %w", a.cfg.Name, FormatBytes(n), ErrClosed)
	}
	a.processPending(false)
	size := RoundSize(n)
	pool := &a.large
	if size <= smallSize {
		pool = &a.small
	}
	b := pool.bestFit(size)
	if b != nil {
		pool.remove(b)
	} else {
		var err error
		b, err = a.grow(size)
		if b == nil && len(a.pending) > 0 {
			// Out of capacity or system memory while blocks other streams
			// still use are pending: wait for them, then retry.
			a.processPending(true)
			if b = pool.bestFit(size); b != nil {
				pool.remove(b)
			} else {
				b, err = a.grow(size)
			}
		}
		if b == nil {
			a.stats.OOMs++
			return nil, a.oomError(n, cat, err)
		}
	}
	a.split(b, size, pool)
	b.state = stateAllocated
	b.requested = n
	b.category = cat
	b.streams = b.streams[:0]
	a.stats.AllocatedBytes.add(b.size)
	a.stats.ActiveBytes.add(b.size)
	a.stats.RequestedBytes.add(n)
	a.stats.Allocations.add(1)
	a.stats.ActiveBlocks.add(1)
	a.stats.ByCategory[cat].add(b.size)
	a.notify(true, b)
	return b, nil
}

// grow reserves a new segment for a block of size bytes, flushing the cache
// once if the capacity or the system says no.
func (a *Allocator) grow(size int64) (*Block, error) {
	segSize := segmentSize(size)
	if a.stats.ReservedBytes.Current > MaxBytes-segSize {
		// No device holds this much: keeps every statistic far from overflow.
		return nil, fmt.Errorf("%s more would make %s reserved: %w", FormatBytes(segSize), FormatBytes(a.stats.ReservedBytes.Current+segSize), ErrTooLarge)
	}
	fits := func() bool {
		return a.cfg.Capacity == 0 || a.stats.ReservedBytes.Current+segSize <= a.cfg.Capacity
	}
	var raw Segment
	var err error
	if fits() {
		raw, err = a.mem.Reserve(segSize)
	}
	if !fits() || err != nil {
		// PyTorch counts every such retry (num_alloc_retries), freed or not.
		a.releaseFreeSegments()
		a.stats.CacheFlushes++
		if !fits() {
			return nil, nil
		}
		if raw, err = a.mem.Reserve(segSize); err != nil {
			return nil, err
		}
	}
	a.nextID++
	seg := &segment{raw: raw, size: segSize, small: size <= smallSize, id: a.nextID}
	b := &Block{seg: seg, size: segSize}
	seg.first = b
	a.segments[seg] = struct{}{}
	a.stats.ReservedBytes.add(segSize)
	a.stats.Segments.add(1)
	return b, nil
}

func (a *Allocator) oomError(n int64, cat Category, cause error) error {
	e := &OutOfMemoryError{Device: a.cfg.Name, Requested: n, Category: cat, Stats: a.stats}
	if a.cfg.Capacity > 0 {
		e.Free = a.cfg.Capacity - a.stats.ReservedBytes.Current
	}
	e.FreeCached = a.small.bytes() + a.large.bytes()
	if cause != nil {
		return fmt.Errorf("%w (system: %w)", e, cause)
	}
	return e
}

// split cuts b down to size bytes when the rest is worth keeping, putting
// the rest in the free pool.
func (a *Allocator) split(b *Block, size int64, pool *freeList) {
	rest := b.size - size
	worth := rest >= minBlockSize
	if !b.seg.small {
		worth = rest > smallSize
	}
	if !worth {
		return
	}
	r := &Block{seg: b.seg, off: b.off + size, size: rest, prev: b, next: b.next}
	if b.next != nil {
		b.next.prev = r
	}
	b.next = r
	b.size = size
	pool.insert(r)
}

// SetCategory re-tags an allocated block, moving its bytes from one
// category's statistics to another's (a gradient adopted as a parameter's
// .grad, a tensor made a parameter).
func (a *Allocator) SetCategory(b *Block, cat Category) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return // the block went with the allocator
	}
	if b.state != stateAllocated {
		panic(fmt.Sprintf("%s: SetCategory on a block that is not allocated", a.cfg.Name))
	}
	if b.category == cat {
		return
	}
	a.stats.ByCategory[b.category].sub(b.size)
	a.stats.ByCategory[cat].add(b.size)
	if a.observer != nil {
		a.observer(AllocEvent{Retag: true, From: b.category, Bytes: b.size, Category: cat, Allocated: a.stats.AllocatedBytes.Current})
	}
	b.category = cat
}

// RecordStream notes that s (a stream other than the device's compute
// stream) uses b, so that freeing b does not make it reusable before s has
// reached the point it was at when Free was called.
func (a *Allocator) RecordStream(b *Block, s Stream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return
	}
	if b.state != stateAllocated {
		panic(fmt.Sprintf("%s: RecordStream on a block that is not allocated", a.cfg.Name))
	}
	for _, t := range b.streams {
		if t == s {
			return
		}
	}
	b.streams = append(b.streams, s)
}

// Free gives b back. If side streams used it, it becomes reusable only once
// they have passed the events recorded now. After Close it does nothing:
// Close released every block, so releasing a tensor that outlived its
// device is harmless.
func (a *Allocator) Free(b *Block) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return
	}
	if b.state == stateForeign {
		panic(fmt.Sprintf("%s: Free of a block no allocator owns (device.ForeignBlock)", a.cfg.Name))
	}
	if b.state != stateAllocated {
		panic(fmt.Sprintf("%s: Free of a block that is not allocated (double free)", a.cfg.Name))
	}
	a.stats.AllocatedBytes.sub(b.size)
	a.stats.RequestedBytes.sub(b.requested)
	a.stats.Allocations.sub(1)
	a.stats.ByCategory[b.category].sub(b.size)
	a.notify(false, b)
	if len(b.streams) > 0 {
		for _, s := range b.streams {
			b.events = append(b.events, s.Record())
		}
		b.streams = b.streams[:0]
		b.state = statePending
		a.pending = append(a.pending, b)
		return
	}
	a.release(b)
}

// release makes an unallocated block reusable: poison, merge, pool.
func (a *Allocator) release(b *Block) {
	a.stats.ActiveBytes.sub(b.size)
	a.stats.ActiveBlocks.sub(1)
	if a.cfg.PoisonFreed {
		if p, ok := a.mem.(Poisoner); ok {
			p.Poison(b.seg.raw, b.off, b.size)
		}
	}
	b.state = stateFree
	b.events = b.events[:0]
	pool := &a.large
	if b.seg.small {
		pool = &a.small
	}
	if p := b.prev; p != nil && p.state == stateFree {
		pool.remove(p)
		p.size += b.size
		p.next = b.next
		if b.next != nil {
			b.next.prev = p
		}
		b = p
	}
	if n := b.next; n != nil && n.state == stateFree {
		pool.remove(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
	}
	pool.insert(b)
}

// processPending releases pending blocks whose events have passed; with
// wait, it first waits for all of them.
func (a *Allocator) processPending(wait bool) {
	kept := a.pending[:0]
	for _, b := range a.pending {
		done := true
		for _, e := range b.events {
			if wait {
				_ = e.Synchronize() // a stream error surfaces where the stream is synchronized
			} else if !e.Done() {
				done = false
				break
			}
		}
		if done {
			a.release(b)
		} else {
			kept = append(kept, b)
		}
	}
	clear(a.pending[len(kept):])
	a.pending = kept
}

// releaseFreeSegments gives every wholly free segment back to the system
// and returns the bytes released.
func (a *Allocator) releaseFreeSegments() int64 {
	var freed int64
	for seg := range a.segments {
		b := seg.first
		if b.state != stateFree || b.next != nil {
			continue
		}
		if seg.small {
			a.small.remove(b)
		} else {
			a.large.remove(b)
		}
		if err := a.mem.Release(seg.raw); err != nil {
			// Keep accounting honest: the segment is gone from our pools either way.
			_ = err
		}
		delete(a.segments, seg)
		a.stats.ReservedBytes.sub(seg.size)
		a.stats.Segments.sub(1)
		freed += seg.size
	}
	return freed
}

// EmptyCache waits for pending frees and gives every wholly free segment
// back to the system (PyTorch: torch.cuda.empty_cache()).
func (a *Allocator) EmptyCache() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.processPending(true)
	a.releaseFreeSegments()
}

// Stats returns a snapshot of the statistics.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.processPending(false)
	return a.stats
}

// Allocated is the bytes allocated now (PyTorch: memory_allocated()).
func (a *Allocator) Allocated() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.AllocatedBytes.Current
}

// ResetPeak sets every peak to its current value (PyTorch:
// reset_peak_memory_stats()).
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.stats
	for _, st := range []*Stat{&s.AllocatedBytes, &s.ReservedBytes, &s.ActiveBytes, &s.RequestedBytes,
		&s.Allocations, &s.Segments, &s.ActiveBlocks} {
		st.resetPeak()
	}
	for i := range s.ByCategory {
		s.ByCategory[i].resetPeak()
	}
}

// Close waits for pending frees and releases every segment, allocated
// blocks included. Afterwards Alloc fails with ErrClosed, and Free,
// SetCategory and RecordStream do nothing; closing again does nothing.
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil
	}
	a.closed.Store(true)
	a.processPending(true)
	var errs []error
	for seg := range a.segments {
		errs = append(errs, a.mem.Release(seg.raw))
		delete(a.segments, seg)
		a.stats.ReservedBytes.sub(seg.size)
		a.stats.Segments.sub(1)
	}
	a.small, a.large = freeList{}, freeList{}
	return errors.Join(errs...)
}

func (a *Allocator) notify(alloc bool, b *Block) {
	if a.observer != nil {
		a.observer(AllocEvent{Alloc: alloc, Bytes: b.size, Category: b.category, Allocated: a.stats.AllocatedBytes.Current})
	}
}

// CheckInvariants verifies the allocator's bookkeeping: blocks tile their
// segments, free lists hold exactly the free blocks, and the byte counts
// agree. For tests.
func (a *Allocator) CheckInvariants() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var reserved, allocated, active, free int64
	inList := map[*Block]bool{}
	for _, b := range a.small.blocks {
		inList[b] = true
	}
	for _, b := range a.large.blocks {
		inList[b] = true
	}
	for seg := range a.segments {
		reserved += seg.size
		var off int64
		var prev *Block
		for b := seg.first; b != nil; b = b.next {
			if b.off != off || b.prev != prev || b.seg != seg {
				return fmt.Errorf("segment %d: block at %d breaks the tiling", seg.id, b.off)
			}
			switch b.state {
			case stateFree:
				if !inList[b] {
					return fmt.Errorf("segment %d: free block at %d is in no free list", seg.id, b.off)
				}
				if prev != nil && prev.state == stateFree {
					return fmt.Errorf("segment %d: adjacent free blocks at %d were not merged", seg.id, b.off)
				}
				free += b.size
				delete(inList, b)
			case stateAllocated:
				allocated += b.size
				active += b.size
			case statePending:
				active += b.size
			}
			off += b.size
			prev = b
		}
		if off != seg.size {
			return fmt.Errorf("segment %d: blocks cover %d of %d bytes", seg.id, off, seg.size)
		}
	}
	if len(inList) != 0 {
		return fmt.Errorf("%d blocks in free lists belong to no segment", len(inList))
	}
	if reserved != a.stats.ReservedBytes.Current || allocated != a.stats.AllocatedBytes.Current || active != a.stats.ActiveBytes.Current {
		return fmt.Errorf("counted reserved/allocated/active %d/%d/%d, stats say %d/%d/%d",
			reserved, allocated, active, a.stats.ReservedBytes.Current, a.stats.AllocatedBytes.Current, a.stats.ActiveBytes.Current)
	}
	var byCat int64
	for _, st := range a.stats.ByCategory {
		byCat += st.Current
	}
	if byCat != allocated {
		return fmt.Errorf("categories sum to %d, allocated is %d", byCat, allocated)
	}
	return nil
}

// freeList holds free blocks ordered by (size, segment, offset), so the
// first block at or above a size is the best fit.
type freeList struct{ blocks []*Block }

func less(x, y *Block) bool {
	if x.size != y.size {
		return x.size < y.size
	}
	if x.seg.id != y.seg.id {
		return x.seg.id < y.seg.id
	}
	return x.off < y.off
}

func (l *freeList) search(b *Block) int {
	return sort.Search(len(l.blocks), func(i int) bool { return !less(l.blocks[i], b) })
}

func (l *freeList) insert(b *Block) {
	i := l.search(b)
	l.blocks = append(l.blocks, nil)
	copy(l.blocks[i+1:], l.blocks[i:])
	l.blocks[i] = b
}

func (l *freeList) remove(b *Block) {
	i := l.search(b)
	if i >= len(l.blocks) || l.blocks[i] != b {
		panic("device: allocator free list lost a block")
	}
	copy(l.blocks[i:], l.blocks[i+1:])
	l.blocks[len(l.blocks)-1] = nil
	l.blocks = l.blocks[:len(l.blocks)-1]
}

func (l *freeList) bestFit(size int64) *Block {
	i := sort.Search(len(l.blocks), func(i int) bool { return l.blocks[i].size >= size })
	if i == len(l.blocks) {
		return nil
	}
	return l.blocks[i]
}

func (l *freeList) bytes() int64 {
	var n int64
	for _, b := range l.blocks {
		n += b.size
	}
	return n
}
