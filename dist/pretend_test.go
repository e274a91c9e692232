package dist_test

import (
	"testing"

	"ferry/device"
	"ferry/device/meta"
	"ferry/dist"
)

// A pretend communicator on the meta device's clock: each collective
// takes the interconnect's time for its bytes (all-gather and
// reduce-scatter their whole), a wrong length is still an error at once,
// and the buffers are left as they were.
func TestPretendOnTakesInterconnectTime(t *testing.T) {
	p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
		D2HBytesPerSec: 1e10, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 1e9, InterconnectBytesPerSec: 1e9}
	dev := meta.New(device.Options{}, p)
	defer dev.Close()
	c := dist.PretendOn(1, 4, dev)
	buf := make([]float32, 1000)
	buf[0] = 7
	if err := c.AllReduce(buf).Synchronize(); err != nil {
		t.Fatal(err)
	}
	want := 2 * 0.75 * 4000 / 1e9
	if abs := dev.Now() - want; abs > 1e-15 || abs < -1e-15 || buf[0] != 7 {
		t.Errorf("all-reduce of 4000 B: compute at %v s, want %v; buf[0] %v", dev.Now(), want, buf[0])
	}
	if err := c.AllGather(make([]float32, 250), buf).Synchronize(); err != nil {
		t.Fatal(err)
	}
	want += 0.75 * 4000 / 1e9
	if d := dev.Now() - want; d > 1e-15 || d < -1e-15 {
		t.Errorf("all-gather into 4000 B: compute at %v s, want %v", dev.Now(), want)
	}
	if err := c.ReduceScatter(buf, make([]float32, 3)).Synchronize(); err == nil {
		t.Error("reduce-scatter of 1000 into 3 accepted")
	}
	if dev.Busy().Interconnect != want {
		t.Errorf("interconnect busy %v s, want %v", dev.Busy().Interconnect, want)
	}
	if err := dist.Pretend(0, 4).AllReduce(buf).Synchronize(); err != nil || dev.Busy().Interconnect != want {
		t.Errorf("Pretend without a clock took time or failed: %v", err)
	}
}
