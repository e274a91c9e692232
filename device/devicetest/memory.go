package devicetest

import (
	"errors"
	"strings"

	"ferry/device"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

var memoryTests = []test{
	{name: "Stats", fn: testStats},
	{name: "SetCategory", fn: testSetCategory},
	{name: "CapacityFlushAndOOM", fn: testCapacity},
	{name: "HostAllocator", fn: testHostAllocator},
	{name: "RecordStreamDelaysReuse", fn: testRecordStream, needsSlowCopy: true},
	{name: "PendingWaitedWhenFull", fn: testPendingWhenFull, needsSlowCopy: true},
	{name: "PoisonFreed", fn: testPoison, needsData: true},
}

// delta is after minus before, for the statistics a test changes; the
// device may hold memory of its own (a library's workspace) from the start.
func delta(before, after device.Stat) int64 { return after.Current - before.Current }

func testStats(e *env) {
	a := e.dev.Allocator()
	base := a.Stats()
	p := e.alloc(e.dev, 1000, device.Parameter)
	g := e.alloc(e.dev, 3000, device.Gradient)
	x := e.alloc(e.dev, 12*mib+1, device.Activation)
	for _, b := range []*device.Block{p, g, x} {
		if b.Size() != device.RoundSize(b.Requested()) && b.Requested() < mib {
			e.Errorf("block of %d bytes has size %d, want %d", b.Requested(), b.Size(), device.RoundSize(b.Requested()))
		}
	}
	if p.Requested() != 1000 || p.Category() != device.Parameter || x.Size() < 12*mib+512 {
		e.Errorf("blocks: p %d/%v, x size %d", p.Requested(), p.Category(), x.Size())
	}
	sizes := p.Size() + g.Size() + x.Size()
	st := a.Stats()
	for _, c := range []struct {
		name        string
		before, now device.Stat
		want        int64
	}{
		{"allocated_bytes", base.AllocatedBytes, st.AllocatedBytes, sizes},
		{"active_bytes", base.ActiveBytes, st.ActiveBytes, sizes},
		{"requested_bytes", base.RequestedBytes, st.RequestedBytes, 4000 + 12*mib + 1},
		{"allocation", base.Allocations, st.Allocations, 3},
		{"active", base.ActiveBlocks, st.ActiveBlocks, 3},
		{"allocated_bytes.parameter", base.ByCategory[device.Parameter], st.ByCategory[device.Parameter], p.Size()},
		{"allocated_bytes.gradient", base.ByCategory[device.Gradient], st.ByCategory[device.Gradient], g.Size()},
		{"allocated_bytes.activation", base.ByCategory[device.Activation], st.ByCategory[device.Activation], x.Size()},
		{"allocated_bytes.temporary", base.ByCategory[device.Temporary], st.ByCategory[device.Temporary], 0},
	} {
		if d := delta(c.before, c.now); d != c.want {
			e.Errorf("%s grew by %d, want %d", c.name, d, c.want)
		}
		if c.now.Peak < c.now.Current {
			e.Errorf("%s: peak %d below current %d", c.name, c.now.Peak, c.now.Current)
		}
	}
	if st.ReservedBytes.Current < st.AllocatedBytes.Current || st.ReservedBytes.Current < base.ReservedBytes.Current+12*mib {
		e.Errorf("reserved %d for %d allocated", st.ReservedBytes.Current, st.AllocatedBytes.Current)
	}
	if st.Segments.Current < 1 || a.Allocated() != st.AllocatedBytes.Current {
		e.Errorf("segments %d, Allocated() %d", st.Segments.Current, a.Allocated())
	}
	flat := st.Flat()
	for k, v := range map[string]int64{
		"allocated_bytes.all.current":       st.AllocatedBytes.Current,
		"allocated_bytes.all.peak":          st.AllocatedBytes.Peak,
		"reserved_bytes.all.current":        st.ReservedBytes.Current,
		"active_bytes.all.current":          st.ActiveBytes.Current,
		"requested_bytes.all.current":       st.RequestedBytes.Current,
		"allocation.all.allocated":          st.Allocations.Allocated,
		"allocated_bytes.parameter.current": st.ByCategory[device.Parameter].Current,
		"num_ooms":                          0,
	} {
		if flat[k] != v {
			e.Errorf("Flat()[%q] = %d, want %d", k, flat[k], v)
		}
	}

	// Free the large block: allocated falls, the peak stays, reserved
	// stays (the segment is cached).
	peak := st.AllocatedBytes.Peak
	xSize := x.Size() // a freed block must not be touched
	a.Free(x)
	st2 := a.Stats()
	if st2.AllocatedBytes.Current != st.AllocatedBytes.Current-xSize || st2.AllocatedBytes.Peak != peak {
		e.Errorf("after Free: allocated %d (peak %d), want %d (peak %d)",
			st2.AllocatedBytes.Current, st2.AllocatedBytes.Peak, st.AllocatedBytes.Current-xSize, peak)
	}
	if st2.ReservedBytes.Current != st.ReservedBytes.Current {
		e.Errorf("Free changed reserved bytes %d → %d; a caching allocator keeps them", st.ReservedBytes.Current, st2.ReservedBytes.Current)
	}
	if st2.Allocations.Freed != st.Allocations.Freed+1 || st2.AllocatedBytes.Freed != st.AllocatedBytes.Freed+xSize {
		e.Errorf("freed totals: %d blocks, %d bytes", st2.Allocations.Freed-st.Allocations.Freed, st2.AllocatedBytes.Freed-st.AllocatedBytes.Freed)
	}

	// ResetPeak brings peaks down to current values.
	a.ResetPeak()
	st3 := a.Stats()
	if st3.AllocatedBytes.Peak != st3.AllocatedBytes.Current || st3.ByCategory[device.Activation].Peak != st3.ByCategory[device.Activation].Current ||
		st3.ReservedBytes.Peak != st3.ReservedBytes.Current {
		e.Errorf("after ResetPeak: allocated %d peak %d, reserved %d peak %d",
			st3.AllocatedBytes.Current, st3.AllocatedBytes.Peak, st3.ReservedBytes.Current, st3.ReservedBytes.Peak)
	}

	// EmptyCache gives the free segment back.
	a.EmptyCache()
	st4 := a.Stats()
	if st4.ReservedBytes.Current > st3.ReservedBytes.Current-12*mib {
		e.Errorf("EmptyCache lowered reserved bytes from %d only to %d", st3.ReservedBytes.Current, st4.ReservedBytes.Current)
	}
	if st4.AllocatedBytes.Current != st3.AllocatedBytes.Current || st4.ReservedBytes.Current < st4.AllocatedBytes.Current {
		e.Errorf("after EmptyCache: allocated %d, reserved %d", st4.AllocatedBytes.Current, st4.ReservedBytes.Current)
	}
	a.Free(p)
	a.Free(g)
	if st5 := a.Stats(); st5.AllocatedBytes.Current != base.AllocatedBytes.Current || st5.RequestedBytes.Current != base.RequestedBytes.Current {
		e.Errorf("after freeing everything: allocated %d, requested %d; at the start %d, %d",
			st5.AllocatedBytes.Current, st5.RequestedBytes.Current, base.AllocatedBytes.Current, base.RequestedBytes.Current)
	}
	if err := a.CheckInvariants(); err != nil {
		e.Error(err)
	}
}

func testSetCategory(e *env) {
	a := e.dev.Allocator()
	base := a.Stats()
	b := e.alloc(e.dev, 4096, device.Gradient)
	a.SetCategory(b, device.Parameter)
	st := a.Stats()
	if delta(base.ByCategory[device.Gradient], st.ByCategory[device.Gradient]) != 0 ||
		delta(base.ByCategory[device.Parameter], st.ByCategory[device.Parameter]) != 4096 || b.Category() != device.Parameter {
		e.Errorf("SetCategory did not move 4096 bytes from gradient to parameter")
	}
	a.Free(b)
	if st := a.Stats(); st.ByCategory[device.Parameter].Current != base.ByCategory[device.Parameter].Current {
		e.Errorf("Free did not take the bytes from the block's new category")
	}
}

// testCapacity opens the device with room for 24 MiB beyond what it holds
// when opened, fills it, and checks the out-of-memory error; then frees
// everything and asks for a block that fits only once the cache is flushed.
func testCapacity(e *env) {
	base := e.dev.Allocator().Stats().ReservedBytes.Current
	capacity := base + 24*mib
	e.reopen(device.Options{Capacity: capacity})
	a := e.dev.Allocator()
	if got := a.Stats().Capacity; got != capacity {
		e.Errorf("Stats().Capacity = %d, want %d", got, capacity)
	}
	var held []*device.Block
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		var b *device.Block
		if b, err = a.Alloc(12*mib, device.Activation); err == nil {
			held = append(held, b)
		}
	}
	if err == nil || len(held) == 0 {
		e.Fatalf("with a capacity of %d, %d blocks of 12 MiB fit", capacity, len(held))
	}
	var oom *device.OutOfMemoryError
	if !errors.As(err, &oom) {
		e.Fatalf("allocation beyond capacity: %v (%T), want a *device.OutOfMemoryError", err, err)
	}
	if oom.Requested != 12*mib || oom.Category != device.Activation {
		e.Errorf("OOM error: requested %d, category %v", oom.Requested, oom.Category)
	}
	if oom.Stats.OOMs != 1 || oom.Stats.Capacity != capacity || oom.Stats.ReservedBytes.Current > capacity ||
		oom.Stats.AllocatedBytes.Current < int64(len(held))*12*mib {
		e.Errorf("OOM error carries stats %+v", oom.Stats)
	}
	msg := err.Error()
	for _, want := range []string{"out of memory", "tried to allocate 12.00 MiB", "activation", "capacity", device.FormatBytes(capacity)} {
		if !strings.Contains(msg, want) {
			e.Errorf("OOM message %q lacks %q", msg, want)
		}
	}
	if st := a.Stats(); st.OOMs != 1 || st.ReservedBytes.Current > capacity {
		e.Errorf("after OOM: num_ooms %d, reserved %d of %d", st.OOMs, st.ReservedBytes.Current, capacity)
	}
	// Freed blocks stay cached; a block of another size fits only after the
	// cache is flushed.
	flushes := a.Stats().CacheFlushes
	for _, b := range held {
		a.Free(b)
	}
	b, err := a.Alloc(16*mib, device.Activation)
	e.ok(err, "Alloc(16 MiB) with %d MiB cached in a capacity of %d", 12*len(held), capacity)
	st := a.Stats()
	if st.CacheFlushes <= flushes {
		e.Errorf("num_alloc_retries stayed %d: the cache was not flushed", st.CacheFlushes)
	}
	if st.ReservedBytes.Current > capacity || st.OOMs != 1 {
		e.Errorf("after flush: reserved %d of %d, ooms %d", st.ReservedBytes.Current, capacity, st.OOMs)
	}
	a.Free(b)
	if err := a.CheckInvariants(); err != nil {
		e.Error(err)
	}
}

