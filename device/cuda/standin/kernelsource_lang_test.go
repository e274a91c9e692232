package standin_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"unsafe"

	"ferry/device/cuda/cu"
	"ferry/device/cuda/standin"
)

// The CPU build's CUDA language (c/cudacpu.h) on test-only kernels
// (testdata/cudacpu_test.cu), launched through the bindings.

// testModule opens a context and loads a module declaring entries.
func testModule(t *testing.T, entries ...string) (cu.Context, cu.Module, cu.Stream) {
	t.Helper()
	drv, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := drv.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ctx.ModuleLoadData(entryPTX(entries...))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ctx.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx.StreamDestroy(s)
		ctx.ModuleUnload(m)
		ctx.Close()
	})
	return ctx, m, s
}

// run launches kernel name of m with one device buffer of n 32-bit words
// (and the extra arguments), waits, and returns the buffer.
func runTest(t *testing.T, ctx cu.Context, m cu.Module, s cu.Stream, name string, grid, block cu.Dim3, shared uint32, n int, extra func(*cu.Args)) ([]uint32, error) {
	t.Helper()
	f, err := ctx.ModuleGetFunction(m, name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ctx.MemAlloc(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(p)
	if err := ctx.MemsetD32Async(p, 0xdeadbeef, int64(n), s); err != nil {
		t.Fatal(err)
	}
	a := new(cu.Args).Reset().Ptr(p)
	if extra != nil {
		extra(a)
	}
	if err := ctx.LaunchKernel(f, grid, block, shared, s, a); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		return nil, err
	}
	out := make([]byte, 4*n)
	if err := ctx.MemcpyDtoHAsync(unsafe.Pointer(&out[0]), p, int64(4*n), s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	words := make([]uint32, n)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(out[4*i:])
	}
	return words, nil
}

// Shuffles, votes, dynamic and static shared memory, a shared atomic and
// __syncthreads_count, on blocks of 48 threads (a full warp and half of
// one), two blocks.
func TestKernelSourceWarp(t *testing.T) {
	_, k := setupSource(t)
	ctx, m, s := testModule(t, ".visible .entry ferry_test_warp(.param .u64 p0)")
	const nt, blocks = 48, 2
	got, err := runTest(t, ctx, m, s, "ferry_test_warp", cu.Dim3{X: blocks, Y: 1, Z: 1}, cu.Dim3{X: nt, Y: 1, Z: 1}, 4*nt, 8*nt*blocks, nil)
	if err != nil {
		t.Fatal(err)
	}
	for b := 0; b < blocks; b++ {
		for tid := 0; tid < nt; tid++ {
			lane, w0 := tid%32, tid-tid%32
			width := min(nt-w0, 32)
			o := got[8*(b*nt+tid):]
			check := func(i int, want int) {
				t.Helper()
				if int32(o[i]) != int32(want) {
					t.Errorf("block %d thread %d: out[%d] = %d, want %d", b, tid, i, int32(o[i]), want)
				}
			}
			check(0, 1000+nt-1-tid)
			check(1, 3*w0)
			if lane+1 < width {
				check(2, tid+1)
			}
			if lane^1 < width {
				check(3, tid^1)
			}
			sum, ballot := 0, 0
			for l := 0; l < width; l++ {
				sum += w0 + l
				if (w0+l)%3 == 0 {
					ballot |= 1 << l
				}
			}
			check(4, sum)
			check(5, ballot)
			any := 0
			if w0 == 0 {
				any = 1
			}
			check(6, any+2)
			check(7, nt/2*100000+nt*(nt-1)/2)
		}
	}
	if k.Stat("ferry_test_warp", "runs") < 1 {
		t.Error("ferry_test_warp did not run from its source")
	}
}

// A kernel that reads its neighbour's shared word without a barrier is
// reported as racy, a violation of the stand-in.
func TestKernelSourceRace(t *testing.T) {
	l, k := setupSource(t)
	ctx, m, s := testModule(t, ".visible .entry ferry_test_racy(.param .u64 p0)")
	races := k.Total("races")
	if _, err := runTest(t, ctx, m, s, "ferry_test_racy", cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, 64, nil); err != nil {
		t.Fatal(err)
	}
	n, report := l.Violations(), l.Report()
	found := k.Total("races") - races
	first := ""
	for _, line := range strings.Split(report, "\n") {
		if strings.Contains(line, "race") {
			first = line
			break
		}
	}
	t.Logf("ferry_test_racy: %d races (%d violations, with the reads of words not yet written); the first race:\n%s", found, n, first)
	if found != 64 || n < 64 || !strings.Contains(report, "shared-memory race") {
		t.Errorf("want 64 races reported as violations (one per word), got %d races, %d violations:\n%s", found, n, report)
	}
	l.Reset() // the races were the point
}

// A kernel that writes past its allocation faults the context (as
// CUDA_ERROR_ILLEGAL_ADDRESS) and is reported, without touching the
// memory.
func TestKernelSourceOutOfBounds(t *testing.T) {
	l, k := setupSource(t)
	// A faulted context fails every later call, so that its objects leak
	// when it is destroyed: those violations, and the fault, are expected.
	t.Cleanup(func() {
		l.Reset()
		standin.KernelError()
	})
	ctx, m, s := testModule(t, ".visible .entry ferry_test_out_of_bounds(.param .u64 p0, .param .u64 p1)")
	oob := k.Total("out_of_bounds")
	_, err := runTest(t, ctx, m, s, "ferry_test_out_of_bounds", cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 32, Y: 1, Z: 1}, 0, 128,
		func(a *cu.Args) { a.I64(128) })
	if !cu.IsResult(err, cu.Result(700)) {
		t.Errorf("the out-of-bounds kernel gave %v, want CUDA_ERROR_ILLEGAL_ADDRESS", err)
	}
	if k.Total("out_of_bounds")-oob != 1 || !strings.Contains(l.Report(), "outside every allocation") {
		t.Errorf("the write past the allocation was not reported:\n%s", l.Report())
	}
}

