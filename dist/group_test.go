package dist_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"ferry/dist"
	"ferry/dist/disttest"
)

// onRanks runs f on one goroutine per communicator and returns their
// errors.
func onRanks(cs []dist.Comm, f func(c dist.Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	return errs
}

func TestConformanceLocal(t *testing.T) {
	if err := disttest.Collectives(dist.Local()); err != nil {
		t.Fatal(err)
	}
}

func TestConformanceGroup(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		for _, err := range onRanks(dist.NewGroup(n), disttest.Collectives) {
			if err != nil {
				t.Errorf("%d ranks: %v", n, err)
			}
		}
	}
}

// Ranks whose collectives differ get an error each, not a hang.
func TestGroupMismatch(t *testing.T) {
	errs := onRanks(dist.NewGroup(2), func(c dist.Comm) error {
		return c.AllReduce(make([]float32, 1+c.Rank())).Synchronize()
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "ranks disagree") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	c := dist.NewGroup(1)[0]
	c.Close()
	if err := c.Barrier(); !errors.Is(err, dist.ErrClosed) {
		t.Errorf("Barrier after Close: %v", err)
	}
}
