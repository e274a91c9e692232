package dist_test

import (
	"errors"
	"testing"

	"ferry/dist"
)

func TestLocal(t *testing.T) {
	c := dist.Local()
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("rank %d of %d", c.Rank(), c.Size())
	}
	buf := []float32{1, 2, 3}
	if err := dist.AllReduceAverage(c, buf).Synchronize(); err != nil || buf[2] != 3 {
		t.Fatalf("average on one rank: %v %v", buf, err)
	}
	recv := make([]float32, 3)
	if err := c.ReduceScatter(buf, recv).Synchronize(); err != nil || recv[1] != 2 {
		t.Fatalf("reduce_scatter: %v %v", recv, err)
	}
	if err := c.AllGather(buf, make([]float32, 4)).Synchronize(); err == nil {
		t.Error("all_gather 3 → 4 succeeded")
	}
	if err := c.Broadcast(buf, 1).Synchronize(); err == nil {
		t.Error("broadcast from rank 1 of 1 succeeded")
	}
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(buf).Synchronize(); !errors.Is(err, dist.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := dist.Unavailable("x unavailable because y"); !errors.Is(err, dist.ErrUnavailable) || err.Error() != "x unavailable because y" {
		t.Errorf("Unavailable: %v", err)
	}
}