func testHostAllocator(e *env) {
	h := e.dev.Host()
	if h == nil {
		e.Fatal("Host() is nil")
	}
	if h.Allocator() == e.dev.Allocator() {
		e.Fatal("Host() shares the device's allocator: device and host bytes must be counted apart")
	}
	if h.Name() == e.dev.Name() {
		e.Errorf("host and device are both named %q", h.Name())
	}
	if e.dev.Host() != h {
		e.Errorf("Host() returns a new device on each call")
	}
	devBefore, hostBefore := e.dev.Allocator().Stats(), h.Allocator().Stats()
	b := e.alloc(h, mib, device.Activation)
	devAfter, hostAfter := e.dev.Allocator().Stats(), h.Allocator().Stats()
	if delta(devBefore.AllocatedBytes, devAfter.AllocatedBytes) != 0 {
		e.Errorf("a host allocation changed the device's allocated bytes")
	}
	if delta(hostBefore.AllocatedBytes, hostAfter.AllocatedBytes) != mib {
		e.Errorf("a host allocation of 1 MiB grew the host's allocated bytes by %d", delta(hostBefore.AllocatedBytes, hostAfter.AllocatedBytes))
	}
	h.Allocator().Free(b)
}

// sideCopy enqueues on s a copy of src into a new host block and returns
// that block and an event that completes with the copy.
func (e *env) sideCopy(s device.Stream, src *device.Block) (*device.Block, device.Event) {
	e.Helper()
	dst := e.alloc(e.dev.Host(), src.Requested(), device.Activation)
	e.ok(e.dev.Copy(s, device.Whole(dst), device.Whole(src)), "Copy")
	return dst, s.Record()
}

