package device

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// fakeMemory counts reservations and releases, remembers what is live, and
// fails on demand.
type fakeMemory struct {
	reserves, releases int
	sizes              []int64 // sizes of every Reserve, in order
	live               map[*fakeSeg]bool
	failNext           int   // fail the next n Reserve calls
	limit              int64 // fail a Reserve that would exceed this many live bytes; 0: none
	poisoned           []poisonCall
}

type fakeSeg struct{ size int64 }

type poisonCall struct {
	seg     *fakeSeg
	off, n  int64
	allocID int
}

func newFakeMemory() *fakeMemory { return &fakeMemory{live: map[*fakeSeg]bool{}} }

var errFakeReserve = errors.New("fake: no memory")

func (m *fakeMemory) Reserve(size int64) (Segment, error) {
	if m.failNext > 0 {
		m.failNext--
		return nil, errFakeReserve
	}
	if m.limit > 0 && m.liveBytes()+size > m.limit {
		return nil, errFakeReserve
	}
	m.reserves++
	m.sizes = append(m.sizes, size)
	s := &fakeSeg{size: size}
	m.live[s] = true
	return s, nil
}

func (m *fakeMemory) Release(s Segment) error {
	fs := s.(*fakeSeg)
	if !m.live[fs] {
		panic("fake: release of a segment that is not live")
	}
	delete(m.live, fs)
	m.releases++
	return nil
}

func (m *fakeMemory) Poison(s Segment, off, n int64) {
	m.poisoned = append(m.poisoned, poisonCall{seg: s.(*fakeSeg), off: off, n: n})
}

func (m *fakeMemory) liveBytes() int64 {
	var n int64
	for s := range m.live {
		n += s.size
	}
	return n
}

// fakeStream records events the test completes by hand.
type fakeStream struct {
	name   string
	events []*fakeEvent
}

type fakeEvent struct {
	done  bool
	syncs int // Synchronize calls (the allocator waited)
}

