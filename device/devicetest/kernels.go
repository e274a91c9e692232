package devicetest

import (
	"fmt"
	"math"
	"testing"

	"ferry/device"
)

var kernelTests = []test{
	{name: "UploadDownload", fn: testUploadDownload},
	{name: "Gemm", fn: testGemm},
	{name: "Copy", fn: testKernelCopy},
	{name: "Fill", fn: testFill},
	{name: "Unary", fn: testUnary},
	{name: "Binary", fn: testBinary},
	{name: "UnaryEdges", fn: testUnaryEdges},
	{name: "BinaryEdges", fn: testBinaryEdges},
	{name: "Sum", fn: testSum},
	{name: "Softmax", fn: testSoftmax},
	{name: "NLL", fn: testNLL},
	{name: "SGDStep", fn: testSGD},
	{name: "AdamWStep", fn: testAdamW},
}

// RunKernels runs only the kernel tests of the suite, or only the named
// ones ("Gemm", "Sum", ...): for a device whose kernels can be switched to
// another backend (the CPU device's pure-Go and OpenBLAS matrix products),
// to test each.
func RunKernels(t *testing.T, open func(t *testing.T, opts device.Options) device.Device, caps Caps, names ...string) {
	runGroups(t, open, caps, []string{"Kernels"}, names)
}

func testUploadDownload(e *env) {
	v := e.tensor([]int{16}, fill(16, -1))
	in := []float32{1, 2, 3, 4, 5}
	part := device.View{Block: v.Block, Off: 4, Shape: []int{5}, Strides: []int{1}}
	e.upload(e.dev, part, in)
	want := f64(fill(16, -1))
	for i, x := range in {
		want[4+i] = float64(x)
	}
	e.near("after Upload at offset 4", e.read(v), want)
	e.near("Download at offset 6", e.read(device.View{Block: v.Block, Off: 6, Shape: []int{3}, Strides: []int{1}}), []float64{3, 4, 5})
	// Special values travel bit for bit.
	special := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -0.0, math.SmallestNonzeroFloat32, math.MaxFloat32}
	w := e.tensor([]int{len(special)}, special)
	if got := e.read(w); got != nil {
		for i := range special {
			if math.Float32bits(got[i]) != math.Float32bits(special[i]) {
				e.Errorf("special value %d: uploaded %x, downloaded %x", i, math.Float32bits(special[i]), math.Float32bits(got[i]))
			}
		}
	}
}

// large is an element count past which the CPU device splits elementwise
// work across goroutines.
const large = 40003

// --- Gemm ---

// refGemm applies p to copies of the storages a, b and c (each holding
// the block's elements from 0) and returns c's storage afterwards.
func refGemm(p device.GemmParams, a, b, c []float32) []float64 {
	out := f64(c)
	for i := 0; i < p.Batch; i++ {
		oa, ob, oc := p.OffA+i*p.StrideA, p.OffB+i*p.StrideB, p.OffC+i*p.StrideC
		for m := 0; m < p.M; m++ {
			for n := 0; n < p.N; n++ {
				var s float64
				for k := 0; k < p.K; k++ {
					ai := oa + m*p.LDA + k
					if p.TransA {
						ai = oa + k*p.LDA + m
					}
					bi := ob + k*p.LDB + n
					if p.TransB {
						bi = ob + n*p.LDB + k
					}
					s += float64(a[ai]) * float64(b[bi])
				}
				ci := oc + m*p.LDC + n
				v := float64(p.Alpha) * s
				if p.Beta != 0 {
					v += float64(p.Beta) * float64(c[ci])
				}
				out[ci] = v
			}
		}
	}
	return out
}

// gemmShape is one product of the Gemm tests.
type gemmShape struct {
	m, n, k, batch         int
	alpha, beta            float32
	broadcastA, broadcastB bool // stride 0
}

var gemmShapes = []gemmShape{
	{m: 3, n: 4, k: 5, batch: 1, alpha: 1, beta: 0},                        // C full of NaN, not read
	{m: 3, n: 4, k: 5, batch: 3, alpha: 0.5, beta: 1, broadcastB: true},    // accumulate; one B for the batch
	{m: 2, n: 5, k: 3, batch: 2, alpha: 2, beta: 0.5, broadcastA: true},    // one A for the batch
	{m: 1, n: 1, k: 7, batch: 2, alpha: 1, beta: 0},                        // dot products
	{m: 37, n: 29, k: 45, batch: 2, alpha: 1, beta: 0, broadcastB: true},   // past one register tile
	{m: 70, n: 65, k: 130, batch: 1, alpha: -1, beta: 1, broadcastB: true}, // past one cache block of k
}

var gemmTransposes = [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}}

