package mpi_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"ferry/dist"
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

	// all-reduce: rank r holds r+1+i*10 at i; the sum is 3+20i.
	const m = 1000
	buf := make([]float32, m)
	for i := range buf {
		buf[i] = float32(r + 1 + i*10)
	}
	if err := c.AllReduce(buf).Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i, v := range buf {
		if v != float32(3+20*i) {
			t.Fatalf("all_reduce[%d] = %v, want %v", i, v, 3+20*i)
		}
	}
	// average, and two collectives in flight at once, waited in reverse.
	a, b := make([]float32, 7), make([]float32, 5)
	for i := range a {
		a[i] = float32(4 * r)
	}
	for i := range b {
		b[i] = float32(i * (r + 1))
	}
	ea := dist.AllReduceAverage(c, a)
	eb := c.AllReduce(b)
	if err := eb.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := ea.Synchronize(); err != nil || !ea.Done() {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != 2 {
			t.Fatalf("average[%d] = %v, want 2", i, a[i])
		}
	}
	for i := range b {
		if b[i] != float32(3*i) {
			t.Fatalf("second all_reduce[%d] = %v, want %v", i, b[i], 3*i)
		}
	}
	// reduce-scatter: send[j] = j + 100r; rank r gets the sum of its half.
	send := make([]float32, 2*3)
	for j := range send {
		send[j] = float32(j + 100*r)
	}
	recv := make([]float32, 3)
	if err := c.ReduceScatter(send, recv).Synchronize(); err != nil {
		t.Fatal(err)
	}
	for k, v := range recv {
		if j := 3*r + k; v != float32(2*j+100) {
			t.Fatalf("reduce_scatter[%d] on rank %d = %v, want %v", k, r, v, 2*j+100)
		}
	}
	// all-gather: rank order.
	g := make([]float32, 2*4)
	mine := []float32{float32(r), float32(r) + .5, float32(-r), 9}
	if err := c.AllGather(mine, g).Synchronize(); err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, .5, 0, 9, 1, 1.5, -1, 9}; fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("all_gather = %v, want %v", g, want)
	}
	// broadcast from rank 1.
	bc := []float32{float32(r), float32(r * 2)}
	if err := c.Broadcast(bc, 1).Synchronize(); err != nil {
		t.Fatal(err)
	}
	if bc[0] != 1 || bc[1] != 2 {
		t.Fatalf("broadcast from 1 = %v", bc)
	}
	// Wrong lengths and roots are refused on the spot, on every rank alike.
	if err := c.ReduceScatter(make([]float32, 5), make([]float32, 3)).Synchronize(); err == nil || !strings.Contains(err.Error(), "size(2)") {
		t.Errorf("reduce_scatter with len 5 → 3: %v", err)
	}
	if err := c.AllGather(make([]float32, 2), make([]float32, 3)).Synchronize(); err == nil {
		t.Error("all_gather with len 2 → 3 succeeded")
	}
	if err := c.Broadcast(bc, 2).Synchronize(); err == nil {
		t.Error("broadcast from rank 2 of 2 succeeded")
	}
	if err := c.Barrier(); err != nil {
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
	if err := c.AllReduce(buf).Synchronize(); !errors.Is(err, dist.ErrClosed) {
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
