package device

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// After Close an allocator refuses memory with ErrClosed and lets go of
// blocks quietly: they went with it.
func TestAllocatorAfterClose(t *testing.T) {
	a, mem := newTestAllocator(t, 0)
	b := mustAlloc(t, a, 1000, Activation)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(mem.live) != 0 {
		t.Fatalf("%d segments live after Close", len(mem.live))
	}
	if !a.Closed() {
		t.Fatal("Closed is false after Close")
	}
	if _, err := a.Alloc(1000, Activation); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close: %v, want ErrClosed", err)
	}
	a.SetCategory(b, Parameter)
	a.RecordStream(b, &fakeStream{name: "side"})
	a.Free(b)
	a.Free(b) // twice: still nothing to free
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if mem.reserves != 1 || len(mem.live) != 0 {
		t.Fatalf("after Close: %d reserves, %d live segments; want 1 and 0", mem.reserves, len(mem.live))
	}
}

// Sizes past MaxBytes never reach the rounding arithmetic.
func TestAllocTooLarge(t *testing.T) {
	a, mem := newTestAllocator(t, 0)
	for _, n := range []int64{MaxBytes + 1, 1<<63 - 1} {
		if _, err := a.Alloc(n, Activation); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Alloc(%d): %v, want ErrTooLarge", n, err)
		}
	}
	if mem.reserves != 0 {
		t.Errorf("%d reserves for sizes no device holds", mem.reserves)
	}
}

// One allocator never reserves more than MaxBytes in all, so its
// statistics cannot overflow; running totals saturate.
func TestReservedStaysBelowMaxBytes(t *testing.T) {
	a, _ := newTestAllocator(t, 0)
	var err error
	for i := 0; i < 4 && err == nil; i++ {
		_, err = a.Alloc(MaxBytes/3, Activation)
	}
	if _, ok := errors.AsType[*OutOfMemoryError](err); !ok || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a fourth third of MaxBytes: %v, want an out-of-memory error wrapping ErrTooLarge", err)
	}
	if r := a.Stats().ReservedBytes.Current; r <= 0 || r > MaxBytes {
		t.Fatalf("reserved %d", r)
	}
	var s Stat
	for range 10 {
		s.add(MaxBytes)
		s.sub(MaxBytes)
	}
	if s.Allocated != math.MaxInt64 || s.Freed != math.MaxInt64 || s.Current != 0 {
		t.Fatalf("running totals wrapped: %+v", s)
	}
}

// Allocators of one name are numbered apart.
func TestAllocatorInstances(t *testing.T) {
	a := NewAllocator(newFakeMemory(), AllocatorConfig{Name: "instance-test"})
	b := NewAllocator(newFakeMemory(), AllocatorConfig{Name: "instance-test"})
	c := NewAllocator(newFakeMemory(), AllocatorConfig{Name: "instance-test-other"})
	if a.instance != 1 || b.instance != 2 || c.instance != 1 {
		t.Fatalf("instances %d, %d, %d; want 1, 2, 1", a.instance, b.instance, c.instance)
	}
}

// The advice of an out-of-memory error fits what the memory is for.
func TestOutOfMemoryAdvice(t *testing.T) {
	for cat := Category(0); cat < NumCategories; cat++ {
		e := &OutOfMemoryError{Device: "cpu", Requested: 1 << 30, Category: cat, Stats: Stats{Capacity: 1 << 30}}
		msg := e.Error()
		if !strings.Contains(msg, "("+cat.String()+")") {
			t.Errorf("%s: %q does not name the category", cat, msg)
		}
		batch := strings.Contains(msg, "batch size")
		if grows := cat != Parameter && cat != OptimizerState; batch != grows {
			t.Errorf("%s: advice mentions the batch size: %v, want %v: %q", cat, batch, grows, e.Advice())
		}
		if !strings.Contains(msg, "larger capacity") {
			t.Errorf("%s: %q: a capped device should be told it can be opened larger", cat, msg)
		}
	}
	e := &OutOfMemoryError{Device: "cuda:0", Category: Parameter}
	if strings.Contains(e.Error(), "capacity") {
		t.Errorf("no cap, yet the advice is a larger capacity: %q", e.Error())
	}
}