// gemmLayout returns the parameters of sh with transposes tr (blocks
// unset), with leading dimensions padded past the row and offsets, and
// the elements each of A, B and C's storages needs.
func gemmLayout(sh gemmShape, tr [2]bool) (p device.GemmParams, na, nb, nc int) {
	p = device.GemmParams{TransA: tr[0], TransB: tr[1], M: sh.m, N: sh.n, K: sh.k, Alpha: sh.alpha, Beta: sh.beta, Batch: sh.batch}
	// Stored shapes, with leading dimensions padded past the row.
	ar, ac := sh.m, sh.k
	if p.TransA {
		ar, ac = sh.k, sh.m
	}
	br, bc := sh.k, sh.n
	if p.TransB {
		br, bc = sh.n, sh.k
	}
	p.LDA, p.LDB, p.LDC = ac+1, bc+2, sh.n+3
	p.OffA, p.OffB, p.OffC = 2, 1, 3
	p.StrideA, p.StrideB, p.StrideC = ar*p.LDA, br*p.LDB, sh.m*p.LDC
	if sh.broadcastA {
		p.StrideA = 0
	}
	if sh.broadcastB {
		p.StrideB = 0
	}
	na = p.OffA + max(1, (sh.batch-1)*p.StrideA+ar*p.LDA)
	nb = p.OffB + max(1, (sh.batch-1)*p.StrideB+br*p.LDB)
	nc = p.OffC + sh.batch*p.StrideC
	return p, na, nb, nc
}

func (sh gemmShape) name(tr [2]bool) string {
	return fmt.Sprintf("%dx%dx%d batch %d transA=%v transB=%v beta=%v", sh.m, sh.n, sh.k, sh.batch, tr[0], tr[1], sh.beta)
}

func testGemm(e *env) {
	for _, sh := range gemmShapes {
		for _, tr := range gemmTransposes {
			name := sh.name(tr)
			p, na, nb, nc := gemmLayout(sh, tr)
			a, b := seq(na, -1, 1), seq(nb, -1.5, 0.5)
			c := seq(nc, -2, 2)
			if sh.beta == 0 {
				c = fill(nc, float32(math.NaN()))
			}
			va, vb, vc := e.tensor([]int{na}, a), e.tensor([]int{nb}, b), e.tensor([]int{nc}, c)
			p.A, p.B, p.C = va.Block, vb.Block, vc.Block
			e.ok(e.k.Gemm(p), "Gemm %s", name)
			// Elements outside C's rows (padding, offset) keep their values.
			e.nearTol("Gemm "+name, e.read(vc), refGemm(p, a, b, c), e.gemmTol()*math.Max(1, float64(sh.k)/16))
		}
	}
}

// --- Copy and Fill ---

// gather returns the elements of the strided view (off, shape, strides)
// of vals, in row-major order.
func gather(vals []float32, off int, shape, strides []int) []float64 {
	out := make([]float64, 0, device.Numel(shape))
	forEach(shape, func(idx []int) {
		out = append(out, float64(vals[offset(off, idx, strides)]))
	})
	return out
}

func offset(off int, idx, strides []int) int {
	for d, i := range idx {
		off += i * strides[d]
	}
	return off
}

// forEach calls fn with each index of shape in row-major order.
func forEach(shape []int, fn func(idx []int)) {
	idx := make([]int, len(shape))
	for n := device.Numel(shape); n > 0; n-- {
		fn(idx)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// layouts are strided views to read inputs through: each names a storage
// size and a view of it with the given shape.
type layout struct {
	name    string
	size    int
	off     int
	shape   []int
	strides []int
}

var copyLayouts = []layout{
	{"contiguous", 6, 0, []int{2, 3}, []int{3, 1}},
	{"transposed", 6, 0, []int{2, 3}, []int{1, 2}},
	{"row broadcast", 3, 0, []int{2, 3}, []int{0, 1}},
	{"column broadcast", 2, 0, []int{2, 3}, []int{1, 0}},
	{"scalar broadcast", 1, 0, []int{2, 3}, []int{0, 0}},
	{"offset and gaps", 120, 7, []int{2, 3, 2}, []int{30, 12, 2}},
	{"size-1 axes", 10, 1, []int{1, 3, 1, 3}, []int{99, 3, 5, 1}},
	{"permuted 4-d", 120, 0, []int{5, 4, 3, 2}, []int{1, 5, 20, 60}},
	{"large transposed", 200 * 200, 0, []int{200, 200}, []int{1, 200}},
	{"large broadcast", 1000, 0, []int{40, 1000}, []int{0, 1}},
}

func testKernelCopy(e *env) {
	for _, l := range copyLayouts {
		vals := seq(l.size, -4, 4)
		src := e.storage(vals, l.off, l.shape, l.strides)
		dst := e.tensor(l.shape, nil)
		e.ok(e.k.Copy(dst, src), "Copy %s", l.name)
		e.near("Copy "+l.name, e.read(dst), gather(vals, l.off, l.shape, l.strides))
	}
	// Int32 data (class indices) is copied bit for bit, NaN patterns
	// included.
	ints := []int32{-1, 0, 7, -100, 1 << 30, 0x7fc00001, -0x00400001, 3}
	src := e.storage(int32s(ints), 0, []int{2, 4}, []int{1, 2})
	dst := e.tensor([]int{2, 4}, nil)
	e.ok(e.k.Copy(dst, src), "Copy of int32")
	if got := e.read(dst); got != nil {
		for i, idx := range []int{0, 2, 4, 6, 1, 3, 5, 7} {
			if int32(math.Float32bits(got[i])) != ints[idx] {
				e.Errorf("int32 Copy: element %d is %d, want %d", i, int32(math.Float32bits(got[i])), ints[idx])
			}
		}
	}
}

func int32s(v []int32) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = math.Float32frombits(uint32(x))
	}
	return f
}

