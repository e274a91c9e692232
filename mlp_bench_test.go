//go:build unix

package ferry_test

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/nn"
)

// BenchmarkGPTMLP is one forward and backward of GPT's MLP (c_fc to 4C,
// tanh GELU, c_proj back) on the CPU device, as nn.MLP runs it (c_fc and
// the GELU fused: ferry.LinearGELUTanh) and as the two ops it replaces
// (Linear then GELUTanh).
func BenchmarkGPTMLP(b *testing.B) {
	for _, sz := range [][2]int{{1024, 384}, {2048, 768}} {
		rows, C := sz[0], sz[1]
		dev := newCPU(b, device.Options{})
		rng := rand.New(rand.NewPCG(1, 2))
		fc, err := nn.NewLinear(dev, C, 4*C, true, rng)
		if err != nil {
			b.Fatal(err)
		}
		proj, err := nn.NewLinear(dev, 4*C, C, true, rng)
		if err != nil {
			b.Fatal(err)
		}
		m := &nn.MLP{CFc: fc, CProj: proj, Drop: &nn.Dropout{}}
		x := ferry.Randn(dev, rng, rows, C)
		g := ferry.Randn(dev, rng, rows, C)
		for _, fused := range []bool{false, true} {
			name := map[bool]string{false: "unfused", true: "fused"}[fused]
			b.Run(fmt.Sprintf("%dx%d/%s", rows, C, name), func(b *testing.B) {
				cpu0 := cpuTime()
				for b.Loop() {
					err := ferry.Step(func(tape *ferry.Tape) error {
						in := tape.Input(x)
						var o *ferry.Tensor
						if fused {
							o = m.Forward(in)
						} else {
							h := ferry.Linear(in, fc.Weight, fc.Bias)
							a := ferry.GELUTanh(h)
							h.Release()
							o = ferry.Linear(a, proj.Weight, proj.Bias)
							a.Release()
						}
						return o.BackwardWith(ferry.BackwardOptions{Grad: g})
					})
					if err != nil {
						b.Fatal(err)
					}
					for _, p := range m.Parameters() {
						p.SetGrad(nil)
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
		x.Release()
		g.Release()
		nn.Release(m)
	}
}

// cpuTime is the process's user and system CPU time in nanoseconds: on a
// shared machine, a steadier measure of work than the wall clock.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