func (s *fakeStream) Name() string { return s.name }
func (s *fakeStream) Record() Event {
	e := &fakeEvent{}
	s.events = append(s.events, e)
	return e
}
func (s *fakeStream) Wait(Event) {}
func (s *fakeStream) Synchronize() error {
	s.completeAll()
	return nil
}
func (s *fakeStream) completeAll() {
	for _, e := range s.events {
		e.done = true
	}
}
func (e *fakeEvent) Done() bool { return e.done }
func (e *fakeEvent) Synchronize() error {
	e.syncs++
	e.done = true
	return nil
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

func newTestAllocator(t *testing.T, capacity int64) (*Allocator, *fakeMemory) {
	t.Helper()
	m := newFakeMemory()
	a := NewAllocator(m, AllocatorConfig{Name: "fake", Capacity: capacity})
	return a, m
}

func mustAlloc(t *testing.T, a *Allocator, n int64, cat Category) *Block {
	t.Helper()
	b, err := a.Alloc(n, cat)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	check(t, a)
	return b
}

func check(t *testing.T, a *Allocator) {
	t.Helper()
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func free(t *testing.T, a *Allocator, b *Block) {
	t.Helper()
	a.Free(b)
	check(t, a)
}

func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{1, 512}, {511, 512}, {512, 512}, {513, 1024}, {1000, 1024}, {4096, 4096},
		{mib, mib}, {mib + 1, mib + 512}, {10*mib - 1, 10 * mib},
	} {
		if got := RoundSize(c.n); got != c.want {
			t.Errorf("RoundSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestSegmentSizes checks, through the sizes the allocator asks Memory
// for, PyTorch's segment policy: requests up to 1 MiB share 2 MiB
// segments, requests below 10 MiB get a 20 MiB segment, larger ones a
// segment of their size rounded up to 2 MiB.
func TestSegmentSizes(t *testing.T) {
	for _, c := range []struct{ n, seg int64 }{
		{1, 2 * mib}, {mib, 2 * mib}, {mib + 1, 20 * mib}, {10*mib - 512, 20 * mib},
		{10*mib - 1, 10 * mib}, // rounds to 10 MiB: no longer below the large threshold
		{10 * mib, 10 * mib}, {10*mib + 1, 12 * mib}, {21 * mib, 22 * mib}, {22 * mib, 22 * mib},
	} {
		a, m := newTestAllocator(t, 0)
		mustAlloc(t, a, c.n, Activation)
		if len(m.sizes) != 1 || m.sizes[0] != c.seg {
			t.Errorf("Alloc(%d) reserved %v, want [%d]", c.n, m.sizes, c.seg)
		}
		if got := a.Stats().ReservedBytes.Current; got != c.seg {
			t.Errorf("Alloc(%d): reserved_bytes %d, want %d", c.n, got, c.seg)
		}
	}
}

func TestSmallPoolSharesSegment(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	x := mustAlloc(t, a, 1000, Activation)
	y := mustAlloc(t, a, 1000, Activation)
	if m.reserves != 1 {
		t.Fatalf("two small blocks took %d segments, want 1", m.reserves)
	}
	if x.Segment() != y.Segment() || x.Offset() != 0 || y.Offset() != 1024 {
		t.Fatalf("blocks at %d and %d, want 0 and 1024 in one segment", x.Offset(), y.Offset())
	}
	if x.Size() != 1024 || x.Requested() != 1000 {
		t.Fatalf("size/requested %d/%d, want 1024/1000", x.Size(), x.Requested())
	}
	// Requests that fill the rest of the segment exactly fit in it.
	z := mustAlloc(t, a, mib, Activation)
	w := mustAlloc(t, a, mib-2048, Activation)
	if m.reserves != 1 || z.Offset() != 2048 || w.Offset() != mib+2048 {
		t.Fatalf("filling blocks at %d and %d after %d reserves", z.Offset(), w.Offset(), m.reserves)
	}
	mustAlloc(t, a, 1, Activation)
	if m.reserves != 2 {
		t.Fatalf("a full segment was not followed by a new one (%d reserves)", m.reserves)
	}
}

func TestLargeSplitThreshold(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	// 3 MiB out of a 20 MiB segment: the 17 MiB rest is split off and serves
	// the next request.
	x := mustAlloc(t, a, 3*mib, Activation)
	y := mustAlloc(t, a, 3*mib, Activation)
	if m.reserves != 1 || y.Offset() != 3*mib || x.Size() != 3*mib {
		t.Fatalf("second large block at %d (size %d) after %d reserves", y.Offset(), x.Size(), m.reserves)
	}
	// A rest of at most 1 MiB stays with the block in the large pool.
	a2, _ := newTestAllocator(t, 0)
	z := mustAlloc(t, a2, 19*mib+mib/2, Activation)
	if z.Size() != 20*mib {
		t.Fatalf("block of %d from a 20 MiB segment has size %d, want the whole segment", z.Requested(), z.Size())
	}
	if got := a2.Stats().AllocatedBytes.Current; got != 20*mib {
		t.Fatalf("allocated %d, want 20 MiB", got)
	}
	// Just over 1 MiB of rest is split off.
	a3, _ := newTestAllocator(t, 0)
	w := mustAlloc(t, a3, 19*mib-512, Activation)
	if w.Size() != 19*mib-512 {
		t.Fatalf("size %d, want %d (rest > 1 MiB split off)", w.Size(), 19*mib-512)
	}
}

func TestBestFit(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	// Free holes of 4 KiB, 8 KiB and 2 KiB, kept apart by allocated blocks.
	h4 := mustAlloc(t, a, 4*kib, Activation)
	mustAlloc(t, a, 512, Activation)
	h8 := mustAlloc(t, a, 8*kib, Activation)
	mustAlloc(t, a, 512, Activation)
	h2 := mustAlloc(t, a, 2*kib, Activation)
	mustAlloc(t, a, 512, Activation)
	off4, off8, off2 := h4.Offset(), h8.Offset(), h2.Offset()
	free(t, a, h4)
	free(t, a, h8)
	free(t, a, h2)
	for _, c := range []struct {
		n, off int64
	}{
		{2 * kib, off2},           // exact fit
		{3 * kib, off4},           // smallest hole that fits
		{5 * kib, off8},           // only the 8 KiB hole fits
		{2*kib + 1, off8 + 5*kib}, // the 3 KiB left of it
	} {
		b := mustAlloc(t, a, c.n, Activation)
		if b.Offset() != c.off {
			t.Errorf("Alloc(%d) at %d, want %d", c.n, b.Offset(), c.off)
		}
	}
	if m.reserves != 1 {
		t.Errorf("%d segments reserved, want 1", m.reserves)
	}
}

func TestSplitAndMerge(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	x := mustAlloc(t, a, 4*kib, Activation)
	y := mustAlloc(t, a, 4*kib, Activation)
	z := mustAlloc(t, a, 4*kib, Activation)
	free(t, a, y)
	free(t, a, x) // merges with y's hole
	// The merged 8 KiB hole is the best fit for 8 KiB and starts at 0.
	w := mustAlloc(t, a, 8*kib, Activation)
	if w.Offset() != 0 {
		t.Fatalf("merged hole not reused: block at %d", w.Offset())
	}
	free(t, a, w)
	free(t, a, z) // merges with both neighbours: the segment is one free block
	a.EmptyCache()
	check(t, a)
	if m.releases != 1 || len(m.live) != 0 {
		t.Fatalf("after freeing everything, EmptyCache released %d segments, %d live", m.releases, len(m.live))
	}
	if s := a.Stats(); s.ReservedBytes.Current != 0 || s.Segments.Current != 0 {
		t.Fatalf("reserved %d in %d segments after EmptyCache", s.ReservedBytes.Current, s.Segments.Current)
	}
}

func TestEmptyCacheKeepsUsedSegments(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	keep := mustAlloc(t, a, 1000, Activation)
	big := mustAlloc(t, a, 12*mib, Activation)
	free(t, a, big)
	a.EmptyCache()
	check(t, a)
	if m.releases != 1 || len(m.live) != 1 {
		t.Fatalf("released %d segments (live %d), want only the free large one", m.releases, len(m.live))
	}
	if got := a.Stats().ReservedBytes.Current; got != 2*mib {
		t.Fatalf("reserved %d, want 2 MiB (the small segment in use)", got)
	}
	free(t, a, keep)
}

func TestPendingFreeWaitsForEvents(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	s := &fakeStream{name: "d2h"}
	x := mustAlloc(t, a, 4*kib, Activation)
	a.RecordStream(x, s)
	a.RecordStream(x, s) // recording twice is recording once
	off := x.Offset()
	free(t, a, x)
	if len(s.events) != 1 {
		t.Fatalf("Free recorded %d events, want 1", len(s.events))
	}
	st := a.Stats()
	if st.AllocatedBytes.Current != 0 || st.ActiveBytes.Current != 4*kib || st.ActiveBlocks.Current != 1 {
		t.Fatalf("pending block: allocated/active/active blocks %d/%d/%d, want 0/4096/1",
			st.AllocatedBytes.Current, st.ActiveBytes.Current, st.ActiveBlocks.Current)
	}
	y := mustAlloc(t, a, 4*kib, Activation)
	if y.Offset() == off {
		t.Fatalf("a block freed while its stream still used it was handed out again")
	}
	s.events[0].done = true
	if st := a.Stats(); st.ActiveBytes.Current != 4*kib {
		t.Fatalf("after the event passed, active %d, want 4096", st.ActiveBytes.Current)
	}
	check(t, a)
	z := mustAlloc(t, a, 4*kib, Activation)
	if z.Offset() != off {
		t.Fatalf("released block not reused: got %d, want %d", z.Offset(), off)
	}
	if s.events[0].syncs != 0 {
		t.Fatalf("the allocator blocked on an event while memory was plentiful")
	}
}

func TestPendingFreeTwoStreams(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	s1, s2 := &fakeStream{name: "d2h"}, &fakeStream{name: "h2d"}
	x := mustAlloc(t, a, 4*kib, Activation)
	a.RecordStream(x, s1)
	a.RecordStream(x, s2)
	free(t, a, x)
	s1.completeAll()
	if got := a.Stats().ActiveBytes.Current; got != 4*kib {
		t.Fatalf("released after one of two streams passed (active %d)", got)
	}
	s2.completeAll()
	if got := a.Stats().ActiveBytes.Current; got != 0 {
		t.Fatalf("not released after both streams passed (active %d)", got)
	}
	check(t, a)
}

// TestPendingWaitedWhenExhausted: when nothing else fits, the allocator
// waits for pending frees (synchronizing their events) rather than failing.
func TestPendingWaitedWhenExhausted(t *testing.T) {
	for _, limitBy := range []string{"capacity", "system"} {
		t.Run(limitBy, func(t *testing.T) {
			var a *Allocator
			var m *fakeMemory
			if limitBy == "capacity" {
				a, m = newTestAllocator(t, 2*mib)
			} else {
				a, m = newTestAllocator(t, 0)
				m.limit = 2 * mib
			}
			s := &fakeStream{name: "d2h"}
			x := mustAlloc(t, a, mib, Activation)
			y := mustAlloc(t, a, mib, Activation)
			a.RecordStream(x, s)
			free(t, a, x)
			z := mustAlloc(t, a, mib, Activation)
			if z.Offset() != 0 || s.events[0].syncs != 1 {
				t.Fatalf("got block at %d after %d waits, want the pending block at 0 after 1 wait", z.Offset(), s.events[0].syncs)
			}
			if st := a.Stats(); st.OOMs != 0 || st.ActiveBytes.Current != 2*mib {
				t.Fatalf("ooms %d, active %d", st.OOMs, st.ActiveBytes.Current)
			}
			free(t, a, y)
			free(t, a, z)
		})
	}
}

// TestPendingWaitedThenFlushed: the pending block's segment is wholly free
// once the block is released, so it can be flushed to make room for a
// request of another pool.
func TestPendingWaitedThenFlushed(t *testing.T) {
	a, m := newTestAllocator(t, 20*mib)
	s := &fakeStream{name: "d2h"}
	x := mustAlloc(t, a, 1000, Activation)
	a.RecordStream(x, s)
	free(t, a, x)
	b := mustAlloc(t, a, 3*mib, Activation) // needs a 20 MiB segment
	if m.releases != 1 || s.events[0].syncs != 1 {
		t.Fatalf("releases %d, waits %d; want the small segment waited for and released", m.releases, s.events[0].syncs)
	}
	if st := a.Stats(); st.CacheFlushes < 1 || st.ReservedBytes.Current != 20*mib {
		t.Fatalf("flushes %d, reserved %d", st.CacheFlushes, st.ReservedBytes.Current)
	}
	free(t, a, b)
}

func TestOOMAfterFlush(t *testing.T) {
	a, m := newTestAllocator(t, 24*mib)
	x := mustAlloc(t, a, 1000, Parameter) // a 2 MiB small segment
	free(t, a, x)
	y := mustAlloc(t, a, 12*mib, Parameter) // reserved 14 MiB
	// 12 MiB more does not fit beside the cached small segment: flushing it
	// makes room.
	z := mustAlloc(t, a, 12*mib, Activation)
	st := a.Stats()
	if st.CacheFlushes != 1 || m.releases != 1 || st.ReservedBytes.Current != 24*mib {
		t.Fatalf("flushes %d, releases %d, reserved %d; want 1, 1, 24 MiB", st.CacheFlushes, m.releases, st.ReservedBytes.Current)
	}
	// Now nothing is cached: another large block is out of memory.
	_, err := a.Alloc(3*mib, Activation)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("Alloc beyond capacity: %v, want *OutOfMemoryError", err)
	}
	if oom.Requested != 3*mib || oom.Category != Activation || oom.Device != "fake" {
		t.Errorf("OOM carries requested %d, category %v, device %q", oom.Requested, oom.Category, oom.Device)
	}
	if oom.Stats.AllocatedBytes.Current != 24*mib || oom.Stats.OOMs != 1 || oom.Stats.Capacity != 24*mib {
		t.Errorf("OOM stats: allocated %d, ooms %d, capacity %d", oom.Stats.AllocatedBytes.Current, oom.Stats.OOMs, oom.Stats.Capacity)
	}
	if oom.Free != 0 || oom.FreeCached != 0 {
		t.Errorf("free %d, free cached %d, want 0, 0", oom.Free, oom.FreeCached)
	}
	for _, want := range []string{"fake out of memory", "tried to allocate 3.00 MiB", "24.00 MiB allocated", "24.00 MiB capacity", "offload"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if st := a.Stats(); st.OOMs != 1 {
		t.Errorf("num_ooms %d, want 1", st.OOMs)
	}
	check(t, a)
	// Freeing makes room again.
	free(t, a, y)
	w := mustAlloc(t, a, 3*mib, Activation)
	free(t, a, w)
	free(t, a, z)
}

func TestOOMFragmented(t *testing.T) {
	a, _ := newTestAllocator(t, 2*mib)
	var bs []*Block
	for i := 0; i < 4; i++ {
		bs = append(bs, mustAlloc(t, a, 512*kib, Activation))
	}
	free(t, a, bs[0])
	free(t, a, bs[2])
	_, err := a.Alloc(mib, Activation)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want OOM", err)
	}
	if oom.FreeCached != mib {
		t.Errorf("free cached %d, want 1 MiB in two unusable holes", oom.FreeCached)
	}
	if !strings.Contains(err.Error(), "1.00 MiB cached but unusable") {
		t.Errorf("message %q does not name the fragmented cache", err)
	}
}

func TestSystemOOM(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	x := mustAlloc(t, a, 1000, Activation)
	free(t, a, x)
	// The system refuses once: the cache is flushed and the retry succeeds.
	m.failNext = 1
	y := mustAlloc(t, a, 12*mib, Activation)
	if st := a.Stats(); st.CacheFlushes != 1 || st.OOMs != 0 || m.releases != 1 {
		t.Fatalf("flushes %d, ooms %d, releases %d", st.CacheFlushes, st.OOMs, m.releases)
	}
	// The system refuses twice: out of memory, wrapping the system's error.
	m.failNext = 2
	_, err := a.Alloc(12*mib, Activation)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, errFakeReserve) {
		t.Fatalf("got %v, want an OOM wrapping the system error", err)
	}
	if !strings.Contains(err.Error(), "fake: no memory") {
		t.Errorf("message %q lacks the system's reason", err)
	}
	free(t, a, y)
}

func TestAllocZero(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	for _, n := range []int64{0, -1} {
		if _, err := a.Alloc(n, Activation); err == nil {
			t.Errorf("Alloc(%d) succeeded", n)
		}
	}
}

func TestStatsAndFlatKeys(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	p := mustAlloc(t, a, 1000, Parameter)      // 1024
	g := mustAlloc(t, a, 3000, Gradient)       // 3072
	x := mustAlloc(t, a, 12*mib+1, Activation) // 12 MiB + 512, in a 14 MiB segment
	free(t, a, x)
	st := a.Stats()
	want := map[string]int64{
		"allocated_bytes.all.current":        4096,
		"allocated_bytes.all.peak":           4096 + 12*mib + 512,
		"allocated_bytes.all.allocated":      4096 + 12*mib + 512,
		"allocated_bytes.all.freed":          12*mib + 512,
		"reserved_bytes.all.current":         16 * mib,
		"reserved_bytes.all.peak":            16 * mib,
		"active_bytes.all.current":           4096,
		"requested_bytes.all.current":        4000,
		"requested_bytes.all.peak":           4000 + 12*mib + 1,
		"allocation.all.current":             2,
		"allocation.all.peak":                3,
		"allocation.all.allocated":           3,
		"allocation.all.freed":               1,
		"segment.all.current":                2,
		"active.all.current":                 2,
		"allocated_bytes.parameter.current":  1024,
		"allocated_bytes.gradient.current":   3072,
		"allocated_bytes.activation.current": 0,
		"allocated_bytes.activation.peak":    12*mib + 512,
		"allocated_bytes.workspace.peak":     0,
		"num_alloc_retries":                  0,
		"num_ooms":                           0,
		"capacity_bytes":                     0,
	}
	flat := st.Flat()
	for k, v := range want {
		got, ok := flat[k]
		if !ok {
			t.Errorf("flat stats lack %q", k)
		} else if got != v {
			t.Errorf("%s = %d, want %d", k, got, v)
		}
	}
	for c := Category(0); c < NumCategories; c++ {
		if _, ok := flat["allocated_bytes."+c.String()+".current"]; !ok {
			t.Errorf("no key for category %v", c)
		}
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]int64
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != len(flat) || back["allocated_bytes.all.peak"] != flat["allocated_bytes.all.peak"] {
		t.Errorf("JSON %s differs from Flat", js)
	}
	if s := st.String(); !strings.Contains(s, "4.00 KiB allocated (peak 12.00 MiB)") || !strings.Contains(s, "16.00 MiB reserved") {
		t.Errorf("String() = %q", s)
	}
	if a.Allocated() != 4096 {
		t.Errorf("Allocated() = %d", a.Allocated())
	}
	free(t, a, p)
	free(t, a, g)
}

func TestResetPeak(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	x := mustAlloc(t, a, 8*kib, Parameter)
	y := mustAlloc(t, a, 8*kib, Activation)
	free(t, a, y)
	before := a.Stats()
	a.ResetPeak()
	st := a.Stats()
	if st.AllocatedBytes.Peak != 8*kib || st.ActiveBytes.Peak != 8*kib || st.RequestedBytes.Peak != 8*kib ||
		st.Allocations.Peak != 1 || st.ActiveBlocks.Peak != 1 || st.Segments.Peak != 1 || st.ReservedBytes.Peak != 2*mib {
		t.Errorf("peaks after reset: %+v", st)
	}
	if st.ByCategory[Activation].Peak != 0 || st.ByCategory[Parameter].Peak != 8*kib {
		t.Errorf("category peaks after reset: activation %d, parameter %d", st.ByCategory[Activation].Peak, st.ByCategory[Parameter].Peak)
	}
	// Running totals are untouched.
	if st.AllocatedBytes.Allocated != before.AllocatedBytes.Allocated || st.AllocatedBytes.Freed != before.AllocatedBytes.Freed ||
		st.Allocations.Allocated != 2 {
		t.Errorf("reset changed totals: %+v", st.AllocatedBytes)
	}
	z := mustAlloc(t, a, 4*kib, Activation)
	if st := a.Stats(); st.AllocatedBytes.Peak != 12*kib {
		t.Errorf("peak after reset and a new allocation: %d, want 12 KiB", st.AllocatedBytes.Peak)
	}
	free(t, a, z)
	free(t, a, x)
}

func TestSetCategory(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	x := mustAlloc(t, a, 4*kib, Gradient)
	a.SetCategory(x, Parameter)
	check(t, a)
	st := a.Stats()
	if st.ByCategory[Gradient].Current != 0 || st.ByCategory[Parameter].Current != 4*kib || x.Category() != Parameter {
		t.Fatalf("after SetCategory: gradient %d, parameter %d, block %v", st.ByCategory[Gradient].Current, st.ByCategory[Parameter].Current, x.Category())
	}
	a.SetCategory(x, Parameter) // no change
	if st := a.Stats(); st.ByCategory[Parameter].Current != 4*kib {
		t.Fatalf("SetCategory to the same category changed the count")
	}
	free(t, a, x)
	if st := a.Stats(); st.ByCategory[Parameter].Current != 0 || st.ByCategory[Gradient].Current != 0 {
		t.Fatalf("free did not take the bytes from the new category")
	}
	mustPanic(t, "SetCategory after free", func() { a.SetCategory(x, Gradient) })
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	fn()
}

func TestDoubleFreePanics(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	x := mustAlloc(t, a, 100, Activation)
	free(t, a, x)
	mustPanic(t, "double free", func() { a.Free(x) })
	mustPanic(t, "RecordStream after free", func() { a.RecordStream(x, &fakeStream{}) })
	// A pending block is not allocated either.
	s := &fakeStream{}
	y := mustAlloc(t, a, 100, Activation)
	a.RecordStream(y, s)
	free(t, a, y)
	mustPanic(t, "free of a pending block", func() { a.Free(y) })
	check(t, a)
}

// A ForeignBlock reads as a block over its segment and belongs to no
// allocator: freeing it, or handing it to a stream, is refused.
func TestForeignBlock(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	seg := []byte("0123456789")
	b := ForeignBlock(seg, 2, 5)
	if got, ok := b.Segment().([]byte); !ok || &got[0] != &seg[0] || b.Offset() != 2 || b.Size() != 5 || b.Requested() != 5 {
		t.Errorf("ForeignBlock(seg, 2, 5): segment %v, offset %d, size %d", b.Segment(), b.Offset(), b.Size())
	}
	mustPanic(t, "Free of a foreign block", func() { a.Free(b) })
	mustPanic(t, "RecordStream of a foreign block", func() { a.RecordStream(b, &fakeStream{}) })
	check(t, a)
}

func TestPoisonOnReuse(t *testing.T) {
	m := newFakeMemory()
	a := NewAllocator(m, AllocatorConfig{Name: "fake", PoisonFreed: true})
	x := mustAlloc(t, a, 1000, Activation)
	s := &fakeStream{}
	a.RecordStream(x, s)
	free(t, a, x)
	if len(m.poisoned) != 0 {
		t.Fatalf("a pending block was poisoned while a stream may read it")
	}
	s.completeAll()
	a.Stats()
	if len(m.poisoned) != 1 || m.poisoned[0].off != 0 || m.poisoned[0].n != 1024 {
		t.Fatalf("poison calls %+v, want one of 1024 bytes at 0", m.poisoned)
	}
}

func TestObserve(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	var evs []AllocEvent
	a.Observe(func(e AllocEvent) { evs = append(evs, e) })
	x := mustAlloc(t, a, 1000, Parameter)
	y := mustAlloc(t, a, 100, Activation)
	free(t, a, x)
	a.Observe(nil)
	free(t, a, y)
	want := []AllocEvent{
		{Alloc: true, Bytes: 1024, Category: Parameter, Allocated: 1024},
		{Alloc: true, Bytes: 512, Category: Activation, Allocated: 1536},
		{Alloc: false, Bytes: 1024, Category: Parameter, Allocated: 512},
	}
	if fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", evs, want)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	a, m := newTestAllocator(t, 0)
	mustAlloc(t, a, 100, Activation)
	x := mustAlloc(t, a, 12*mib, Activation)
	s := &fakeStream{}
	a.RecordStream(x, s)
	free(t, a, x)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(m.live) != 0 || m.releases != m.reserves {
		t.Fatalf("after Close %d segments live (%d reserved, %d released)", len(m.live), m.reserves, m.releases)
	}
	if s.events[0].syncs != 1 {
		t.Fatalf("Close did not wait for the pending free")
	}
}

// TestAllocatorRandomized runs many random operations with a fixed seed,
// checking the allocator's invariants after each one and its statistics
// against a model: no two live blocks overlap, allocated and requested bytes
// match the blocks handed out, reserved bytes match what Memory holds.
func TestAllocatorRandomized(t *testing.T) {
	ops := 10000
	if testing.Short() {
		ops = 2000
	}
	for _, capacity := range []int64{0, 48 * mib} {
		t.Run(fmt.Sprintf("capacity=%d", capacity), func(t *testing.T) {
			randomized(t, rand.New(rand.NewSource(1)), capacity, ops)
		})
	}
}

func randomized(t *testing.T, r *rand.Rand, capacity int64, ops int) {
	a, m := newTestAllocator(t, capacity)
	streams := []*fakeStream{{name: "d2h"}, {name: "h2d"}}
	var live []*Block
	var sized, requested int64
	var byCat [NumCategories]int64
	randSize := func() int64 {
		switch r.Intn(10) {
		case 0, 1:
			return 1 + r.Int63n(512)
		case 2, 3, 4, 5:
			return 1 + r.Int63n(64*kib)
		case 6, 7:
			return 1 + r.Int63n(mib+mib/2)
		case 8:
			return 1 + r.Int63n(10*mib)
		default:
			return 1 + r.Int63n(30*mib)
		}
	}
	ooms := int64(0)
	// Blocks freed while a stream used them, with the events Free recorded:
	// until those complete, no new block may overlap them.
	type inUse struct {
		seg       Segment
		off, size int64
		events    []*fakeEvent
	}
	var pending []inUse
	for i := 0; i < ops; i++ {
		op := r.Intn(100)
		switch {
		case (op < 45 && len(live) < 300) || len(live) == 0: // bounded, so each check stays cheap
			n := randSize()
			cat := Category(r.Intn(int(NumCategories)))
			b, err := a.Alloc(n, cat)
			if err != nil {
				var oom *OutOfMemoryError
				if capacity == 0 || !errors.As(err, &oom) {
					t.Fatalf("op %d: Alloc(%d): %v", i, n, err)
				}
				ooms++
				break
			}
			if b.Requested() != n || b.Size() < RoundSize(n) || b.Category() != cat {
				t.Fatalf("op %d: block %d/%d/%v for a request of %d %v", i, b.Requested(), b.Size(), b.Category(), n, cat)
			}
			for _, o := range live {
				if o.Segment() == b.Segment() && o.Offset() < b.Offset()+b.Size() && b.Offset() < o.Offset()+o.Size() {
					t.Fatalf("op %d: block [%d,+%d) overlaps live block [%d,+%d)", i, b.Offset(), b.Size(), o.Offset(), o.Size())
				}
			}
			kept := pending[:0]
			for _, p := range pending {
				done := true
				for _, e := range p.events {
					done = done && e.done
				}
				if done {
					continue
				}
				if p.seg == b.Segment() && p.off < b.Offset()+b.Size() && b.Offset() < p.off+p.size {
					t.Fatalf("op %d: block [%d,+%d) overlaps [%d,+%d), freed while a stream still uses it", i, b.Offset(), b.Size(), p.off, p.size)
				}
				kept = append(kept, p)
			}
			pending = kept
			live = append(live, b)
			sized += b.Size()
			requested += n
			byCat[cat] += b.Size()
		case op < 85:
			j := r.Intn(len(live))
			b := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			var st *fakeStream
			if r.Intn(3) == 0 {
				st = streams[r.Intn(len(streams))]
				a.RecordStream(b, st)
			}
			sized -= b.Size()
			requested -= b.Requested()
			byCat[b.Category()] -= b.Size()
			p := inUse{seg: b.Segment(), off: b.Offset(), size: b.Size()}
			var n0 int
			if st != nil {
				n0 = len(st.events)
			}
			a.Free(b)
			if st != nil {
				p.events = st.events[n0:]
				if len(p.events) != 1 {
					t.Fatalf("op %d: Free of a block one stream used recorded %d events", i, len(p.events))
				}
				pending = append(pending, p)
			}
		case op < 92:
			s := streams[r.Intn(len(streams))]
			for _, e := range s.events {
				if r.Intn(2) == 0 {
					e.done = true
				}
			}
		case op < 95:
			b := live[r.Intn(len(live))]
			cat := Category(r.Intn(int(NumCategories)))
			byCat[b.Category()] -= b.Size()
			byCat[cat] += b.Size()
			a.SetCategory(b, cat)
		case op < 97:
			a.EmptyCache()
		default:
			a.ResetPeak()
		}
		if err := a.CheckInvariants(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		st := a.Stats()
		if st.AllocatedBytes.Current != sized || st.RequestedBytes.Current != requested || st.Allocations.Current != int64(len(live)) {
			t.Fatalf("op %d: stats say %d bytes (%d requested) in %d blocks, model %d (%d) in %d",
				i, st.AllocatedBytes.Current, st.RequestedBytes.Current, st.Allocations.Current, sized, requested, len(live))
		}
		for c := range byCat {
			if st.ByCategory[c].Current != byCat[c] {
				t.Fatalf("op %d: category %v has %d, model %d", i, Category(c), st.ByCategory[c].Current, byCat[c])
			}
		}
		if st.ReservedBytes.Current != m.liveBytes() || (capacity > 0 && st.ReservedBytes.Current > capacity) {
			t.Fatalf("op %d: reserved %d, memory holds %d, capacity %d", i, st.ReservedBytes.Current, m.liveBytes(), capacity)
		}
		if st.Segments.Current != int64(len(m.live)) || st.ActiveBlocks.Current < st.Allocations.Current || st.ActiveBytes.Current < st.AllocatedBytes.Current {
			t.Fatalf("op %d: %d segments (memory holds %d), %d active blocks for %d allocated, active bytes %d for %d allocated",
				i, st.Segments.Current, len(m.live), st.ActiveBlocks.Current, st.Allocations.Current, st.ActiveBytes.Current, st.AllocatedBytes.Current)
		}
		if st.OOMs != ooms {
			t.Fatalf("op %d: num_ooms %d, model %d", i, st.OOMs, ooms)
		}
		if st.AllocatedBytes.Peak < st.AllocatedBytes.Current || st.ReservedBytes.Peak < st.ReservedBytes.Current {
			t.Fatalf("op %d: a peak below its current value", i)
		}
	}
	if capacity > 0 && ooms == 0 {
		t.Errorf("capacity %d never ran out: the test does not exercise OOM", capacity)
	}
	for _, b := range live {
		a.Free(b)
	}
	for _, s := range streams {
		s.completeAll()
	}
	a.EmptyCache()
	check(t, a)
	if st := a.Stats(); st.ReservedBytes.Current != 0 || st.ActiveBytes.Current != 0 || len(m.live) != 0 {
		t.Fatalf("after freeing everything and EmptyCache: reserved %d, active %d, %d segments live",
			st.ReservedBytes.Current, st.ActiveBytes.Current, len(m.live))
	}
}
