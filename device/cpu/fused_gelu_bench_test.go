//go:build unix

package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"ferry/device"
)

// BenchmarkBiasGELU: the elementwise work of GPT's MLP around its first
// Linear (rows × 4C activations), unfused (Binary Add of the bias, Unary
// GELUTanh; in backward Binary GELUTanhGrad and Sum over the rows) and
// fused (BiasGELUTanh; GELUTanhBackwardSum).
func BenchmarkBiasGELU(b *testing.B) {
	for _, sh := range [][2]int{{1024, 1536}, {4096, 3072}} {
		rows, cols := sh[0], sh[1]
		d := open(&testing.T{}, device.Options{})
		r := rand.New(rand.NewPCG(1, 2))
		z, y, g, dz := benchView(b, d, r, rows, cols), benchView(b, d, r, rows, cols), benchView(b, d, r, rows, cols), benchView(b, d, r, rows, cols)
		bias, sum := benchView(b, d, r, cols), benchView(b, d, r, cols)
		k := d.Kernels()
		fk := k.(device.FusedGELUKernels)
		bb := bias
		bb.Shape, bb.Strides = []int{rows, cols}, []int{0, 1}
		s2 := sum
		s2.Shape, s2.Strides = []int{1, cols}, []int{cols, 1}
		cases := []struct {
			name string
			run  func() error
		}{
			{"forward_unfused", func() error {
				if err := k.Binary(device.Add, z, z, bb); err != nil {
					return err
				}
				return k.Unary(device.GELUTanh, y, z, 0)
			}},
			{"forward_fused", func() error { return fk.BiasGELUTanh(y, z, bias) }},
			{"backward_unfused", func() error {
				if err := k.Binary(device.GELUTanhGrad, dz, g, z); err != nil {
					return err
				}
				return k.Sum(s2, dz, 1)
			}},
			{"backward_fused", func() error { return fk.GELUTanhBackwardSum(dz, sum, g, z) }},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, c.name), func(b *testing.B) {
				cpu0 := cpuTime()
				for b.Loop() {
					if err := c.run(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
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
