package devicetest

import (
	"fmt"
	"math"

	"ferry/device"
)

// refSum sums the strided view of vals over the axes where dst has size 1
// and the view does not, scaled by alpha.
func refSum(vals []float32, l layout, dstShape []int, alpha float64) []float64 {
	out := make([]float64, device.Numel(dstShape))
	dstStrides := device.Contiguous(dstShape)
	forEach(l.shape, func(idx []int) {
		o := 0
		for d, i := range idx {
			if dstShape[d] != 1 {
				o += i * dstStrides[d]
			}
		}
		out[o] += float64(vals[offset(l.off, idx, l.strides)])
	})
	for i := range out {
		out[i] *= alpha
	}
	return out
}

func testSum(e *env) {
	src3 := []layout{
		{"contiguous", 24, 0, []int{2, 3, 4}, []int{12, 4, 1}},
		{"permuted", 24, 0, []int{2, 3, 4}, []int{1, 2, 6}},
		{"offset and gaps", 60, 5, []int{2, 3, 4}, []int{25, 5, 1}},
		{"broadcast", 12, 0, []int{2, 3, 4}, []int{0, 4, 1}},
	}
	dst3 := [][]int{
		{1, 3, 4}, {2, 1, 4}, {2, 3, 1}, // one axis
		{1, 1, 4}, {2, 1, 1}, // adjacent axes
		{1, 3, 1}, // non-adjacent axes
		{1, 1, 1}, // everything
		{2, 3, 4}, // nothing: a scaled copy
	}
	type sumCase struct {
		src layout
		dst []int
	}
	var cases []sumCase
	for _, l := range src3 {
		for _, d := range dst3 {
			cases = append(cases, sumCase{l, d})
		}
	}
	cases = append(cases,
		sumCase{layout{"size-1 axis", 6, 0, []int{2, 1, 3}, []int{3, 3, 1}}, []int{1, 1, 3}},
		sumCase{layout{"size-1 axis", 6, 0, []int{2, 1, 3}, []int{3, 3, 1}}, []int{2, 1, 1}},
		sumCase{layout{"4-d", 120, 0, []int{2, 3, 4, 5}, []int{60, 20, 5, 1}}, []int{2, 1, 4, 1}},
		sumCase{layout{"4-d", 120, 0, []int{2, 3, 4, 5}, []int{60, 20, 5, 1}}, []int{1, 3, 1, 5}},
		// Large enough to be split across workers.
		sumCase{layout{"large rows", 60000, 0, []int{3, 20000}, []int{20000, 1}}, []int{3, 1}},
		sumCase{layout{"large vector", 40000, 0, []int{40000}, []int{1}}, []int{1}},
		sumCase{layout{"large columns", 30000, 0, []int{2, 50, 300}, []int{15000, 300, 1}}, []int{2, 1, 300}},
		sumCase{layout{"large columns", 30000, 0, []int{100, 300}, []int{300, 1}}, []int{1, 300}},
		sumCase{layout{"large transposed", 30000, 0, []int{300, 100}, []int{1, 300}}, []int{300, 1}},
	)
	for i, c := range cases {
		alpha := float32(1)
		if i%2 == 1 {
			alpha = 0.5
		}
		name := fmt.Sprintf("%s %v→%v alpha %v", c.src.name, c.src.shape, c.dst, alpha)
		vals := seq(c.src.size, -1, 1)
		src := e.storage(vals, c.src.off, c.src.shape, c.src.strides)
		dst := e.tensor(c.dst, nil)
		e.ok(e.k.Sum(dst, src, alpha), "Sum %s", name)
		e.near("Sum "+name, e.read(dst), refSum(vals, c.src, c.dst, float64(alpha)))
	}
}

// --- Softmax ---

