package devicetest

import (
	"fmt"
	"math"
	"testing"

	"ferry/device"
)

// The edges of float32: every unary and binary op is fed NaN, ±Inf, ±0
// and subnormals (as PyTorch's OpInfo samples feed them), through the
// contiguous and the strided kernels, and checked against the op's
// definition (device.UnaryOp.Math, rounded to float32) here and against
// the reference device in CompareUnary and CompareBinary. NaNs must meet
// NaNs and infinities the same infinity; zeros compare equal whatever
// their sign.
//
// The largest finite values are left out: an op's float64 definition
// overflows where a float32 kernel's intermediates do not, and the
// other way round (x³ inside GELUTanh's gradient), so the reference would
// say nothing about the kernel there.

var edgeValues = []float32{
	float32(math.NaN()),
	float32(math.Inf(1)),
	float32(math.Inf(-1)),
	0,
	float32(math.Copysign(0, -1)),
	math.SmallestNonzeroFloat32, // the smallest subnormal
	-math.SmallestNonzeroFloat32,
	math.Float32frombits(0x007fffff), // the largest subnormal
	-math.Float32frombits(0x007fffff),
	math.Float32frombits(0x00800000), // the smallest normal
	1, -1, 2.5, -0.75,
}

// edgeAlphas are the scalars a unary op is run with on the edges.
func edgeAlphas(op device.UnaryOp) []float32 {
	switch op {
	case device.Scale:
		return []float32{-1.5}
	case device.AddScalar:
		return []float32{0.25}
	case device.PowScalar:
		return []float32{2, 3, 0.5, -1}
	}
	return []float32{0}
}

// edgePairs returns a and b of n·n elements holding every pair of
// edgeValues.
func edgePairs() (a, b []float32) {
	n := len(edgeValues)
	a, b = make([]float32, n*n), make([]float32, n*n)
	for i, x := range edgeValues {
		for j, y := range edgeValues {
			a[i*n+j], b[i*n+j] = x, y
		}
	}
	return a, b
}

// run runs f as subtest name of e's test, on e's device, so that one
// op's failure does not hide another's.
func (e *env) run(name string, f func(e *env)) {
	e.Run(name, func(t *testing.T) {
		s := *e
		s.T = t
		f(&s)
	})
}

// round32 is v rounded to float32, as a kernel's result is.
func round32(v float64) float64 { return float64(float32(v)) }

func testUnaryEdges(e *env) {
	// Twice, the second time reversed: on a device with vector loops,
	// every value goes through both a vector body and a scalar tail.
	vals := append([]float32(nil), edgeValues...)
	for i := len(edgeValues) - 1; i >= 0; i-- {
		vals = append(vals, edgeValues[i])
	}
	for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ { // every op, new ones included
		e.run(op.String(), func(e *env) { unaryEdges(e, op, vals) })
	}
}

func unaryEdges(e *env, op device.UnaryOp, vals []float32) {
	n := len(vals)
	for _, alpha := range edgeAlphas(op) {
		for _, l := range []layout{
			{"contiguous", n, 0, []int{n}, []int{1}},
			{"transposed", n, 0, []int{2, n / 2}, []int{1, 2}},
		} {
			name := fmt.Sprintf("%v(alpha=%v) of NaN, ±Inf, ±0 and subnormals, %s", op, alpha, l.name)
			src := e.storage(vals, l.off, l.shape, l.strides)
			dst := e.tensor(l.shape, nil)
			e.ok(e.k.Unary(op, dst, src, alpha), "Unary %s", name)
			want := gather(vals, l.off, l.shape, l.strides)
			for i := range want {
				want[i] = round32(op.Math(want[i], float64(alpha)))
			}
			e.near(name, e.read(dst), want)
		}
	}
}

func testBinaryEdges(e *env) {
	for op := device.BinaryOp(0); op < device.NumBinaryOps; op++ { // every op, new ones included
		e.run(op.String(), func(e *env) { binaryEdges(e, op) })
	}
}

func binaryEdges(e *env, op device.BinaryOp) {
	av, bv := edgePairs()
	n := len(edgeValues)
	for _, pr := range []struct {
		name string
		a, b layout
	}{
		{"contiguous", layout{"", n * n, 0, []int{n * n}, []int{1}}, layout{"", n * n, 0, []int{n * n}, []int{1}}},
		// b's first n elements are edgeValues: a broadcast row (the
		// general loop).
		{"b row broadcast", layout{"", n * n, 0, []int{n, n}, []int{n, 1}}, layout{"", n, 0, []int{n, n}, []int{0, 1}}},
	} {
		name := fmt.Sprintf("%v of NaN, ±Inf, ±0 and subnormals, %s", op, pr.name)
		a := e.storage(av[:pr.a.size], pr.a.off, pr.a.shape, pr.a.strides)
		b := e.storage(bv[:pr.b.size], pr.b.off, pr.b.shape, pr.b.strides)
		dst := e.tensor(pr.a.shape, nil)
		e.ok(e.k.Binary(op, dst, a, b), "Binary %s", name)
		ga, gb := gather(av, pr.a.off, pr.a.shape, pr.a.strides), gather(bv, pr.b.off, pr.b.shape, pr.b.strides)
		want := make([]float64, len(ga))
		for i := range want {
			want[i] = round32(op.Math(ga[i], gb[i]))
		}
		e.near(name, e.read(dst), want)
	}
}
