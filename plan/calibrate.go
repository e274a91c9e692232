package plan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"ferry/device"
	"ferry/device/meta"
	"ferry/internal/fsx"
	"ferry/offload"
)

// CalibrateOptions say what Calibrate measures.
type CalibrateOptions struct {
	Width, Batch int    // the Linear layer whose products are timed
	DiskDir      string // where the disk test writes ("" = the system's temporary directory)
	// DiskBytes is the size of the files whose round trips time the disk
	// tier's fixed cost per transfer (0 = 4 KiB): a model's activation
	// size, where the offloader's files are that size. A small file costs
	// more than its bytes at the rates of a large one (the file system
	// allocates its pages afresh; 128 KiB took 131 µs a round trip on the
	// development machine, 4 KiB 77 µs, and the two 8.9 and 15 GB/s of a
	// 256 MiB file would give 23 µs for the bytes): timed at the
	// offloader's size, the fixed cost carries that.
	DiskBytes int
	Seconds   float64 // time to spend on each figure (default 0.5)
	// Fit, if set, fits the profile's elementwise rate and host optimizer
	// rate to timed training steps on dev (the planner knows no model of
	// its own; cmd/ferry/internal/demo's FitProfile times the origin
	// model).
	Fit func(dev device.Device, p *meta.Profile, o CalibrateOptions) error
	// FitOn says in the profile's Source what Fit times ("" = training
	// steps of 8 such layers, as cmd/ferry/internal/demo's FitProfile does).
	// A note Fit leaves in the profile's Source is kept after it.
	FitOn string
	// HostIsDevice says dev's host is dev itself: the same memory and
	// cores (the CPU device). The profile then says so
	// (meta.Profile.HostSharesCompute).
	HostIsDevice bool
	// Progress, if set, is told what Calibrate starts to measure, so
	// that a command can show it (a calibration takes seconds to minutes).
	Progress func(what string)
}

func (o CalibrateOptions) progress(what string) {
	if o.Progress != nil {
		o.Progress(what)
	}
}

// FastQuantile is the quantile of a run's step times that describes the
// machine with nothing else running on it: other work only ever adds
// time, so the fast end of the steps is the machine's own speed, and the
// tenth percentile is that end without its luckiest few steps. On the
// 2-core development machine, in two runs of 1000 steps of a small GPT
// (15 s each), the medians of 50 steps swung from 14.4 to 21.8 ms while
// their fastest stayed at 14.0–16.3 (docs/plan.md, "The machine at its
// own speed").
const FastQuantile = 0.1

