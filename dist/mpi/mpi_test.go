package mpi_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"ferry/dist"
	"ferry/dist/disttest"
	"ferry/dist/internal/mpirun"
	"ferry/dist/mpi"
)

// Two ranks under mpirun run TestMPIChild; each checks every collective's
// values and says "rank r: all collectives agree".
func TestMPITwoRanks(t *testing.T) {
	if mpirun.IsChild("TestMPIChild") {
		t.Skip("a rank does not start ranks")
	}
	out := mpirun.Run(t, 2, "TestMPIChild", 2*time.Minute)
	for r := range 2 {
		if want := fmt.Sprintf("rank %d of 2: all collectives agree", r); !strings.Contains(out, want) {
			t.Errorf("no %q in the job's output:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "--- PASS: TestMPIChild"); n != 2 {
		t.Errorf("%d ranks passed, want 2:\n%s", n, out)
	}
	t.Logf("%s", out)
}

func TestMPIChild(t *testing.T) {
	if !mpirun.IsChild("TestMPIChild") {
		t.Skip("runs only as a rank of TestMPITwoRanks")
	}
	c, err := mpi.Open()
	if err != nil {
		t.Fatal(err)
	}
	r, n := c.Rank(), c.Size()
	if n != 2 {
		t.Fatalf("size %d, want 2", n)
	}
	if l, ok, err := mpi.Launched(); err != nil || !ok || l.Rank != r || l.Size != n {
		t.Fatalf("Launched() = %+v, %v, %v; MPI says rank %d of %d", l, ok, err, r, n)
	}
	t.Logf("rank %d: %s", r, c.Library())
	// Open MPI installs handlers for SIGSEGV and others at init unless a
	// handler is there already: Go's must survive, or a nil dereference
	// would kill the rank instead of panicking.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("no panic from a nil dereference")
			}
		}()
		var p *int
		_ = *p
	}()
	if _, err := mpi.Open(); err == nil {
		t.Error("a second Open succeeded")
	}

	if err := disttest.Collectives(c); err != nil {
		t.Fatal(err)
	}
	// What a 25 MiB gradient bucket costs (shared memory, one machine).
	big := make([]float32, 25<<20/4)
	t0 := time.Now()
	const reps = 5
	for range reps {
		if err := c.AllReduce(big).Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	d := time.Since(t0) / reps
	t.Logf("rank %d: all_reduce of 25 MiB: %.1f ms (%.2f GB/s of buffer)", r, float64(d.Microseconds())/1000, float64(len(big)*4)/d.Seconds()/1e9)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(make([]float32, 3)).Synchronize(); !errors.Is(err, dist.ErrClosed) {
		t.Errorf("all_reduce after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, dist.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	t.Logf("rank %d of %d: all collectives agree", r, n)
}

// A rank that dies mid-job ends the job, rather than leaving the others
// waiting in a collective forever: mpirun sees the exit and kills them.
func TestRankDies(t *testing.T) {
	if mpirun.IsChild("TestRankDiesChild") {
		t.Skip("a rank does not start ranks")
	}
	t0 := time.Now()
	out, err := mpirun.RunFailing(t, 2, "TestRankDiesChild", time.Minute)
	if !strings.Contains(out, "exited") {
		t.Errorf("mpirun said no word of the exit:\n%s", out)
	}
	t.Logf("after %v: %v\n%s", time.Since(t0).Round(time.Millisecond), err, out)
}

func TestRankDiesChild(t *testing.T) {
	if !mpirun.IsChild("TestRankDiesChild") {
		t.Skip("runs only as a rank of TestRankDies")
	}
	c, err := mpi.Open()
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() == 1 {
		os.Exit(3) // dies without Close, as a crash would
	}
	c.AllReduce(make([]float32, 10)).Synchronize() // waits for rank 1, which never comes
	t.Fatal("rank 0's all_reduce returned")
}