// A read of shared memory the block has not written, threads of one block
// waiting at two different barriers, and lanes of a warp at two different
// shuffles, are violations.
func TestKernelSourceMisuse(t *testing.T) {
	l, k := setupSource(t)
	ctx, m, s := testModule(t, ".visible .entry ferry_test_uninitialised(.param .u64 p0)",
		".visible .entry ferry_test_divergent(.param .u64 p0)", ".visible .entry ferry_test_divergent_shuffle(.param .u64 p0)")
	one := cu.Dim3{X: 1, Y: 1, Z: 1}
	uninit := k.Total("uninitialised")
	if _, err := runTest(t, ctx, m, s, "ferry_test_uninitialised", one, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, 64, nil); err != nil {
		t.Fatal(err)
	}
	if n := k.Total("uninitialised") - uninit; n != 64 || !strings.Contains(l.Report(), "which no thread of the block has written") {
		t.Errorf("%d uninitialised reads reported, want 64:\n%s", n, l.Report())
	}
	l.Reset()
	if _, err := runTest(t, ctx, m, s, "ferry_test_divergent", one, cu.Dim3{X: 32, Y: 1, Z: 1}, 0, 32, nil); err != nil {
		t.Fatal(err)
	}
	report := l.Report()
	t.Logf("ferry_test_divergent: %s", strings.SplitN(report, "\n", 2)[0])
	if !strings.Contains(report, "wait at different barriers") {
		t.Errorf("the divergent barrier was not reported:\n%s", report)
	}
	l.Reset()
	if _, err := runTest(t, ctx, m, s, "ferry_test_divergent_shuffle", one, cu.Dim3{X: 32, Y: 1, Z: 1}, 0, 32, nil); err != nil {
		t.Fatal(err)
	}
	report = l.Report()
	t.Logf("ferry_test_divergent_shuffle: %s", strings.SplitN(report, "\n", 2)[0])
	if !strings.Contains(report, "wait at different warp operations") {
		t.Errorf("the divergent shuffle was not reported:\n%s", report)
	}
	l.Reset()
}

// Blocks of a launch writing the same global word race: nothing orders
// them.
func TestKernelSourceGlobalRace(t *testing.T) {
	l, k := setupSource(t)
	ctx, m, s := testModule(t, ".visible .entry ferry_test_global_race(.param .u64 p0)")
	races := k.Total("global_races")
	if _, err := runTest(t, ctx, m, s, "ferry_test_global_race", cu.Dim3{X: 3, Y: 1, Z: 1}, cu.Dim3{X: 32, Y: 1, Z: 1}, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	report := l.Report()
	t.Logf("ferry_test_global_race: %s", strings.SplitN(report, "\n", 2)[0])
	if n := k.Total("global_races") - races; n != 1 || !strings.Contains(report, "global-memory race") {
		t.Errorf("%d global races reported, want 1 (the word, once):\n%s", n, report)
	}
	l.Reset()
}

// The global race check tracks 2-byte halves of words: threads that store
// neighbouring bfloat16 elements do not race (global memory is byte
// addressed), two that store the same one do.
func TestKernelSourceHalfWords(t *testing.T) {
	l, k := setupSource(t)
	ctx, m, s := testModule(t, ".visible .entry ferry_test_halves(.param .u64 p0, .param .u32 p1)")
	races := k.Total("global_races")
	out, err := runTest(t, ctx, m, s, "ferry_test_halves", cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, 32,
		func(a *cu.Args) { a.I32(0) })
	if err != nil {
		t.Fatal(err)
	}
	if n := k.Total("global_races") - races; n != 0 || l.Violations() != 0 {
		t.Fatalf("%d races for neighbouring halves, want 0:\n%s", n, l.Report())
	}
	for i, w := range out {
		if want := uint32(2*i) | uint32(2*i+1)<<16; w != want {
			t.Fatalf("word %d is %#x, want %#x", i, w, want)
		}
	}
	if _, err := runTest(t, ctx, m, s, "ferry_test_halves", cu.Dim3{X: 1, Y: 1, Z: 1}, cu.Dim3{X: 64, Y: 1, Z: 1}, 0, 32,
		func(a *cu.Args) { a.I32(1) }); err != nil {
		t.Fatal(err)
	}
	if n := k.Total("global_races") - races; n != 32 {
		t.Errorf("%d races for pairs storing one half, want 32 (one a word):\n%s", n, l.Report())
	}
	l.Reset()
}
