package devicetest

import (
	"fmt"
	"math"

	"ferry/device"
)

// refBinary is the op's definition in float64, written once in
// device/internal/opgen (device.BinaryOp.Math).
func refBinary(op device.BinaryOp, a, b float64) float64 { return op.Math(a, b) }

// binaryInputs gives the b operand's values for op: away from zero for a
// divisor, straddling zero (and with a zero) for ReLU's output.
func binaryInputs(op device.BinaryOp, n int) []float32 {
	switch op {
	case device.Div:
		return seq(n, 0.5, 2)
	case device.ReLUGrad:
		v := seq(n, -1, 1)
		v[n/2] = 0
		return v
	}
	return seq(n, -3, 3)
}

func testBinary(e *env) {
	type pair struct {
		name string
		a, b layout
	}
	full := layout{"", 6, 0, []int{2, 3}, []int{3, 1}}
	pairs := []pair{
		{"contiguous", full, full},
		{"b row broadcast", full, layout{"", 3, 0, []int{2, 3}, []int{0, 1}}},
		{"b column broadcast", full, layout{"", 2, 0, []int{2, 3}, []int{1, 0}}},
		{"b scalar", full, layout{"", 1, 0, []int{2, 3}, []int{0, 0}}},
		{"a broadcast, b transposed", layout{"", 3, 0, []int{2, 3}, []int{0, 1}}, layout{"", 6, 0, []int{2, 3}, []int{1, 2}}},
		{"3-d permuted and broadcast", layout{"", 30, 5, []int{2, 3, 4}, []int{1, 2, 6}}, layout{"", 3, 0, []int{2, 3, 4}, []int{0, 1, 0}}},
	}
	// Large enough to be split across workers: the contiguous case takes
	// the CPU device's fast loops, the broadcast one its general loop.
	largePairs := []pair{
		{"large, contiguous", layout{"", 42000, 0, []int{20, 30, 70}, []int{2100, 70, 1}}, layout{"", 42000, 0, []int{20, 30, 70}, []int{2100, 70, 1}}},
		{"large, b broadcast", layout{"", 42000, 0, []int{20, 30, 70}, []int{2100, 70, 1}}, layout{"", 30, 0, []int{20, 30, 70}, []int{0, 1, 0}}},
	}
	for op := device.BinaryOp(0); op < device.NumBinaryOps; op++ { // every op, new ones included
		prs := pairs
		switch op {
		case device.Add, device.Sub, device.Mul, device.ReLUGrad, device.GELUGrad:
			prs = append(prs, largePairs...)
		}
		for _, pr := range prs {
			name := fmt.Sprintf("%v %s", op, pr.name)
			av, bv := seq(pr.a.size, -2, 2), binaryInputs(op, pr.b.size)
			a := e.storage(av, pr.a.off, pr.a.shape, pr.a.strides)
			b := e.storage(bv, pr.b.off, pr.b.shape, pr.b.strides)
			dst := e.tensor(pr.a.shape, nil)
			e.ok(e.k.Binary(op, dst, a, b), "Binary %s", name)
			ga, gb := gather(av, pr.a.off, pr.a.shape, pr.a.strides), gather(bv, pr.b.off, pr.b.shape, pr.b.strides)
			want := make([]float64, len(ga))
			for i := range want {
				want[i] = refBinary(op, ga[i], gb[i])
			}
			e.near(name, e.read(dst), want)
		}
		// In place: dst is a.
		av, bv := seq(6, -2, 2), binaryInputs(op, 3)
		a := e.tensor([]int{2, 3}, av)
		b := e.storage(bv, 0, []int{2, 3}, []int{0, 1})
		e.ok(e.k.Binary(op, a, a, b), "Binary %v in place", op)
		want := make([]float64, 6)
		for i := range want {
			want[i] = refBinary(op, float64(av[i]), float64(bv[i%3]))
		}
		e.near(op.String()+" in place", e.read(a), want)
	}
	// Maximum propagates NaN from either side, as torch.maximum does.
	nan := float32(math.NaN())
	a := e.tensor([]int{4}, []float32{nan, 1, 2, nan})
	b := e.tensor([]int{4}, []float32{0, nan, 3, nan})
	dst := e.tensor([]int{4}, nil)
	e.ok(e.k.Binary(device.Maximum, dst, a, b), "Maximum with NaN")
	e.near("Maximum with NaN", e.read(dst), []float64{math.NaN(), math.NaN(), 3, math.NaN()})
}