func refSoftmax(x []float32, cols int, log bool) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/cols; r++ {
		row := f64(x[r*cols : (r+1)*cols])
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for i, v := range row {
			if log {
				out[r*cols+i] = v - m - math.Log(s)
			} else {
				out[r*cols+i] = math.Exp(v-m) / s
			}
		}
	}
	return out
}

func refSoftmaxBackward(g, y []float32, cols int, log bool) []float64 {
	out := make([]float64, len(g))
	for r := 0; r < len(g)/cols; r++ {
		gr, yr := f64(g[r*cols:(r+1)*cols]), f64(y[r*cols:(r+1)*cols])
		var dot float64
		for i := range gr {
			if log {
				dot += gr[i]
			} else {
				dot += gr[i] * yr[i]
			}
		}
		for i := range gr {
			if log {
				out[r*cols+i] = gr[i] - math.Exp(yr[i])*dot
			} else {
				out[r*cols+i] = yr[i] * (gr[i] - dot)
			}
		}
	}
	return out
}

func toFloat32(v []float64) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return f
}

func testSoftmax(e *env) {
	for _, sh := range [][]int{{4, 7}, {2, 3, 5}, {1, 1}, {3, 1000}} {
		cols := sh[len(sh)-1]
		n := device.Numel(sh)
		x := seq(n, -3, 3)
		if n > cols { // a row of large values: the kernel must subtract the maximum
			for i := cols; i < 2*cols; i++ {
				x[i] += 100
			}
		}
		for _, log := range []bool{false, true} {
			name := fmt.Sprintf("%v log=%v", sh, log)
			src, dst := e.tensor(sh, x), e.tensor(sh, nil)
			e.ok(e.k.Softmax(dst, src, log), "Softmax %s", name)
			want := refSoftmax(x, cols, log)
			e.near("Softmax "+name, e.read(dst), want)

			y := toFloat32(want)
			g := seq(n, -1, 1)
			out, grad, dx := e.tensor(sh, y), e.tensor(sh, g), e.tensor(sh, nil)
			e.ok(e.k.SoftmaxBackward(dx, grad, out, log), "SoftmaxBackward %s", name)
			e.near("SoftmaxBackward "+name, e.read(dx), refSoftmaxBackward(g, y, cols, log))
		}
	}
}

// --- NLL ---

func testNLL(e *env) {
	const rows, cols = 5, 4
	logp := toFloat32(refSoftmax(seq(rows*cols, -2, 2), cols, true))
	target := []int32{1, -100, 3, 0, -1} // negative targets are ignored
	lp := e.tensor([]int{rows, cols}, logp)
	tg := e.tensor([]int{rows}, int32s(target))
	out := e.tensor([]int{1}, nil)
	e.ok(e.k.NLL(out, lp, tg), "NLL")
	var sum float64
	count := 0
	for r, c := range target {
		if c >= 0 {
			sum -= float64(logp[r*cols+int(c)])
			count++
		}
	}
	e.near("NLL", e.read(out), []float64{sum / float64(count)})

	grad := e.tensor([]int{1}, []float32{1.5})
	dx := e.tensor([]int{rows, cols}, fill(rows*cols, float32(math.NaN()))) // every element is written
	e.ok(e.k.NLLBackward(dx, grad, tg), "NLLBackward")
	want := make([]float64, rows*cols)
	for r, c := range target {
		if c >= 0 {
			want[r*cols+int(c)] = -1.5 / float64(count)
		}
	}
	e.near("NLLBackward", e.read(dx), want)

	// No row counted: the mean is NaN, as in PyTorch.
	none := e.tensor([]int{rows}, int32s([]int32{-100, -100, -1, -100, -7}))
	e.ok(e.k.NLL(out, lp, none), "NLL with every target ignored")
	e.near("NLL with every target ignored", e.read(out), []float64{math.NaN()})
	e.ok(e.k.NLLBackward(dx, grad, none), "NLLBackward with every target ignored")
	e.near("NLLBackward with every target ignored", e.read(dx), make([]float64, rows*cols))
}
