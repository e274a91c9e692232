package nccl_test

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"
	"unsafe"

	"ferry/device/cuda/cu"
	"ferry/dist/nccl"
)

// realGPU is FERRY_CUDA_REAL=1 (scripts/gpu-check.sh sets it): the tests
// below then run against the real CUDA driver and libnccl, and the
// stand-in tests skip.
var realGPU = os.Getenv("FERRY_CUDA_REAL") == "1"

// The single-rank smoke test on a real GPU (one GPU cannot host two NCCL
// ranks): a clique of one made through the binding, each collective on a
// stream of the device's primary context, results read back and checked
// (with one rank every collective copies its input), a group of two
// all-reduces, use after Destroy refused, and the time of an in-place
// all-reduce of 64 MiB. scripts/gpu-check.sh runs it; elsewhere it skips.
func TestRealGPUSingleRank(t *testing.T) {
	if !realGPU {
		t.Skip("runs on a GPU: set FERRY_CUDA_REAL=1 (scripts/gpu-check.sh does)")
	}
	path, version, err := nccl.Library()
	if err != nil {
		t.Fatalf("libnccl: %v", err)
	}
	t.Logf("NCCL %d from %s", version, path)
	drv, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := drv.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	// Every NCCL call below runs with the context current on this thread.
	err = ctx.Do(func() error { return singleRank(t, ctx) })
	if err != nil {
		t.Fatal(err)
	}
}

func singleRank(t *testing.T, ctx cu.Context) error {
	id, err := nccl.GetUniqueID()
	if err != nil {
		return err
	}
	comm, err := nccl.InitRank(1, id, 0)
	if err != nil {
		return err
	}
	destroyed := false
	defer func() {
		if !destroyed {
			comm.Destroy()
		}
	}()
	s, err := ctx.StreamCreate()
	if err != nil {
		return err
	}
	defer ctx.StreamDestroy(s)

	const n = 1 << 20 // elements
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(i%1000) * 0.5
	}
	alloc := func() (cu.DevicePtr, error) { return ctx.MemAlloc(4 * n) }
	send, err := alloc()
	if err != nil {
		return err
	}
	defer ctx.MemFree(send)
	recv, err := alloc()
	if err != nil {
		return err
	}
	defer ctx.MemFree(recv)
	if err := ctx.MemcpyHtoDAsync(send, unsafe.Pointer(&host[0]), 4*n, s); err != nil {
		return err
	}
	check := func(what string) error {
		got := make([]float32, n)
		if err := ctx.MemcpyDtoHAsync(unsafe.Pointer(&got[0]), recv, 4*n, s); err != nil {
			return err
		}
		if err := ctx.StreamSynchronize(s); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(host[i]) {
				return fmt.Errorf("%s: element %d is %v, want %v (one rank copies its input)", what, i, got[i], host[i])
			}
		}
		// Clear recv for the next collective, so a no-op cannot pass.
		return ctx.MemsetD32Async(recv, 0x7fc00000, n, s)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"all-reduce", func() error { return comm.AllReduce(send, recv, n, nccl.Float32, nccl.Sum, s) }},
		{"reduce-scatter", func() error { return comm.ReduceScatter(send, recv, n, nccl.Float32, nccl.Sum, s) }},
		{"all-gather", func() error { return comm.AllGather(send, recv, n, nccl.Float32, s) }},
		{"broadcast", func() error { return comm.Broadcast(send, recv, n, nccl.Float32, 0, s) }},
		{"group of two all-reduces", func() error {
			return nccl.Group(func() error {
				if err := comm.AllReduce(send, recv, n/2, nccl.Float32, nccl.Sum, s); err != nil {
					return err
				}
				half := cu.DevicePtr(4 * n / 2) // bytes
				return comm.AllReduce(send+half, recv+half, n/2, nccl.Float32, nccl.Sum, s)
			})
		}},
	}
	if err := ctx.MemsetD32Async(recv, 0x7fc00000, n, s); err != nil {
		return err
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		if err := check(st.name); err != nil {
			return err
		}
		t.Logf("%s: ok", st.name)
	}

	// 64 MiB in place, timed after a warm-up.
	const big = 16 << 20
	buf, err := ctx.MemAlloc(4 * big)
	if err != nil {
		return err
	}
	defer ctx.MemFree(buf)
	if err := ctx.MemsetD32Async(buf, 0x3f800000, big, s); err != nil {
		return err
	}
	const reps = 20
	run := func(k int) (time.Duration, error) {
		if err := ctx.StreamSynchronize(s); err != nil {
			return 0, err
		}
		t0 := time.Now()
		for range k {
			if err := comm.AllReduce(buf, buf, big, nccl.Float32, nccl.Sum, s); err != nil {
				return 0, err
			}
		}
		err := ctx.StreamSynchronize(s)
		return time.Since(t0), err
	}
	if _, err := run(2); err != nil { // warm-up
		return err
	}
	el, err := run(reps)
	if err != nil {
		return err
	}
	per := el / reps
	t.Logf("in-place all-reduce of 64 MiB on one rank: %v per call, %.1f GB/s of the buffer (one rank moves nothing across links: this is NCCL's local path)",
		per, float64(4*big)/per.Seconds()/1e9)
	if err := comm.AsyncError(); err != nil {
		return err
	}
	destroyed = true
	if err := comm.Destroy(); err != nil {
		return err
	}
	if err := comm.AllReduce(send, recv, n, nccl.Float32, nccl.Sum, s); err == nil {
		return fmt.Errorf("an all-reduce after Destroy was accepted")
	}
	return nil
}
