package optim_test

import (
	"testing"

	"ferry"
	"ferry/device"
	"ferry/optim"
)

// BenchmarkStep times one step of each registered optimizer over one
// parameter of 2²² elements on the CPU device (its state on the device),
// reporting the state's bytes per parameter beside the time.
//
//	go test -run - -bench Step -benchtime 20x ./optim
func BenchmarkStep(b *testing.B) {
	const n = 1 << 22
	for _, name := range optim.Names() {
		b.Run(name, func(b *testing.B) {
			dev := newCPU(b)
			p := ferry.ZerosAs(dev, device.Parameter, n).SetName("w")
			defer p.Release()
			o, err := optim.New(name, []*ferry.Tensor{p}, map[string]float64{"lr": 1e-4})
			if err != nil {
				b.Fatal(err)
			}
			defer o.Release()
			// Gradients of many magnitudes (the 8-bit codes' search
			// branches as on real ones).
			p.SetGrad(ferry.FromFloat32s(dev, draw(7, n, false), n))
			b.SetBytes(4 * n)
			b.ResetTimer()
			for range b.N {
				if err := o.Step(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(o.(interface{ StateBytes(int64) int64 }).StateBytes(n))/n, "state-B/param")
		})
	}
}
