package cpu_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
)

// BenchmarkGemmBF16 times the CPU device's Gemm on 1024³ in float32 (the
// backend Gemm picks: OpenBLAS or package gemm) and in bfloat16 (A and B
// bfloat16, C float32 and C bfloat16), side by side. "alternating" runs
// the float32 and the bfloat16 (C float32) product call by call and
// reports the median wall time of each and bf16/f32's speed-up: on a
// machine shared with other work both then see the same load. (The
// process's CPU time per call is no better a measure: it counts the
// helpers' spinning between products, which varies from run to run.)
func BenchmarkGemmBF16(b *testing.B) {
	b.Log(cpu.Paths())
	const n = 1024
	flops := 2.0 * n * n * n
	d := open(&testing.T{}, device.Options{})
	defer d.Close()
	k := d.Kernels()
	r := rand.New(rand.NewPCG(1, 2))
	alloc := func(dt device.DType) device.View {
		blk, err := d.Allocator().Alloc(int64(n*n*dt.Size()), device.Activation)
		if err != nil {
			b.Fatal(err)
		}
		return device.View{Block: blk, Shape: []int{n, n}, Strides: []int{n, 1}, DType: dt}
	}
	a32, b32, c32 := alloc(device.Float32), alloc(device.Float32), alloc(device.Float32)
	a16, b16, c16 := alloc(device.BFloat16), alloc(device.BFloat16), alloc(device.BFloat16)
	for i := range n * n {
		vals(a32)[i], vals(b32)[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		halves(a16)[i], halves(b16)[i] = device.ToBFloat16(vals(a32)[i]), device.ToBFloat16(vals(b32)[i])
	}
	p32 := device.GemmParams{M: n, N: n, K: n, Alpha: 1, A: a32.Block, B: b32.Block, C: c32.Block,
		LDA: n, LDB: n, LDC: n, Batch: 1}
	p16 := p32
	p16.A, p16.B, p16.TypeA, p16.TypeB = a16.Block, b16.Block, device.BFloat16, device.BFloat16
	p16c := p16
	p16c.C, p16c.TypeC = c16.Block, device.BFloat16
	run := func(b *testing.B, p device.GemmParams) {
		for b.Loop() {
			if err := k.Gemm(p); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
	b.Run("float32", func(b *testing.B) { run(b, p32) })
	b.Run("bfloat16", func(b *testing.B) { run(b, p16) })
	b.Run("bfloat16_Cbf16", func(b *testing.B) { run(b, p16c) })
	b.Run("alternating", func(b *testing.B) {
		var t32, t16 []float64
		for i := 0; b.Loop(); i++ {
			p, ts := p32, &t32
			if i%2 == 1 {
				p, ts = p16, &t16
			}
			t0 := time.Now()
			if err := k.Gemm(p); err != nil {
				b.Fatal(err)
			}
			*ts = append(*ts, float64(time.Since(t0)))
		}
		if len(t16) == 0 {
			return
		}
		median := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
		f, h := median(t32), median(t16)
		b.ReportMetric(flops/f, "f32_GFLOP/s")
		b.ReportMetric(flops/h, "bf16_GFLOP/s")
		b.ReportMetric(f/h, "bf16/f32")
	})
}

// BenchmarkConvert times Convert on 4096×1024 contiguous elements (16 MiB
// of float32) each way; GB/s counts the bytes read and written.
func BenchmarkConvert(b *testing.B) {
	const n = 4096 * 1024
	d := open(&testing.T{}, device.Options{})
	defer d.Close()
	k := d.Kernels().(device.ConvertKernels)
	alloc := func(dt device.DType) device.View {
		blk, err := d.Allocator().Alloc(int64(n*dt.Size()), device.Activation)
		if err != nil {
			b.Fatal(err)
		}
		return device.View{Block: blk, Shape: []int{4096, 1024}, Strides: []int{1024, 1}, DType: dt}
	}
	f32, bf := alloc(device.Float32), alloc(device.BFloat16)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range vals(f32) {
		vals(f32)[i] = float32(r.NormFloat64())
	}
	for _, c := range []struct {
		name     string
		dst, src device.View
	}{{"float32_to_bfloat16", bf, f32}, {"bfloat16_to_float32", f32, bf}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := k.Convert(c.dst, c.src); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(6*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkElementwiseBF16 times a bfloat16 GELU (bfloat16 in and out)
// and the residual add of a bfloat16 branch into a float32 stream
// (float32 + bfloat16 → float32) at 3M elements (a GPT-2 small MLP
// activation at batch 4, T 256): in one pass (Note [bfloat16
// elementwise]), as the tensor layer composed them before (Convert the
// bfloat16 inputs into float32 temporaries, the float32 kernel, Convert
// the result), and the float32 op alone.
func BenchmarkElementwiseBF16(b *testing.B) {
	const n = 3 << 20
	d := open(&testing.T{}, device.Options{})
	defer d.Close()
	k := d.Kernels()
	ck := k.(device.ConvertKernels)
	r := rand.New(rand.NewPCG(1, 2))
	alloc := func(dt device.DType) device.View {
		blk, err := d.Allocator().Alloc(int64(n*dt.Size()), device.Activation)
		if err != nil {
			b.Fatal(err)
		}
		return device.View{Block: blk, Shape: []int{n}, Strides: []int{1}, DType: dt}
	}
	x32, y32, t32, u32, o32 := alloc(device.Float32), alloc(device.Float32), alloc(device.Float32), alloc(device.Float32), alloc(device.Float32)
	x16, o16 := alloc(device.BFloat16), alloc(device.BFloat16)
	for i := range n {
		vals(x32)[i], vals(y32)[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		halves(x16)[i] = device.ToBFloat16(vals(y32)[i])
	}
	run := func(name string, fn func() error) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := fn(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
	run("GELUTanh/bf16_one_pass", func() error { return k.Unary(device.GELUTanh, o16, x16, 0) })
	run("GELUTanh/bf16_composed", func() error {
		if err := ck.Convert(t32, x16); err != nil {
			return err
		}
		if err := k.Unary(device.GELUTanh, u32, t32, 0); err != nil {
			return err
		}
		return ck.Convert(o16, u32)
	})
	run("GELUTanh/f32", func() error { return k.Unary(device.GELUTanh, o32, x32, 0) })
	run("Add/f32+bf16_one_pass", func() error { return k.Binary(device.Add, o32, x32, x16) })
	run("Add/f32+bf16_composed", func() error {
		if err := ck.Convert(t32, x16); err != nil {
			return err
		}
		return k.Binary(device.Add, o32, x32, t32)
	})
	run("Add/f32", func() error { return k.Binary(device.Add, o32, x32, y32) })
}
