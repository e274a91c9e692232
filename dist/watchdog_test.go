package dist_test

import (
	"strings"
	"testing"
	"time"

	"ferry/device"
	"ferry/dist"
	"ferry/dist/disttest"
)

// A watched group passes the conformance suite, and its watchdog stays
// quiet while the collectives complete.
func TestWatchConformance(t *testing.T) {
	cs := dist.NewGroup(3)
	for i, c := range cs {
		cs[i] = dist.Watch(c, time.Minute, func(err error) { t.Errorf("watchdog fired: %v", err) })
	}
	for _, err := range onRanks(cs, disttest.Collectives) {
		if err != nil {
			t.Error(err)
		}
	}
}

// A rank that skips a collective leaves its peer's waiting: the peer's
// watchdog reports it, naming the collective, once.
func TestWatchFiresOnAStuckCollective(t *testing.T) {
	for _, op := range []string{"all_reduce", "barrier"} {
		cs := dist.NewGroup(2)
		fired := make(chan error, 2)
		w := dist.Watch(cs[0], 50*time.Millisecond, func(err error) { fired <- err })
		done := make(chan error, 1)
		go func() {
			if op == "barrier" {
				done <- w.Barrier()
			} else {
				done <- w.AllReduce(make([]float32, 4)).Synchronize()
			}
		}()
		select {
		case err := <-fired:
			if !strings.Contains(err.Error(), "rank 0 of 2: "+op+" (collective 1 of this rank") || !strings.Contains(err.Error(), "died, hangs") {
				t.Errorf("%s: %v", op, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watchdog did not fire", op)
		}
		// The late peer completes the collective; nothing fires again.
		if op == "barrier" {
			cs[1].Barrier()
		} else {
			cs[1].AllReduce(make([]float32, 4)).Synchronize()
		}
		if err := <-done; err != nil {
			t.Errorf("%s: %v", op, err)
		}
		ev := w.AllReduce(make([]float32, 1))
		cs[1].AllReduce(make([]float32, 1)).Synchronize()
		if err := ev.Synchronize(); err != nil {
			t.Errorf("%s: %v", op, err)
		}
		time.Sleep(100 * time.Millisecond)
		if len(fired) > 0 {
			t.Errorf("%s: the watchdog fired twice: %v", op, <-fired)
		}
	}
}

// No timeout: the Comm as it was.
func TestWatchOff(t *testing.T) {
	c := dist.Local()
	if dist.Watch(c, 0, nil) != c {
		t.Error("Watch with no timeout wrapped the Comm")
	}
}

// stuckStream is a stream whose work never ends: what a device stream is
// once an NCCL collective on it waits for a rank that never comes.
type stuckStream struct{}

func (stuckStream) Name() string         { return "stuck" }
func (stuckStream) Record() device.Event { return neverDone{} }
func (stuckStream) Wait(device.Event)    {}
func (stuckStream) Synchronize() error   { select {} }

type neverDone struct{}

func (neverDone) Done() bool         { return false }
func (neverDone) Synchronize() error { select {} }

// nopDeviceComm enqueues nothing.
type nopDeviceComm struct{}

func (nopDeviceComm) Rank() int                                       { return 0 }
func (nopDeviceComm) Size() int                                       { return 2 }
func (nopDeviceComm) AllReduce(device.Span, int, device.Stream) error { return nil }
func (nopDeviceComm) ReduceScatter(device.Span, device.Span, int, device.Stream) error {
	return nil
}
func (nopDeviceComm) AllGather(device.Span, device.Span, int, device.Stream) error { return nil }
func (nopDeviceComm) Broadcast(device.Span, int, int, device.Stream) error         { return nil }

// A collective on the device that never completes fires the device
// watchdog once, naming it; one that completes fires nothing.
func TestWatchDeviceFiresOnAStuckCollective(t *testing.T) {
	fired := make(chan error, 2)
	w := dist.WatchDevice(nopDeviceComm{}, 30*time.Millisecond, func(err error) { fired <- err })
	if err := w.AllGather(device.Span{}, device.Span{}, 1, stuckStream{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-fired:
		if !strings.Contains(err.Error(), "rank 0 of 2: all_gather on the device (collective 1 of this rank") {
			t.Errorf("%v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the device watchdog did not fire")
	}
	cpu, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	quiet := dist.WatchDevice(nopDeviceComm{}, 30*time.Millisecond, func(err error) { fired <- err })
	if err := quiet.AllReduce(device.Span{}, 1, cpu.Compute()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-fired:
		t.Fatalf("a completed collective fired the watchdog: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}