func testFill(e *env) {
	v := e.tensor([]int{20}, fill(20, -1))
	e.ok(e.k.Fill(device.View{Block: v.Block, Off: 3, Shape: []int{2, 5}, Strides: []int{5, 1}}, 2.5), "Fill")
	want := f64(fill(20, -1))
	for i := 3; i < 13; i++ {
		want[i] = 2.5
	}
	e.near("Fill at offset 3", e.read(v), want)
	big := e.tensor([]int{3, 20001}, nil)
	e.ok(e.k.Fill(big, -0.5), "Fill large")
	e.near("Fill large", e.read(big), f64(fill(3*20001, -0.5)))
}

// --- Unary ---

// refUnary is the op's definition in float64, written once in
// device/internal/opgen (device.UnaryOp.Math).
func refUnary(op device.UnaryOp, x, alpha float64) float64 { return op.Math(x, alpha) }

func testUnary(e *env) {
	type input struct {
		lo, hi float32
		alpha  float32
	}
	cases := map[device.UnaryOp][]input{
		device.Log:       {{0.01, 5, 0}},
		device.Sqrt:      {{0, 5, 0}},
		device.Scale:     {{-3, 3, -1.5}},
		device.AddScalar: {{-3, 3, 0.25}},
		device.PowScalar: {{0.01, 3, 2.5}, {-3, 3, 2}, {0.01, 3, 0.5}, {0.5, 3, -1}},
	}
	for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ { // every op, new ones included
		ins, ok := cases[op]
		if !ok {
			ins = []input{{-4, 4, 0}}
		}
		for _, in := range ins {
			// A 3×4 input with a zero in it, read contiguously, transposed
			// and with an offset, then in place.
			vals := seq(12, in.lo, in.hi)
			if in.lo <= 0 && op != device.PowScalar {
				vals[5] = 0
			}
			for _, l := range []layout{
				{"contiguous", 12, 0, []int{3, 4}, []int{4, 1}},
				{"transposed", 12, 0, []int{3, 4}, []int{1, 3}},
				{"offset rows", 12, 2, []int{2, 5}, []int{5, 1}},
			} {
				name := fmt.Sprintf("%v(alpha=%v) %s", op, in.alpha, l.name)
				src := e.storage(vals, l.off, l.shape, l.strides)
				dst := e.tensor(l.shape, nil)
				e.ok(e.k.Unary(op, dst, src, in.alpha), "Unary %s", name)
				want := gather(vals, l.off, l.shape, l.strides)
				for i := range want {
					want[i] = refUnary(op, want[i], float64(in.alpha))
				}
				e.near(name, e.read(dst), want)
			}
			inPlace := e.tensor([]int{12}, vals)
			e.ok(e.k.Unary(op, inPlace, inPlace, in.alpha), "Unary %v in place", op)
			want := f64(vals)
			for i := range want {
				want[i] = refUnary(op, want[i], float64(in.alpha))
			}
			e.near(op.String()+" in place", e.read(inPlace), want)
		}
	}
	// A large input, split across workers.
	vals := seq(large, -4, 4)
	src, dst := e.tensor([]int{large}, vals), e.tensor([]int{large}, nil)
	for _, op := range []device.UnaryOp{device.ReLU, device.Scale, device.GELU} {
		e.ok(e.k.Unary(op, dst, src, 3), "Unary %v large", op)
		want := f64(vals)
		for i := range want {
			want[i] = refUnary(op, want[i], 3)
		}
		e.near(op.String()+" large", e.read(dst), want)
	}
}
