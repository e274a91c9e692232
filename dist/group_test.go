package dist_test

import (
	"errors"
	"fmt"
	"runtime"
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

// A rank that closes its communicator (a rank that failed) fails the
// collectives its peers issued and will issue without it, before and after
// it closed, instead of leaving them waiting.
func TestGroupRankClosesMidway(t *testing.T) {
	for _, early := range []bool{true, false} {
		errs := onRanks(dist.NewGroup(3), func(c dist.Comm) error {
			buf := make([]float32, 4)
			if err := c.AllReduce(buf).Synchronize(); err != nil {
				return err // the first collective completes on every rank
			}
			if c.Rank() == 1 {
				if !early {
					// Let the others issue the next collective first.
					for range 1000 {
						runtime.Gosched()
					}
				}
				return c.Close()
			}
			if err := c.AllReduce(buf).Synchronize(); err == nil {
				return errors.New("an all-reduce without rank 1 succeeded")
			} else if !strings.Contains(err.Error(), "rank 1 closed") {
				return err
			}
			if err := c.Barrier(); err == nil || !strings.Contains(err.Error(), "rank 1 closed") {
				return fmt.Errorf("a later barrier: %v", err)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("early %v, rank %d: %v", early, r, err)
			}
		}
	}
}
