package cpu

import (
	"errors"
	"testing"
)

// A failed task makes its stream's later work skipped and its error sticky,
// as on a CUDA stream: events after it, and Synchronize, report it.
func TestWorkerStreamStickyError(t *testing.T) {
	s := newWorkerStream("test", 0)
	defer s.stop()
	boom := errors.New("boom")
	before := s.Record()
	s.enqueue(func() error { return boom }, false)
	ran := false
	s.enqueue(func() error { ran = true; return nil }, false)
	after := s.Record()
	if err := before.Synchronize(); err != nil {
		t.Errorf("event before the failure: %v", err)
	}
	if err := after.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("event after the failure: %v, want boom", err)
	}
	if ran {
		t.Errorf("work after a failure ran")
	}
	if err := s.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize: %v, want boom", err)
	}
}

func TestWorkerStreamClosedErrs(t *testing.T) {
	s := newWorkerStream("test", 0)
	s.stop()
	if err := s.enqueue(func() error { return nil }, false); !errors.Is(err, errClosed) {
		t.Errorf("work enqueued on a stopped stream: %v, want errClosed", err)
	}
	if err := s.Record().Synchronize(); !errors.Is(err, errClosed) {
		t.Errorf("event recorded on a stopped stream: %v, want errClosed", err)
	}
}
