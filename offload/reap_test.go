package offload

import (
	"fmt"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
)

// simulateCovered feeds gradients of the given sizes to the covering
// rule as backward completes them and returns the sizes still on the
// device (in flight) after each.
func simulateCovered(sizes []int64) (held [][]int64) {
	var pending []*gradCopy
	for _, b := range sizes {
		pending = append(pending, &gradCopy{bytes: b})
		covered := coveredCopies(pending)
		kept := pending[:0]
		for i, c := range pending {
			if !covered[i] {
				kept = append(kept, c)
			}
		}
		pending = kept
		var h []int64
		for _, c := range pending {
			h = append(h, c.bytes)
		}
		held = append(held, h)
	}
	return held
}

// A weight's copy is not waited for when its bias completes next (that
// wait would stall for the whole copy), but once the next weight has;
// a small gradient queued behind a large one waits until the large one
// is covered too; at most about one gradient's bytes stay behind the
// newest.
func TestCoveredCopies(t *testing.T) {
	for _, c := range []struct {
		name  string
		sizes []int64
		want  string
	}{
		// weight, bias, weight, bias, weight (an MLP, last layer first)
		{"mlp", []int64{64, 1, 64, 1, 64}, "[[64] [64 1] [1 64] [64 1] [1 64]]"},
		// a large weight, two small norms behind it on the link, a
		// smaller weight, then a large one
		{"queued", []int64{41, 1, 1, 10, 41}, "[[41] [41 1] [41 1 1] [41 1 1 10] [10 41]]"},
		{"one", []int64{5}, "[[5]]"},
		{"zero", []int64{0, 0, 3}, "[[0] [0] [3]]"},
	} {
		if got := fmt.Sprint(simulateCovered(c.sizes)); got != c.want {
			t.Errorf("%s: held %s, want %s", c.name, got, c.want)
		}
	}
}

// streamerOver streams parameters p0, p1, … of the given element counts
// on a CPU device, prefetch uses ahead; both are closed when t ends.
func streamerOver(t *testing.T, sizes []int, prefetch int) (*Streamer, []*ferry.Tensor) {
	t.Helper()
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	var params []*ferry.Tensor
	for i, n := range sizes {
		params = append(params, ferry.Zeros(dev, n).SetName(fmt.Sprintf("p%d", i)))
	}
	s, err := NewStreamer(dev, StreamConfig{Params: params, Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, params
}

// A large parameter after a run of small ones starts its upload when
// the run starts, not Prefetch uses before its own: the uses ahead are
// prefetched until they hold the largest parameter's bytes.
func TestPrefetchReachesTheLargeParameter(t *testing.T) {
	s, params := streamerOver(t, []int{4, 4, 4, 4, 4096}, 1) // norms, biases, then a weight
	big := s.byStorage[params[4].Storage()]
	for step := range 2 {
		if err := s.BeginStep(); err != nil {
			t.Fatal(err)
		}
		for i, p := range params {
			if err := s.PageIn(p); err != nil {
				t.Fatal(err)
			}
			if step == 1 && i == 0 && big.pending == nil && !big.resident {
				t.Errorf("after the first use the large parameter's upload has not started")
			}
		}
		if err := s.pageOutAll(true); err != nil {
			t.Fatal(err)
		}
	}
}

// Uses outside a step (an evaluation's forwards, a checkpoint's reads)
// are not recorded: the next step's prefetches follow the last step's
// uses alone. (An evaluation's uses were recorded: the step after it
// prefetched in their order, which backward does not follow.)
func TestUsesOutsideAStepAreNotTheOrder(t *testing.T) {
	s, params := streamerOver(t, []int{64, 64, 64, 64}, 1)
	evaluate := func() {
		for i := len(params) - 1; i >= 0; i-- {
			if err := s.PageIn(params[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Settle(); err != nil {
			t.Fatal(err)
		}
	}
	order := func() string {
		var names []string
		for _, st := range s.order {
			names = append(names, st.p.Name())
		}
		return fmt.Sprint(names)
	}
	for step := range 2 {
		evaluate()
		if err := s.BeginStep(); err != nil {
			t.Fatal(err)
		}
		want := "[p0 p1 p2 p3]"
		if step == 0 {
			want = "[]"
		}
		if got := order(); got != want {
			t.Errorf("step %d follows the uses %s, want %s", step+1, got, want)
		}
		for _, p := range params {
			if err := s.PageIn(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.EndStep(); err != nil {
			t.Fatal(err)
		}
	}
}

// A parameter the last step used again much later (an embedding in
// forward and at its update at backward's end) and whose earlier use
// that step did not note (it was on the device already) does not move
// the guess to that later use: the uses after it are still prefetched.
func TestPrefetchKeepsItsPlaceAcrossAnUnnotedUse(t *testing.T) {
	sizes := make([]int, 20)
	for i := range sizes {
		sizes[i] = 64
	}
	s, params := streamerOver(t, sizes, 2)
	use := func(p *ferry.Tensor) {
		t.Helper()
		if err := s.PageIn(p); err != nil {
			t.Fatal(err)
		}
		if err := s.pageOut(s.byStorage[p.Storage()]); err != nil {
			t.Fatal(err)
		}
	}
	// The last step: p1's first use unnoted, its use at the end noted.
	if err := s.BeginStep(); err != nil {
		t.Fatal(err)
	}
	use(params[0])
	for _, p := range params[2:] {
		use(p)
	}
	use(params[1])
	if err := s.pageOutAll(true); err != nil {
		t.Fatal(err)
	}
	// This step uses p1 early: p2's use still prefetches p3 and p4.
	if err := s.BeginStep(); err != nil {
		t.Fatal(err)
	}
	use(params[0])
	use(params[1])
	if err := s.PageIn(params[2]); err != nil {
		t.Fatal(err)
	}
	for _, p := range params[3:5] {
		if st := s.byStorage[p.Storage()]; st.pending == nil && !st.resident {
			t.Errorf("%s is not on its way after p2's use: the guess moved to p1's later use", p.Name())
		}
	}
	if err := s.pageOutAll(true); err != nil {
		t.Fatal(err)
	}
}
