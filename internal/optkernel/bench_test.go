package optkernel

import (
	"fmt"
	"math"
	"testing"
	"time"

	"ferry/device"
)

// BenchmarkHostAdamW times the host AdamW update on n float32 parameters
// (reading w, g, m and v, writing w, m and v: 28 bytes an element) beside
// a copy of the same 28·n bytes (14·n read, 14·n written), both spread
// over the cores by hostParallel and interleaved iteration by iteration,
// so that a noisy neighbour slows both alike. Metrics: adam-GB/s,
// copy-GB/s and adam/copy, their ratio, and each one's best iteration. scripts/bench-host-adamw.py times
// PyTorch's CPU AdamW (foreach) on the same sizes.
//
//	go test -run - -bench HostAdamW ./internal/optkernel
func BenchmarkHostAdamW(b *testing.B) {
	for _, n := range []int{1 << 20, 1 << 24} {
		for _, isa := range ISAs() {
			b.Run(fmt.Sprintf("n=%d/%s", n, isa), func(b *testing.B) {
				defer func(old string) { ISA = old }(ISA)
				ISA = isa
				w, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
				for i := range g {
					w[i], g[i] = float32(i%7)*0.1, float32(i%13)*0.01-0.06
				}
				src, dst := make([]byte, 14*n), make([]byte, 14*n)
				for i := range src { // touch every page before timing
					src[i], dst[i] = byte(i), 1
				}
				for i := range m {
					m[i], v[i] = 1e-3, 1e-6
				}
				hp := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
				var adam, cp time.Duration
				bestAdam, bestCp := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
				step := 0
				b.SetBytes(28 * int64(n))
				for b.Loop() {
					step++
					hp.Step = step
					t0 := time.Now()
					AdamW(w, g, m, v, hp)
					t1 := time.Now()
					hostParallel(len(src), func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
					t2 := time.Now()
					adam += t1.Sub(t0)
					cp += t2.Sub(t1)
					bestAdam, bestCp = min(bestAdam, t1.Sub(t0)), min(bestCp, t2.Sub(t1))
				}
				bytes := 28 * float64(n)
				b.ReportMetric(bytes*float64(step)/adam.Seconds()/1e9, "adam-GB/s")
				b.ReportMetric(bytes*float64(step)/cp.Seconds()/1e9, "copy-GB/s")
				b.ReportMetric(cp.Seconds()/adam.Seconds(), "adam/copy")
				// The best iteration of each: what the machine gives when
				// other processes leave it alone.
				b.ReportMetric(bytes/bestAdam.Seconds()/1e9, "best-adam-GB/s")
				b.ReportMetric(bytes/bestCp.Seconds()/1e9, "best-copy-GB/s")
			})
		}
	}
}

// BenchmarkHostSGD times the host SGD update with momentum and weight
// decay (reading w, g and the buffer, writing w and the buffer: 20 bytes
// an element) beside a copy of as many bytes, as BenchmarkHostAdamW does.
func BenchmarkHostSGD(b *testing.B) {
	n := 1 << 24
	w, g, buf := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range g {
		w[i], g[i], buf[i] = float32(i%7)*0.1, float32(i%13)*0.01-0.06, 1e-3
	}
	src, dst := make([]byte, 10*n), make([]byte, 10*n)
	for i := range src {
		src[i], dst[i] = byte(i), 1
	}
	hp := device.SGDParams{LR: 1e-3, Momentum: 0.9, WeightDecay: 1e-2}
	var sgd, cp time.Duration
	iters := 0
	b.SetBytes(20 * int64(n))
	for b.Loop() {
		iters++
		t0 := time.Now()
		SGD(w, g, buf, hp)
		t1 := time.Now()
		hostParallel(len(src), func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
		sgd += t1.Sub(t0)
		cp += time.Since(t1)
	}
	bytes := 20 * float64(n) * float64(iters)
	b.ReportMetric(bytes/sgd.Seconds()/1e9, "sgd-GB/s")
	b.ReportMetric(bytes/cp.Seconds()/1e9, "copy-GB/s")
	b.ReportMetric(cp.Seconds()/sgd.Seconds(), "sgd/copy")
}