// Calibrate measures dev and returns a profile for the meta device's cost
// model: the matrix-product rate at a Linear(Width) layer's three shapes
// at batch Batch, in float32 and, where the device multiplies bfloat16,
// with bfloat16 operands (else matmul_bf16_flops stays 0 and the Source
// says why), the fixed cost of a kernel, copies to and from the host
// on a side stream, what such copies take from the products running
// beside them (the copy share), and disk writes and reads as the
// offloader's disk tier makes them (through the page cache, without
// fsync). The rate of
// elementwise work is then fitted: a few training steps of the origin
// model (4 layers) are timed on the device, and the rate is the one with
// which the meta device predicts that time. Each time is the fast end
// (FastQuantile) of repeated runs, and the copy share the median.
func Calibrate(dev device.Device, o CalibrateOptions) (*meta.Profile, error) {
	if o.Width <= 0 || o.Batch <= 0 {
		return nil, fmt.Errorf("calibrate: width and batch must be positive")
	}
	if o.Seconds <= 0 {
		o.Seconds = 0.5
	}
	p := &meta.Profile{Name: "calibrated " + dev.Name()}
	k := dev.Kernels()
	alloc := func(n int64, d device.Device) (*device.Block, error) { return d.Allocator().Alloc(n, device.Temporary) }
	sync := func() error { return dev.Compute().Synchronize() }

	// Kernel overhead: a one-element fill.
	o.progress("the cost of a kernel and of elementwise work")
	one, err := alloc(4, dev)
	if err != nil {
		return nil, err
	}
	defer dev.Allocator().Free(one)
	oneView := device.View{Block: one, Shape: []int{1}, Strides: []int{1}}
	kern, err := repeat(o.Seconds/4, func() error { return k.Fill(oneView, 0) }, sync, 100)
	if err != nil {
		return nil, err
	}
	p.KernelSeconds = kern

	// Elementwise: c = a + b over 4 Mi elements (48 MiB moved).
	const n = 4 << 20
	var bufs [3]*device.Block
	for i := range bufs {
		if bufs[i], err = alloc(4*n, dev); err != nil {
			return nil, err
		}
		defer dev.Allocator().Free(bufs[i])
	}
	view := func(b *device.Block) device.View {
		return device.View{Block: b, Shape: []int{n}, Strides: []int{1}}
	}
	for _, b := range bufs {
		if err := k.Fill(view(b), 1); err != nil {
			return nil, err
		}
	}
	add, err := repeat(o.Seconds, func() error { return k.Binary(device.Add, view(bufs[2]), view(bufs[0]), view(bufs[1])) }, sync, 1)
	if err != nil {
		return nil, err
	}
	p.MemoryBytesPerSec = 12 * n / max(add-kern, 1e-9) // a first guess, refined below

	// Matrix products: a Linear layer's forward and both backward products.
	w, b := o.Width, o.Batch
	var x, wt, y *device.Block
	for _, m := range []struct {
		dst **device.Block
		n   int
	}{{&x, b * w}, {&wt, w * w}, {&y, b * w}} {
		if *m.dst, err = alloc(int64(4*m.n), dev); err != nil {
			return nil, err
		}
		defer dev.Allocator().Free(*m.dst)
		if err := k.Fill(device.View{Block: *m.dst, Shape: []int{m.n}, Strides: []int{1}}, 0.01); err != nil {
			return nil, err
		}
	}
	gw, err := alloc(int64(4*w*w), dev)
	if err != nil {
		return nil, err
	}
	defer dev.Allocator().Free(gw)
	shapes := []device.GemmParams{
		{M: b, N: w, K: w, TransB: true, A: x, B: wt, C: y, LDA: w, LDB: w, LDC: w}, // y = x·Wᵀ
		{M: b, N: w, K: w, A: y, B: wt, C: x, LDA: w, LDB: w, LDC: w},               // dx = g·W
		{M: w, N: w, K: b, TransA: true, A: y, B: x, C: gw, LDA: w, LDB: w, LDC: w}, // dW = gᵀ·x
	}
	o.progress(fmt.Sprintf("matrix products of Linear(%d) at batch %d, in float32 and bfloat16", w, b))
	gemm, err := repeat(o.Seconds, func() error {
		for _, s := range shapes {
			s.Alpha, s.Batch = 1, 1
			if err := k.Gemm(s); err != nil {
				return err
			}
		}
		return nil
	}, sync, 1)
	if err != nil {
		return nil, err
	}
	flops := 3 * 2 * float64(b) * float64(w) * float64(w)
	bytes := 3 * 4 * float64(b*w+w*w+b*w)
	p.MatmulFLOPS = flops / max(gemm-3*kern-bytes/p.MemoryBytesPerSec, 1e-9)
	bf16Note := "bfloat16 products at the same shapes"
	var skipped *device.UnsupportedError
	switch rate, err := calibrateBF16(dev, o, kern, p.MemoryBytesPerSec); {
	case errors.As(err, &skipped):
		bf16Note = "bfloat16 products not measured (" + skipped.Error() + ")"
	case err != nil:
		return nil, err
	default:
		p.MatmulBF16FLOPS = rate
	}
	p.ElementwiseBF16 = device.TakesElementwiseBF16(dev.Kernels())

	// Host link: 64 MiB each way on a side stream.
	o.progress("copies to and from the host (64 MiB each way)")
	const linkBytes = 64 << 20
	db, err := alloc(linkBytes, dev)
	if err != nil {
		return nil, err
	}
	defer dev.Allocator().Free(db)
	hb, err := alloc(linkBytes, dev.Host())
	if err != nil {
		return nil, err
	}
	defer dev.Host().Allocator().Free(hb)
	// Both blocks written before they are timed: a block never written
	// may be the system's one page of zeros (a fresh mapping on the CPU
	// device), and copying from it ran at 52 GB/s where copying written
	// memory runs at 22–24 (docs/plan.md, "The machine at its own speed").
	if err := k.Fill(device.View{Block: db, Shape: []int{linkBytes / 4}, Strides: []int{1}}, 1); err != nil {
		return nil, err
	}
	s, err := dev.NewStream("calibrate")
	if err != nil {
		return nil, err
	}
	if err := dev.Copy(s, device.Whole(hb), device.Whole(db)); err != nil {
		return nil, err
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	for _, dir := range []struct {
		rate     *float64
		dst, src *device.Block
	}{{&p.D2HBytesPerSec, hb, db}, {&p.H2DBytesPerSec, db, hb}} {
		t, err := repeat(o.Seconds, func() error { return dev.Copy(s, device.Whole(dir.dst), device.Whole(dir.src)) }, s.Synchronize, 1)
		if err != nil {
			return nil, err
		}
		*dir.rate = linkBytes / t
	}
	o.progress("what copies on a side stream take from matrix products")
	if p.CopyComputeShare, err = copyShare(dev, s, db, hb, gemm, o.Seconds, func() error {
		for _, sh := range shapes {
			sh.Alpha, sh.Batch = 1, 1
			if err := k.Gemm(sh); err != nil {
				return err
			}
		}
		return sync()
	}, linkBytes/p.H2DBytesPerSec+linkBytes/p.D2HBytesPerSec); err != nil {
		return nil, err
	}

	// Disk: a 256 MiB file written and read back in 16 MiB pieces.
	o.progress("disk writes and reads (a 256 MiB file)")
	if p.DiskWriteBytesPerSec, p.DiskReadBytesPerSec, err = diskRates(o.DiskDir, 256<<20); err != nil {
		return nil, err
	}
	if p.DiskSeconds, err = diskLatency(o.DiskDir, o.Seconds, p.DiskWriteBytesPerSec, p.DiskReadBytesPerSec, o.DiskBytes); err != nil {
		return nil, err
	}
	// On the CPU device the host is the device: the same memory and the
	// same cores, so host work beside the device (an optimizer updating
	// inside backward on the host worker) takes compute's time.
	p.HostSharesCompute = o.HostIsDevice
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if o.Fit != nil {
		o.progress("training steps, to fit the elementwise rate and the host optimizer's rate")
		p.Source = ""
		if err := o.Fit(dev, p, o); err != nil {
			return nil, err
		}
	}
	fitNote := p.Source
	fitOn := o.FitOn
	if fitOn == "" {
		fitOn = "training steps of 8 such layers (everything on the device; the optimizer's state and gradients on the host)"
	}
	diskFiles := "4 KiB"
	if o.DiskBytes > 0 {
		diskFiles = device.FormatBytes(int64(o.DiskBytes))
	}
	p.Source = fmt.Sprintf("measured by ferry calibrate on %s: products of Linear(%d) at batch %d, %s, 64 MiB host copies, a 256 MiB file, round trips of %s through one file; "+
		"the copy share measured beside those products; elementwise rate and host optimizer rate fitted to %s; "+
		"each time the tenth percentile of those taken (the machine with nothing else running)", dev.Name(), w, b, bf16Note, diskFiles, fitOn)
	if fitNote != "" {
		p.Source += "; " + fitNote
	}
	return p, p.Validate()
}

// calibrateBF16 times a Linear(o.Width) layer's three products at batch
// o.Batch with bfloat16 operands and results (float32 accumulation), as a
// bfloat16 model makes them, and returns the rate at which the meta
// device's cost model (kern per kernel, bytes at mem) predicts that time.
// A device that multiplies no bfloat16 returns its *device.UnsupportedError
// from the first product: the caller leaves the rate unmeasured (0: the
// fp32 rate).
func calibrateBF16(dev device.Device, o CalibrateOptions, kern, mem float64) (float64, error) {
	w, b := o.Width, o.Batch
	k := dev.Kernels()
	// Inputs x, Wᵀ and the output's gradient g, all 0.01, never written;
	// outputs y, dx and dW apart, so that no product grows its inputs.
	var x, wt, g, y, dx, gw *device.Block
	for _, m := range []struct {
		dst **device.Block
		n   int
		in  bool
	}{{&x, b * w, true}, {&wt, w * w, true}, {&g, b * w, true}, {&y, b * w, false}, {&dx, b * w, false}, {&gw, w * w, false}} {
		blk, err := dev.Allocator().Alloc(int64(2*m.n), device.Temporary)
		if err != nil {
			return 0, err
		}
		defer dev.Allocator().Free(blk)
		*m.dst = blk
		if m.in {
			vals := make([]byte, 2*m.n)
			h := device.ToBFloat16(0.01)
			for i := 0; i < m.n; i++ {
				binary.NativeEndian.PutUint16(vals[2*i:], h)
			}
			if err := k.Upload(device.View{Block: blk, Shape: []int{m.n}, Strides: []int{1}, DType: device.BFloat16}, vals); err != nil {
				return 0, err
			}
		}
	}
	bf := device.BFloat16
	shapes := []device.GemmParams{
		{M: b, N: w, K: w, TransB: true, A: x, B: wt, C: y, LDA: w, LDB: w, LDC: w}, // y = x·Wᵀ
		{M: b, N: w, K: w, A: g, B: wt, C: dx, LDA: w, LDB: w, LDC: w},              // dx = g·W
		{M: w, N: w, K: b, TransA: true, A: g, B: x, C: gw, LDA: w, LDB: w, LDC: w}, // dW = gᵀ·x
	}
	t, err := repeat(o.Seconds, func() error {
		for _, s := range shapes {
			s.Alpha, s.Batch = 1, 1
			s.TypeA, s.TypeB, s.TypeC = bf, bf, bf
			if err := k.Gemm(s); err != nil {
				return err
			}
		}
		return nil
	}, dev.Compute().Synchronize, 1)
	if err != nil {
		return 0, err
	}
	flops := 3 * 2 * float64(b) * float64(w) * float64(w)
	bytes := 3 * 2 * float64(b*w+w*w+b*w)
	return flops / max(t-3*kern-bytes/mem, 1e-9), nil
}

// copyShare measures what copies on side stream s take from compute
// (meta.Profile.CopyComputeShare): the copies of pair (db to hb and back,
// pairSeconds alone) run while compute repeats products (one call, done
// when synchronized: alone seconds each, as measured without copies);
// over the window until the copies are done, compute lost the window
// less the products it finished at their own pace, for copies that take
// their bytes at the link rates alone. The median of at least five
// windows within budget seconds; 0 where it comes out below 0 (compute
// did not slow: its own cores, a GPU's copy engines).
func copyShare(dev device.Device, s device.Stream, db, hb *device.Block, alone, budget float64, products func() error, pairSeconds float64) (float64, error) {
	// Enough pairs for the window to hold about 20 calls of products.
	pairs := max(1, int(math.Ceil(20*alone/pairSeconds)))
	share, err := quantileOf(budget, 1000, 0.5, func() (float64, error) {
		t0 := time.Now()
		for range pairs {
			if err := dev.Copy(s, device.Whole(hb), device.Whole(db)); err != nil {
				return 0, err
			}
			if err := dev.Copy(s, device.Whole(db), device.Whole(hb)); err != nil {
				return 0, err
			}
		}
		copied := s.Record()
		calls := 0
		for !copied.Done() {
			if err := products(); err != nil {
				return 0, err
			}
			calls++
		}
		window := time.Since(t0).Seconds()
		if err := copied.Synchronize(); err != nil {
			return 0, err
		}
		lost := window - float64(calls)*alone
		return lost / (float64(pairs) * pairSeconds), nil
	})
	return max(0, share), err
}

// repeat times batch calls of f (then done) until budget seconds have
// passed, at least five times, and returns the time of one call at
// FastQuantile of those timed.
func repeat(budget float64, f func() error, done func() error, batch int) (float64, error) {
	if err := f(); err != nil { // warm up
		return 0, err
	}
	if err := done(); err != nil {
		return 0, err
	}
	return quantileOf(budget, 10000, FastQuantile, func() (float64, error) {
		t0 := time.Now()
		for i := 0; i < batch; i++ {
			if err := f(); err != nil {
				return 0, err
			}
		}
		if err := done(); err != nil {
			return 0, err
		}
		return time.Since(t0).Seconds() / float64(batch), nil
	})
}

// quantileOf takes measure until budget seconds have passed, at least
// five times and at most most+1, and returns the q-quantile of what it
// measured (the nearest measurement at or below it).
func quantileOf(budget float64, most int, q float64, measure func() (float64, error)) (float64, error) {
	var got []float64
	start := time.Now()
	for len(got) < 5 || time.Since(start).Seconds() < budget {
		v, err := measure()
		if err != nil {
			return 0, err
		}
		got = append(got, v)
		if len(got) > most {
			break
		}
	}
	slices.Sort(got)
	return got[int(q*float64(len(got)-1))], nil
}

// diskLatency is the fixed cost of one disk transfer as the offloader's
// disk tier makes them after a step's first (offload/disk.go): on a
// goroutine of its own, which the caller hands the work to and waits for,
// size bytes (0: 4 KiB; CalibrateOptions.DiskBytes) written over a file
// the tier made and kept, and read back. Half the round trip (at
// FastQuantile), less the bytes at the disk rates, is charged to each
// transfer: the system calls and the two goroutines' hand-offs. (A new file for each tensor,
// as the tier made them before it kept them, cost ten times as much: the
// file's creation and closing, not timed here.)
func diskLatency(dir string, budget, write, read float64, size int) (float64, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if size <= 0 {
		size = 4 << 10
	}
	buf := make([]byte, size)
	f, err := offload.CreateDiskFile(dir)
	if err != nil {
		return 0, fmt.Errorf("calibrate: disk test in %s: %w", dir, err)
	}
	defer f.Close()
	work, done := make(chan func() error), make(chan error)
	defer close(work)
	go func() {
		for f := range work {
			done <- f()
		}
	}()
	on := func(f func() error) error { work <- f; return <-done }
	t, err := repeat(budget/4, func() error {
		var trip error
		if err := on(func() error { trip = f.RoundTrip(buf); return nil }); err != nil {
			return err
		}
		if err := on(func() error { return nil }); err != nil { // the read's hand-off
			return err
		}
		if trip != nil {
			return fmt.Errorf("calibrate: disk test in %s: %w", dir, trip)
		}
		return nil
	}, func() error { return nil }, 1)
	if err != nil {
		return 0, err
	}
	n := float64(len(buf))
	return max(0, t-n/write-n/read) / 2, nil
}

func diskRates(dir string, size int) (write, read float64, err error) {
	if dir == "" {
		dir = os.TempDir()
	}
	// The test file cannot outlive the process, even if it is killed.
	f, _, err := fsx.CreateUnlinked(dir, "ferry-calibrate-*")
	if err != nil {
		return 0, 0, fmt.Errorf("calibrate: disk test in %s: %w", dir, err)
	}
	defer f.Close()
	const piece = 16 << 20
	buf := make([]byte, piece)
	for i := range buf {
		buf[i] = byte(i)
	}
	var wt, rt []float64
	for rep := 0; rep < 3; rep++ {
		t0 := time.Now()
		for off := 0; off < size; off += piece {
			if _, err := f.WriteAt(buf, int64(off)); err != nil {
				return 0, 0, fmt.Errorf("calibrate: writing %s: %w", f.Name(), err)
			}
		}
		wt = append(wt, time.Since(t0).Seconds())
		t0 = time.Now()
		for off := 0; off < size; off += piece {
			if _, err := f.ReadAt(buf, int64(off)); err != nil {
				return 0, 0, fmt.Errorf("calibrate: reading %s: %w", f.Name(), err)
			}
		}
		rt = append(rt, time.Since(t0).Seconds())
	}
	slices.Sort(wt)
	slices.Sort(rt)
	return float64(size) / wt[1], float64(size) / rt[1], nil
}
