package meta_test

import (
	"testing"

	"ferry/device"
	"ferry/device/devicetest"
	"ferry/device/meta"
)

// The meta device runs the whole conformance suite: every kernel and copy
// allocates and frees as on a real device; values are not checked.
func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, opts device.Options) device.Device {
		return meta.New(opts, nil)
	}, devicetest.Caps{HasData: false})
}

func TestSimulatedTime(t *testing.T) {
	p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
		D2HBytesPerSec: 1e10, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	d := meta.New(device.Options{}, p)
	defer d.Close()
	b, _ := d.Allocator().Alloc(1<<20, device.Activation)
	// A 1024³ product: 2.1 GFLOP at 1 TFLOP/s, plus 12 MiB at 100 GB/s.
	err := d.Kernels().Gemm(device.GemmParams{M: 1024, N: 1024, K: 1024, Batch: 1, A: b, B: b, C: b, LDA: 1024, LDB: 1024, LDC: 1024, Alpha: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := 2*1024*1024*1024/1e12 + 12*1024*1024/1e11
	if got := d.Now(); abs(got-want) > 1e-12 {
		t.Fatalf("after gemm: %v s, want %v", got, want)
	}
	// A 10 MB copy to the host on a side stream runs beside compute; compute
	// waiting for it stalls by what is left.
	hb, _ := d.Host().Allocator().Alloc(10e6, device.Activation)
	db, _ := d.Allocator().Alloc(10e6, device.Activation)
	s, _ := d.NewStream("d2h")
	if err := d.Copy(s, device.Whole(hb), device.Whole(db)); err != nil {
		t.Fatal(err)
	}
	e := s.Record()
	if e.Done() {
		t.Fatal("a 1 ms copy is done at once")
	}
	start := d.Now()
	d.Compute().Wait(e)
	if got := d.Now() - start; abs(got-1e-3) > 1e-12 || abs(d.StallSeconds()-1e-3) > 1e-12 {
		t.Fatalf("compute waited %v s (stall %v), want 1 ms", got, d.StallSeconds())
	}
	if !e.Done() {
		t.Fatal("event not done after compute waited for it")
	}
	// Disk: 1 GB/s write after the copy.
	w := d.SimulateDisk(1e9, true, e)
	d.Compute().Wait(w)
	if got := d.Now() - start; abs(got-1.001) > 1e-9 {
		t.Fatalf("after a 1 GB write: %v s", got)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// Attention runs at AttentionFLOPS when a profile gives it (else at
// MatmulFLOPS), and a causal pass costs the tiles on and below the
// diagonal only where the profile says the kernels skip the rest.
func TestAttentionCost(t *testing.T) {
	const B, H, T, D = 2, 3, 1000, 64 // 32 tiles of 32 keys, the last partial
	flops := 4.0 * B * H * T * T * D
	bytes := 4.0 * 4 * B * H * T * D
	for _, c := range []struct {
		attn   float64
		skip   bool
		causal bool
		want   float64
	}{
		{0, false, true, flops/1e12 + bytes/1e11},         // the matmul rate, every score
		{5e11, false, false, flops/5e11 + bytes/1e11},     // the attention rate
		{5e11, true, false, flops/5e11 + bytes/1e11},      // not causal: nothing skipped
		{5e11, true, true, flops*33/64/5e11 + bytes/1e11}, // 32·33/2 of 32² tiles
		{0, true, true, flops*33/64/1e12 + bytes/1e11},    // skipping at the matmul rate
		{5e11, false, true, flops/5e11 + bytes/1e11},      // causal, computed in full
	} {
		p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
			D2HBytesPerSec: 1e10, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9,
			AttentionFLOPS: c.attn, AttentionCausalSkip: c.skip}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		d := meta.New(device.Options{}, p)
		b, _ := d.Allocator().Alloc(4*B*H*T*D, device.Activation)
		l, _ := d.Allocator().Alloc(4*B*H*T, device.Activation)
		v := device.View{Block: b, Shape: []int{B, H, T, D}, Strides: device.Contiguous([]int{B, H, T, D})}
		lse := device.View{Block: l, Shape: []int{B, H, T}, Strides: device.Contiguous([]int{B, H, T})}
		ak := d.Kernels().(device.AttentionKernels)
		if err := ak.Attention(v, lse, v, v, v, device.AttentionParams{Causal: c.causal, Scale: 0.125}); err != nil {
			t.Fatal(err)
		}
		if got := d.Now(); abs(got-c.want) > 1e-9*c.want {
			t.Errorf("%+v: %v s, want %v", c, got, c.want)
		}
		d.Close()
	}
	bad := &meta.Profile{Name: "bad", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
		D2HBytesPerSec: 1e10, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9, AttentionFLOPS: -1}
	if err := bad.Validate(); err == nil {
		t.Error("a negative attention_flops was accepted")
	}
}

// A round trip through the host (an optimizer stepping there) costs its
// copies at the link's rates and its host work at the host optimizer's
// rate, or the memory rate when the profile gives none.
func TestSimulateHostWork(t *testing.T) {
	for _, rate := range []float64{0, 2e10} {
		p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
			D2HBytesPerSec: 5e9, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9, HostOptimizerBytesPerSec: rate}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		d := meta.New(device.Options{}, p)
		d.SimulateHostWork(8e6, 28e6, 4e6)
		host := 28e6 / 1e11
		if rate != 0 {
			host = 28e6 / rate
		}
		if want := 8e6/5e9 + host + 4e6/1e10; abs(d.Now()-want) > 1e-12 {
			t.Errorf("host rate %g: %v s, want %v", rate, d.Now(), want)
		}
		d.Close()
	}
}
