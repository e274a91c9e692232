package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"ferry/device"
	"ferry/device/cpu"
)

// fixture allocates views on a CPU device for kernel tests.
type fixture struct {
	t   *testing.T
	dev device.Device
	k   device.Kernels
	r   *rand.Rand
}

func newFixture(t *testing.T) *fixture {
	d := open(t, device.Options{PoisonFreed: true})
	t.Cleanup(func() { d.Close() })
	return &fixture{t: t, dev: d, k: d.Kernels(), r: rand.New(rand.NewPCG(3, 4))}
}

func (f *fixture) view(shape ...int) device.View {
	n := device.Numel(shape)
	b, err := f.dev.Allocator().Alloc(int64(max(n, 1)*4), device.Activation)
	if err != nil {
		f.t.Fatal(err)
	}
	return device.View{Block: b, Shape: shape, Strides: device.Contiguous(shape)}
}

func vals(v device.View) []float32 {
	b := cpu.Bytes(v.Block)
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)[v.Off : v.Off+v.Numel()]
}

// random fills v with normal values, about one in eight of them special
// (±0, NaN, ±Inf), and returns it.
func (f *fixture) random(v device.View) device.View {
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for i, x := range vals(v) {
		_ = x
		if f.r.IntN(8) == 0 {
			vals(v)[i] = special[f.r.IntN(len(special))]
		} else {
			vals(v)[i] = float32(f.r.NormFloat64())
		}
	}
	return v
}

func (f *fixture) ok(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) same(what string, got, want device.View) {
	f.t.Helper()
	g, w := vals(got), vals(want)
	for i := range w {
		if math.Float32bits(g[i]) != math.Float32bits(w[i]) && !(g[i] != g[i] && w[i] != w[i]) {
			f.t.Fatalf("%s: element %d of %v is %v, want %v", what, i, want.Shape, g[i], w[i])
		}
	}
}

// fusedShapes are [rows, cols] products: odd sizes, single rows and
// columns, and sizes past the point where work is split across goroutines.
var fusedShapes = [][2]int{{1, 1}, {1, 7}, {7, 1}, {3, 5}, {7, 1023}, {1, 1025}, {33, 257}, {256, 1024}, {1025, 7}, {129, 1023},
	{3, 20000}, {100, 9000}} // the last two: columns in bands, rows in at most 16 blocks (Note [column sums])

// TestFusedKernelsMatchUnfused: BiasReLU gives the bits of a broadcast Add
// then a ReLU; ReLUBackwardSum those of ReLUGrad then Sum over the rows.
func TestFusedKernelsMatchUnfused(t *testing.T) {
	defer cpu.SetParallelMin(1)() // split even the small cases across goroutines
	f := newFixture(t)
	fk := f.k.(device.FusedKernels)
	for _, s := range fusedShapes {
		rows, cols := s[0], s[1]
		t.Run(fmt.Sprintf("%dx%d", rows, cols), func(t *testing.T) {
			f.t = t
			z, bias := f.random(f.view(rows, cols)), f.random(f.view(cols))
			// Unfused: y = relu(z + b), b broadcast over rows.
			want := f.view(rows, cols)
			bb := bias
			bb.Shape, bb.Strides = []int{rows, cols}, []int{0, 1}
			f.ok(f.k.Binary(device.Add, want, z, bb))
			f.ok(f.k.Unary(device.ReLU, want, want, 0))
			got := f.view(rows, cols)
			f.ok(fk.BiasReLU(got, z, bias))
			f.same("BiasReLU", got, want)
			f.ok(fk.BiasReLU(z, z, bias)) // in place
			f.same("BiasReLU in place", z, want)

			// Backward: dz = g·[y > 0], db = Σ_rows dz.
			g, y := f.random(f.view(rows, cols)), f.random(f.view(rows, cols))
			wantDz, wantDb := f.view(rows, cols), f.view(cols)
			f.ok(f.k.Binary(device.ReLUGrad, wantDz, g, y))
			db1 := wantDb
			db1.Shape, db1.Strides = []int{1, cols}, []int{cols, 1}
			f.ok(f.k.Sum(db1, wantDz, 1))
			gotDz, gotDb := f.view(rows, cols), f.view(cols)
			f.ok(fk.ReLUBackwardSum(gotDz, gotDb, g, y))
			f.same("ReLUBackwardSum dz", gotDz, wantDz)
			f.same("ReLUBackwardSum db", gotDb, wantDb)
			noSum := f.view(rows, cols)
			f.ok(fk.ReLUBackwardSum(noSum, device.View{}, g, y))
			f.same("ReLUBackwardSum without sum", noSum, wantDz)
			f.ok(fk.ReLUBackwardSum(g, gotDb, g, y)) // in place
			f.same("ReLUBackwardSum in place", g, wantDz)
		})
	}
}

// TestFastPathsMatchGeneral: the contiguous fast paths of Unary, Binary
// and SGDStep give the bits of the general strided loops, which a
// transposed-and-back view forces.
func TestFastPathsMatchGeneral(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	f := newFixture(t)
	for _, s := range fusedShapes {
		rows, cols := s[0], s[1]
		t.Run(fmt.Sprintf("%dx%d", rows, cols), func(t *testing.T) {
			f.t = t
			a, b := f.random(f.view(rows, cols)), f.random(f.view(rows, cols))
			// strided returns a copy of v laid out column-major, viewed
			// row-major: same values, general path.
			strided := func(v device.View) device.View {
				c := f.view(cols, rows)
				vt := v
				vt.Shape, vt.Strides = []int{cols, rows}, []int{1, cols}
				f.ok(f.k.Copy(c, vt))
				c.Shape, c.Strides = []int{rows, cols}, []int{1, rows}
				return c
			}
			as, bs := strided(a), strided(b)
			for _, op := range []device.UnaryOp{device.ReLU, device.Scale} {
				fast, slow := f.view(rows, cols), f.view(rows, cols)
				f.ok(f.k.Unary(op, fast, a, -1.5))
				f.ok(f.k.Unary(op, slow, as, -1.5))
				f.same("Unary "+op.String(), fast, slow)
			}
			for _, op := range []device.BinaryOp{device.Add, device.ReLUGrad} {
				fast, slow := f.view(rows, cols), f.view(rows, cols)
				f.ok(f.k.Binary(op, fast, a, b))
				f.ok(f.k.Binary(op, slow, as, bs))
				f.same("Binary "+op.String(), fast, slow)
			}
			// Plain SGD against the general update (weight decay 0 written
			// as a momentum-free step through the general loop is the same
			// arithmetic: w + (-lr·g)).
			w, g := f.random(f.view(rows*cols)), f.random(f.view(rows*cols))
			want := append([]float32(nil), vals(w)...)
			for i, x := range vals(g) {
				p := -0.01 * x
				want[i] += p
			}
			f.ok(f.k.(device.OptimizerKernels).SGDStep(w, g, device.View{}, device.SGDParams{LR: 0.01}))
			for i, x := range vals(w) {
				if math.Float32bits(x) != math.Float32bits(want[i]) && !(x != x && want[i] != want[i]) {
					t.Fatalf("SGD element %d: %v, want %v", i, x, want[i])
				}
			}
		})
	}
}