// testRecordStream: a block read by a slow copy on a side stream, recorded
// and freed, is not handed out again (nor poisoned) before the copy ends.
func testRecordStream(e *env) {
	opts := e.slowOpts()
	opts.PoisonFreed = true // an early release would also poison the source
	e.reopen(opts)
	a := e.dev.Allocator()
	s, err := e.dev.NewStream("d2h")
	e.ok(err, "NewStream")
	src := e.tensor([]int{1024}, fill(1024, 1))
	s.Wait(e.dev.Compute().Record()) // the copy reads what compute wrote
	before := a.Stats()
	host, done := e.sideCopy(s, src.Block)
	a.RecordStream(src.Block, s)
	a.Free(src.Block)
	if done.Done() {
		e.Fatalf("a copy under %v finished at once: Caps.SlowCopy does not make copies slow", e.caps.SlowCopy)
	}
	st := a.Stats()
	if delta(before.AllocatedBytes, st.AllocatedBytes) != -src.Block.Size() || delta(before.ActiveBytes, st.ActiveBytes) != 0 {
		e.Errorf("a freed block still in use: allocated changed by %d (want %d), active by %d (want 0)",
			delta(before.AllocatedBytes, st.AllocatedBytes), -src.Block.Size(), delta(before.ActiveBytes, st.ActiveBytes))
	}
	reuse := e.tensor([]int{1024}, nil)
	if !done.Done() && overlaps(reuse.Block, src.Block) {
		e.Fatalf("a block freed while a side stream still read it was handed out again before the stream passed")
	}
	e.ok(e.k.Fill(reuse, 2), "Fill")
	e.ok(s.Synchronize(), "Synchronize") // past the event Free recorded, too
	e.near("copy of a recorded, freed block", e.readOn(e.dev.Host(), flat(host, 1024)), f64(fill(1024, 1)))
	if st := a.Stats(); st.ActiveBytes.Current != st.AllocatedBytes.Current+(before.ActiveBytes.Current-before.AllocatedBytes.Current) {
		e.Errorf("after the stream passed, active %d, allocated %d: the pending block was not released",
			st.ActiveBytes.Current, st.AllocatedBytes.Current)
	}
	if err := a.CheckInvariants(); err != nil {
		e.Error(err)
	}
}

