package devicetest

import (
	"time"

	"ferry/device"
)

var streamTests = []test{
	{name: "ComputeStream", fn: testComputeStream},
	{name: "SideStreamRunsInOrder", fn: testSideStreamOrder},
	{name: "EventsCompleteInOrder", fn: testEventsInOrder},
	{name: "EventOrdersSideStreams", fn: testEventOrdersStreams},
	{name: "ComputeWaitsForSideStream", fn: testComputeWaitsForSide},
	{name: "SideStreamWaitsForCompute", fn: testSideWaitsForCompute},
	{name: "Copy", fn: testCopy},
	{name: "SideCopyLarge", fn: testSideCopyLarge},
}

func testComputeStream(e *env) {
	c := e.dev.Compute()
	if c == nil || c.Name() == "" {
		e.Fatal("Compute() is nil or unnamed")
	}
	if e.dev.Compute() != c {
		e.Errorf("Compute() returns a new stream on each call")
	}
	x := e.tensor([]int{64}, nil)
	e.ok(e.k.Fill(x, 3), "Fill")
	ev := c.Record()
	e.ok(ev.Synchronize(), "event Synchronize")
	if !ev.Done() {
		e.Errorf("an event is not Done after Synchronize returned")
	}
	c.Wait(ev) // waiting on a passed event of one's own stream returns
	e.ok(c.Synchronize(), "compute Synchronize")
	e.near("Fill", e.read(x), f64(fill(64, 3)))
}

// hostFlat allocates n elements on the host holding vals.
func (e *env) hostFlat(n int, vals []float32) device.View {
	e.Helper()
	return e.tensorOn(e.dev.Host(), []int{n}, vals)
}

func testSideStreamOrder(e *env) {
	e.reopen(e.slowOpts())
	s, err := e.dev.NewStream("side")
	e.ok(err, "NewStream")
	if s.Name() != "side" {
		e.Errorf("stream named %q, want %q", s.Name(), "side")
	}
	const n = 1000
	want := seq(n, -1, 1)
	a := e.tensor([]int{n}, want)
	h := e.hostFlat(n, nil)
	b := e.tensor([]int{n}, nil)
	e.ok(e.dev.Copy(s, device.Whole(h.Block), device.Whole(a.Block)), "Copy d2h")
	// The second copy reads what the first wrote: it must run after it.
	e.ok(e.dev.Copy(s, device.Whole(b.Block), device.Whole(h.Block)), "Copy h2d")
	e.ok(s.Synchronize(), "Synchronize")
	e.near("round trip on one stream", e.read(b), f64(want))
}

func testEventsInOrder(e *env) {
	if e.caps.SlowCopy != nil {
		e.reopen(e.slowOpts())
	}
	s, err := e.dev.NewStream("d2h")
	e.ok(err, "NewStream")
	a := e.tensor([]int{256}, seq(256, 0, 1))
	var evs []device.Event
	for i := 0; i < 3; i++ {
		h := e.hostFlat(256, nil)
		e.ok(e.dev.Copy(s, device.Whole(h.Block), device.Whole(a.Block)), "Copy")
		evs = append(evs, s.Record())
	}
	if e.caps.SlowCopy != nil && evs[0].Done() {
		e.Errorf("an event after a slow copy was Done at once")
	}
	// An event never completes before one recorded earlier on its stream.
	e.ok(evs[1].Synchronize(), "event")
	if !evs[0].Done() || !evs[1].Done() {
		e.Errorf("after event 1 completed, done = %v, %v", evs[0].Done(), evs[1].Done())
	}
	e.ok(s.Synchronize(), "Synchronize")
	for i, ev := range evs {
		if !ev.Done() {
			e.Errorf("event %d not Done after the stream was synchronized", i)
		}
	}
}

// testEventOrdersStreams: work on one side stream that waits for an event
// of another runs after the work before that event.
func testEventOrdersStreams(e *env) {
	slow := e.caps.SlowCopy != nil
	if slow {
		e.reopen(e.slowOpts())
	}
	s1, err := e.dev.NewStream("d2h")
	e.ok(err, "NewStream")
	s2, err := e.dev.NewStream("h2d")
	e.ok(err, "NewStream")
	const n = 4096
	want := seq(n, -3, 3)
	a := e.tensor([]int{n}, want)
	h := e.hostFlat(n, fill(n, -1))
	b := e.tensor([]int{n}, fill(n, -2))
	e.ok(e.dev.Copy(s1, device.Whole(h.Block), device.Whole(a.Block)), "Copy on s1")
	e1 := s1.Record()
	if slow && e1.Done() {
		e.Errorf("the event after a slow copy was Done at once")
	}
	s2.Wait(e1)
	e.ok(e.dev.Copy(s2, device.Whole(b.Block), device.Whole(h.Block)), "Copy on s2")
	e2 := s2.Record()
	e.ok(e2.Synchronize(), "s2 event")
	if !e1.Done() {
		e.Errorf("s2 passed its Wait before the event it waited for completed")
	}
	e.near("copy ordered after another stream's event", e.read(b), f64(want))
}

