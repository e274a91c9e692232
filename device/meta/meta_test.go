package meta_test

import (
	"errors"
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

// A bfloat16 product runs at MatmulBF16FLOPS when the profile gives it
// (else at MatmulFLOPS) and moves each operand at its element's size; a
// conversion moves its source's and destination's bytes; combinations no
// device takes are refused with an *UnsupportedError and cost nothing.
func TestBFloat16Cost(t *testing.T) {
	const M, N, K, batch = 256, 128, 512, 3
	flops := 2.0 * M * N * K * batch
	for _, c := range []struct {
		name          string
		bf16Rate      float64
		typeAB, typeC device.DType
		want          float64
	}{
		{"fp32", 4e12, device.Float32, device.Float32, flops/1e12 + batch*4*(M*K+K*N+M*N)/1e11},
		{"bf16 → fp32", 4e12, device.BFloat16, device.Float32, flops/4e12 + batch*(2*M*K+2*K*N+4*M*N)/1e11},
		{"bf16 → bf16", 4e12, device.BFloat16, device.BFloat16, flops/4e12 + batch*2*(M*K+K*N+M*N)/1e11},
		{"bf16 at the fp32 rate", 0, device.BFloat16, device.BFloat16, flops/1e12 + batch*2*(M*K+K*N+M*N)/1e11},
	} {
		p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
			D2HBytesPerSec: 1e10, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9, MatmulBF16FLOPS: c.bf16Rate}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		d := meta.New(device.Options{}, p)
		b, _ := d.Allocator().Alloc(1<<20, device.Activation)
		err := d.Kernels().Gemm(device.GemmParams{M: M, N: N, K: K, Batch: batch, A: b, B: b, C: b, LDA: K, LDB: N, LDC: N, Alpha: 1,
			TypeA: c.typeAB, TypeB: c.typeAB, TypeC: c.typeC})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := d.Now(); abs(got-c.want) > 1e-9*c.want {
			t.Errorf("%s: %v s, want %v", c.name, got, c.want)
		}
		d.Close()
	}

	p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
		D2HBytesPerSec: 1e10, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9, MatmulBF16FLOPS: 4e12, KernelSeconds: 1e-6}
	d := meta.New(device.Options{}, p)
	defer d.Close()
	b, _ := d.Allocator().Alloc(1<<20, device.Activation)
	ck, ok := d.Kernels().(device.ConvertKernels)
	if !ok {
		t.Fatal("the meta device has no ConvertKernels")
	}
	view := func(dt device.DType) device.View {
		return device.View{Block: b, Shape: []int{100, 30}, Strides: []int{1, 100}, DType: dt}
	}
	for _, c := range []struct {
		dst, src device.DType
		bytes    float64
	}{
		{device.BFloat16, device.Float32, 6}, {device.Float32, device.BFloat16, 6},
		{device.BFloat16, device.BFloat16, 4}, {device.Float32, device.Float32, 8}, {device.Int32, device.Int32, 8},
	} {
		start := d.Now()
		if err := ck.Convert(view(c.dst), view(c.src)); err != nil {
			t.Fatalf("Convert %v→%v: %v", c.src, c.dst, err)
		}
		if got, want := d.Now()-start, 1e-6+3000*c.bytes/1e11; abs(got-want) > 1e-9*want {
			t.Errorf("Convert %v→%v: %v s, want %v", c.src, c.dst, got, want)
		}
	}

	start := d.Now()
	for _, c := range []struct{ dst, src device.DType }{
		{device.Int32, device.Float32}, {device.Float32, device.Int32}, {device.BFloat16, device.Int32},
		{device.Float16, device.Float16}, {device.Float16, device.Float32}, {device.Float32, device.Float16},
	} {
		var u *device.UnsupportedError
		if err := ck.Convert(view(c.dst), view(c.src)); !errors.As(err, &u) || u.Device != "meta" || u.Op != "convert" {
			t.Errorf("Convert %v→%v: %v, want an *UnsupportedError naming meta", c.src, c.dst, err)
		}
	}
	for _, c := range [][3]device.DType{
		{device.BFloat16, device.Float32, device.Float32}, {device.Float32, device.BFloat16, device.BFloat16},
		{device.Float32, device.Float32, device.BFloat16}, {device.BFloat16, device.BFloat16, device.Int32},
		{device.Float16, device.Float16, device.Float32},
	} {
		var u *device.UnsupportedError
		err := d.Kernels().Gemm(device.GemmParams{M: 4, N: 4, K: 4, Batch: 1, A: b, B: b, C: b, LDA: 4, LDB: 4, LDC: 4, Alpha: 1,
			TypeA: c[0], TypeB: c[1], TypeC: c[2]})
		if !errors.As(err, &u) || u.Device != "meta" || u.Op != "gemm" {
			t.Errorf("Gemm %v×%v→%v: %v, want an *UnsupportedError naming meta", c[0], c[1], c[2], err)
		}
	}
	if d.Now() != start {
		t.Errorf("refused kernels cost %v s", d.Now()-start)
	}

	bad := *p
	bad.MatmulBF16FLOPS = -1
	if err := bad.Validate(); err == nil {
		t.Error("a negative matmul_bf16_flops was accepted")
	}
}

