// Package disttest is the conformance suite of dist.Comm backends: every
// rank of a group calls Collectives with its own communicator (in its own
// process under mpirun, or on its own goroutine for dist.NewGroup), and
// each checks the values it receives for every collective.
package disttest

import (
	"fmt"
	"slices"
	"strings"

	"ferry/dist"
)

// Collectives runs every collective of c, with values that depend on the
// rank, and returns the first wrong value or error; nil when all agree.
// Every rank of the group must call it at the same time.
func Collectives(c dist.Comm) error {
	r, n := c.Rank(), c.Size()
	if r < 0 || r >= n {
		return fmt.Errorf("rank %d of %d", r, n)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("rank %d of %d: "+format, append([]any{r, n}, args...)...)
	}
	// all-reduce: rank r holds r+1+10i, the sum is n(n+1)/2 + 10ni.
	buf := make([]float32, 1000)
	for i := range buf {
		buf[i] = float32(r + 1 + 10*i)
	}
	if err := c.AllReduce(buf).Synchronize(); err != nil {
		return err
	}
	for i, v := range buf {
		if want := float32(n*(n+1)/2 + 10*n*i); v != want {
			return fail("all_reduce[%d] = %v, want %v", i, v, want)
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
		return err
	}
	if err := ea.Synchronize(); err != nil {
		return err
	}
	if !ea.Done() || !eb.Done() {
		return fail("an event is not done after Synchronize")
	}
	for i := range a {
		if want := float32(2 * (n - 1)); a[i] != want {
			return fail("average[%d] = %v, want %v", i, a[i], want)
		}
	}
	for i := range b {
		if want := float32(i * n * (n + 1) / 2); b[i] != want {
			return fail("second all_reduce[%d] = %v, want %v", i, b[i], want)
		}
	}
	// reduce-scatter: send[j] = j + 100r; rank r gets block r of the sum.
	send := make([]float32, n*3)
	for j := range send {
		send[j] = float32(j + 100*r)
	}
	recv := make([]float32, 3)
	if err := c.ReduceScatter(send, recv).Synchronize(); err != nil {
		return err
	}
	for k, v := range recv {
		j := 3*r + k
		if want := float32(n*j + 100*n*(n-1)/2); v != want {
			return fail("reduce_scatter[%d] = %v, want %v", k, v, want)
		}
	}
	// all-gather, in rank order.
	mine := []float32{float32(r), float32(r) + .5, float32(-r), 9}
	all := make([]float32, 4*n)
	if err := c.AllGather(mine, all).Synchronize(); err != nil {
		return err
	}
	for q := range n {
		if got, want := all[4*q:4*q+4], []float32{float32(q), float32(q) + .5, float32(-q), 9}; !slices.Equal(got, want) {
			return fail("all_gather block %d = %v, want %v", q, got, want)
		}
	}
	// broadcast from the last rank.
	bc := []float32{float32(r), float32(2 * r)}
	if err := c.Broadcast(bc, n-1).Synchronize(); err != nil {
		return err
	}
	if bc[0] != float32(n-1) || bc[1] != float32(2*(n-1)) {
		return fail("broadcast from %d = %v", n-1, bc)
	}
	// Empty buffers are no work, but still collectives.
	if err := c.AllReduce(nil).Synchronize(); err != nil {
		return fail("all_reduce of nothing: %v", err)
	}
	// Wrong lengths and roots are refused on the spot, on every rank alike.
	if err := c.ReduceScatter(make([]float32, 5), make([]float32, 3)).Synchronize(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("size(%d)", n)) {
		return fail("reduce_scatter with len 5 → 3: %v", err)
	}
	if err := c.AllGather(make([]float32, 2), make([]float32, 3)).Synchronize(); err == nil {
		return fail("all_gather with len 2 → 3 succeeded")
	}
	if err := c.Broadcast(bc, n).Synchronize(); err == nil {
		return fail("broadcast from rank %d of %d succeeded", n, n)
	}
	return c.Barrier()
}