// testPendingWhenFull: with the device full, an allocation waits for a
// pending free rather than failing, and gets the block only after the side
// stream has passed.
func testPendingWhenFull(e *env) {
	base := e.dev.Allocator().Stats().ReservedBytes.Current
	opts := e.slowOpts()
	opts.Capacity = base + 4*mib
	e.reopen(opts)
	a := e.dev.Allocator()
	s, err := e.dev.NewStream("d2h")
	e.ok(err, "NewStream")
	var held []*device.Block
	for i := 0; i < 64; i++ {
		b, err := a.Alloc(mib, device.Activation)
		if err != nil {
			break
		}
		held = append(held, b)
	}
	if len(held) == 0 || len(held) == 64 {
		e.Fatalf("%d blocks of 1 MiB fit in a capacity of %d", len(held), opts.Capacity)
	}
	victim := held[0]
	e.upload(e.dev, flat(victim, 256*1024), fill(256*1024, 5))
	s.Wait(e.dev.Compute().Record())
	host, done := e.sideCopy(s, victim)
	a.RecordStream(victim, s)
	a.Free(victim)
	oomsBefore := a.Stats().OOMs
	b, err := a.Alloc(mib, device.Activation)
	e.ok(err, "Alloc with the device full and a pending free")
	if !done.Done() {
		e.Errorf("the allocation returned before the stream using the freed block passed")
	}
	if a.Stats().OOMs != oomsBefore {
		e.Errorf("the allocation counted an OOM")
	}
	e.ok(e.k.Fill(flat(b, 256*1024), 7), "Fill")
	e.near("copy", e.readOn(e.dev.Host(), flat(host, 256*1024)), f64(fill(256*1024, 5)))
	if err := a.CheckInvariants(); err != nil {
		e.Error(err)
	}
}

// testPoison: with PoisonFreed, a block handed out again holds NaNs.
func testPoison(e *env) {
	e.reopen(device.Options{PoisonFreed: true})
	a := e.dev.Allocator()
	x := e.tensor([]int{1024}, fill(1024, 1))
	a.Free(x.Block)
	y := e.tensor([]int{1024}, nil)
	if !overlaps(x.Block, y.Block) {
		e.Skip("the freed block was not reused; nothing to check")
	}
	got := e.read(y)
	for i, v := range got {
		if v == v {
			e.Fatalf("reused block holds %v at %d, want NaN (PoisonFreed)", v, i)
		}
	}
	// The host shares the poisoning.
	h := e.dev.Host()
	hx := e.tensorOn(h, []int{256}, fill(256, 1))
	h.Allocator().Free(hx.Block)
	hy := e.tensorOn(h, []int{256}, nil)
	if overlaps(hx.Block, hy.Block) {
		for i, v := range e.readOn(h, hy) {
			if v == v {
				e.Fatalf("reused host block holds %v at %d, want NaN", v, i)
			}
		}
	}
}