// A collective takes the ring algorithm's time on the interconnect, one
// after another, and compute waits for it only when it synchronizes; with
// no interconnect rate, or one rank, it takes none. Validate refuses a
// rate out of range.
func TestSimulateCollective(t *testing.T) {
	p := &meta.Profile{Name: "test", MatmulFLOPS: 1e12, MemoryBytesPerSec: 1e11, H2DBytesPerSec: 1e10,
		D2HBytesPerSec: 5e9, DiskWriteBytesPerSec: 1e9, DiskReadBytesPerSec: 2e9,
		InterconnectBytesPerSec: 1e10, InterconnectSeconds: 1e-5}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	d := meta.New(device.Options{}, p)
	defer d.Close()
	const n = 8e8 // bytes
	ar := d.SimulateCollective("all_reduce", n, 4)
	rs := d.SimulateCollective("reduce_scatter", n, 4)
	bc := d.SimulateCollective("broadcast", n, 4)
	wantAR := 1e-5 + 2*0.75*n/1e10
	wantRS := wantAR + 1e-5 + 0.75*n/1e10
	wantBC := wantRS + 1e-5 + n/1e10
	for _, c := range []struct {
		name string
		ev   device.Event
		want float64
	}{{"all_reduce", ar, wantAR}, {"reduce_scatter", rs, wantRS}, {"broadcast", bc, wantBC}} {
		if got, _ := d.EventTime(c.ev); abs(got-c.want) > 1e-12 {
			t.Errorf("%s ends at %v s, want %v", c.name, got, c.want)
		}
	}
	if d.Now() != 0 {
		t.Errorf("compute moved to %v s before waiting", d.Now())
	}
	if b := d.Busy(); abs(b.Interconnect-wantBC) > 1e-12 || b.Max() != b.Interconnect {
		t.Errorf("busy %+v, want interconnect %v the busiest", b, wantBC)
	}
	if err := bc.Synchronize(); err != nil || abs(d.Now()-wantBC) > 1e-12 {
		t.Errorf("after waiting: %v s, want %v (%v)", d.Now(), wantBC, err)
	}
	if got, _ := d.EventTime(d.SimulateCollective("all_reduce", n, 1)); got != d.Now() {
		t.Errorf("one rank's all-reduce ends at %v, want now (%v)", got, d.Now())
	}
	q := *p
	q.InterconnectBytesPerSec = 0
	free := meta.New(device.Options{}, &q)
	defer free.Close()
	if got, _ := free.EventTime(free.SimulateCollective("all_reduce", n, 8)); got != 0 || free.Busy().Interconnect != 0 {
		t.Errorf("no interconnect rate: the all-reduce ends at %v", got)
	}
	for _, bad := range []meta.Profile{{InterconnectBytesPerSec: -1}, {InterconnectBytesPerSec: 1e20}, {InterconnectSeconds: 2}} {
		r := *p
		r.InterconnectBytesPerSec, r.InterconnectSeconds = bad.InterconnectBytesPerSec, bad.InterconnectSeconds
		if err := r.Validate(); err == nil {
			t.Errorf("Validate accepted interconnect %g B/s, %g s", r.InterconnectBytesPerSec, r.InterconnectSeconds)
		}
	}
}