func testComputeWaitsForSide(e *env) {
	if e.caps.SlowCopy != nil {
		e.reopen(e.slowOpts())
	}
	s, err := e.dev.NewStream("h2d")
	e.ok(err, "NewStream")
	const n = 2048
	src := seq(n, -1, 1)
	h := e.hostFlat(n, src)
	d := e.tensor([]int{n}, fill(n, 9))
	out := e.tensor([]int{n}, nil)
	e.ok(e.dev.Copy(s, device.Whole(d.Block), device.Whole(h.Block)), "Copy h2d")
	e.dev.Compute().Wait(s.Record())
	e.ok(e.k.Unary(device.Scale, out, d, 2), "Unary on compute after Wait")
	want := make([]float64, n)
	for i, v := range src {
		want[i] = 2 * float64(v)
	}
	e.near("compute after waiting for a side copy", e.read(out), want)
}

func testSideWaitsForCompute(e *env) {
	s, err := e.dev.NewStream("d2h")
	e.ok(err, "NewStream")
	const n = 2048
	d := e.tensor([]int{n}, nil)
	h := e.hostFlat(n, fill(n, -1))
	e.ok(e.k.Fill(d, 3), "Fill")
	s.Wait(e.dev.Compute().Record())
	e.ok(e.dev.Copy(s, device.Whole(h.Block), device.Whole(d.Block)), "Copy d2h")
	e.ok(s.Synchronize(), "Synchronize")
	e.near("side copy after waiting for compute", e.readOn(e.dev.Host(), h), f64(fill(n, 3)))
}

// testCopy copies part of a block into the middle of another, in every
// direction between the device and its host, on the compute stream and on
// a side stream; bytes outside the destination span stay as they were.
func testCopy(e *env) {
	side, err := e.dev.NewStream("copy")
	e.ok(err, "NewStream")
	host := e.dev.Host()
	const n = 64
	src := seq(n, -5, 5)
	for _, sc := range []struct {
		name string
		s    device.Stream
	}{{"compute", e.dev.Compute()}, {"side", side}} {
		for _, dir := range []struct {
			name     string
			from, to device.Device
		}{
			{"d2h", e.dev, host}, {"h2d", host, e.dev}, {"d2d", e.dev, e.dev}, {"h2h", host, host},
		} {
			a := e.tensorOn(dir.from, []int{n}, src)
			b := e.tensorOn(dir.to, []int{n}, fill(n, -1))
			// Elements 3..12 of a into elements 5..14 of b.
			err := e.dev.Copy(sc.s, device.Span{Block: b.Block, Off: 5 * 4, Len: 10 * 4}, device.Span{Block: a.Block, Off: 3 * 4, Len: 10 * 4})
			e.ok(err, "Copy %s on %s", dir.name, sc.name)
			e.ok(sc.s.Synchronize(), "Synchronize")
			want := f64(fill(n, -1))
			for i := 0; i < 10; i++ {
				want[5+i] = float64(src[3+i])
			}
			e.near(dir.name+" on "+sc.name, e.readOn(dir.to, b), want)
		}
	}
	// Whole covers the requested bytes.
	a := e.tensor([]int{n}, src)
	if sp := device.Whole(a.Block); sp.Len != n*4 || sp.Off != 0 || sp.Block != a.Block {
		e.Errorf("Whole = %+v", sp)
	}
}

// testSideCopyLarge: a large device-to-host copy on a side stream, ordered
// after compute by an event, delivers what compute wrote. With Caps.Large
// it moves 256 MiB and logs how long enqueueing took (it should return at
// once: the copy is asynchronous) and the bandwidth.
func testSideCopyLarge(e *env) {
	n := 1 << 20
	if e.caps.Large {
		n = 64 << 20
	}
	src := e.tensor([]int{n}, nil)
	e.ok(e.k.Fill(src, 3), "Fill")
	e.ok(e.k.Unary(device.Scale, src, src, 2), "Unary")
	side, err := e.dev.NewStream("d2h")
	e.ok(err, "NewStream")
	side.Wait(e.dev.Compute().Record())
	h := e.hostFlat(n, nil)
	start := time.Now()
	e.ok(e.dev.Copy(side, device.Whole(h.Block), device.Whole(src.Block)), "Copy d2h")
	ev := side.Record()
	enqueued := time.Since(start)
	e.ok(ev.Synchronize(), "event Synchronize")
	took := time.Since(start)
	e.Logf("%d MiB device→host on a side stream: enqueued in %v, done in %v (%.1f GB/s)", 4*n>>20, enqueued, took, float64(4*n)/took.Seconds()/1e9)
	got := e.readOn(e.dev.Host(), h)
	if got == nil {
		return
	}
	for _, i := range []int{0, n / 3, n / 2, n - 1} {
		if got[i] != 6 {
			e.Fatalf("host[%d] = %v after the side copy, want 6", i, got[i])
		}
	}
}
