package fake

import (
	"testing"
	"time"
	"unsafe"

	"ferry/device/cuda/cu"
)

func open(t *testing.T, o Options) cu.Context {
	t.Helper()
	c, err := New(o).Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Events follow CUDA: done when never recorded; a query sees the latest
// record; a stream waiting on an event waits for the record made before
// the wait, not for later ones.
func TestEventSemantics(t *testing.T) {
	c := open(t, Options{CopyDelay: 40 * time.Millisecond})
	s1, _ := c.StreamCreate()
	s2, _ := c.StreamCreate()
	e, _ := c.EventCreate()
	if ok, _ := c.EventQuery(e); !ok {
		t.Errorf("an event never recorded is not done")
	}
	dev, _ := c.MemAlloc(64)
	host, _ := c.MemHostAlloc(64)
	c.MemcpyHtoDAsync(dev, host, 64, s1) // slow
	c.EventRecord(e, s1)
	if ok, _ := c.EventQuery(e); ok {
		t.Errorf("done before a 40 ms copy finished")
	}
	c.StreamWaitEvent(s2, e)
	c.EventRecord(e, s2) // re-recorded after the wait: s2 still waits for s1's copy
	start := time.Now()
	if err := c.StreamSynchronize(s2); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Errorf("s2 did not wait for the record before its wait")
	}
	if err := c.EventSynchronize(e); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{c.EventDestroy(e), c.StreamDestroy(s1), c.StreamDestroy(s2), c.MemFree(dev), c.MemFreeHost(host)} {
		if err != nil {
			t.Error(err)
		}
	}
}

// The fake refuses the legacy default stream and unknown handles, and
// reports device pointers that are not allocated as illegal addresses.
func TestHandlesAndAddresses(t *testing.T) {
	c := open(t, Options{})
	if err := c.MemsetD32Async(0x1000, 0, 1, 0); !cu.IsResult(err, cu.ErrInvalidHandle) {
		t.Errorf("legacy stream: %v", err)
	}
	s, _ := c.StreamCreate()
	defer c.StreamDestroy(s)
	var buf [4]byte
	if err := c.MemcpyDtoHAsync(unsafe.Pointer(&buf[0]), 0xdead0000, 4, s); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if err := c.StreamSynchronize(s); !cu.IsResult(err, cu.ErrIllegalAddress) {
		t.Errorf("copy from an unallocated address: %v", err)
	}
	// The fault is sticky.
	if _, err := c.MemAlloc(16); !cu.IsResult(err, cu.ErrIllegalAddress) {
		t.Errorf("after a fault: %v", err)
	}
}

// Leaks lists what a context still held when its last retain was released.
func TestLeaks(t *testing.T) {
	d := New(Options{})
	c, _ := d.Open(0)
	c2, _ := d.Open(0) // the same primary context, retained twice
	c.MemAlloc(1 << 20)
	c.Close()
	if len(d.Leaks()) != 0 || d.Context(0) == nil {
		t.Errorf("released once of twice: %v", d.Leaks())
	}
	c2.Close()
	if l := d.Leaks(); len(l) != 1 || l[0] != "cuda:0: 1 device allocations" {
		t.Errorf("Leaks() = %q", l)
	}
	if err := c2.Close(); err == nil {
		t.Errorf("a second Close of one retain succeeded")
	}
}
