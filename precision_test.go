package ferry_test

import (
	"errors"
	"math"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

// bf16Of is f rounded to bfloat16 and widened back.
func bf16Of(f float32) float32 { return device.FromBFloat16(device.ToBFloat16(f)) }

func TestCastRoundsAndItsGradientCastsBack(t *testing.T) {
	dev := newCPU(t, device.Options{})
	vals := []float32{0, -0, 1, 1.00390625, 1.01171875, 3.14159, -2.7182817, 1e-40, 3.4e38, float32(math.Inf(1)), float32(math.NaN())}
	x := ferry.FromFloat32s(dev, vals, len(vals)).RequireGrad()
	defer x.Release()
	err := ferry.Step(func(tp *ferry.Tape) error {
		b := ferry.Cast(tp.Input(x), device.BFloat16)
		if b.DType() != device.BFloat16 || b.Bytes() != int64(2*len(vals)) {
			t.Fatalf("cast: %s, %d bytes", b.DType(), b.Bytes())
		}
		w := ferry.Cast(b, device.Float32)
		got := w.Float32s()
		for i, v := range vals {
			want := bf16Of(v)
			if math.Float32bits(got[i]) != math.Float32bits(want) && !(math.IsNaN(float64(v)) && math.IsNaN(float64(got[i]))) {
				t.Errorf("element %d: %v rounds to %v, want %v", i, v, got[i], want)
			}
		}
		// d/dx Σ 3·cast(x) = 3 rounded through bfloat16: exactly 3.
		l := ferry.Sum(ferry.Scale(w, 3))
		return l.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	g := x.Grad()
	if g.DType() != device.Float32 {
		t.Fatalf("the gradient of a float32 tensor is %s", g.DType())
	}
	for i, v := range g.Float32s() {
		if v != 3 {
			t.Errorf("grad[%d] = %v, want 3", i, v)
		}
	}
}

func TestAutocastLinearIsBF16WithFloat32Accumulation(t *testing.T) {
	dev := newCPU(t, device.Options{})
	const rows, in, out = 5, 37, 3
	xs, ws, bs := make([]float32, rows*in), make([]float32, out*in), make([]float32, out)
	for i := range xs {
		xs[i] = float32(math.Sin(float64(i)*0.37)) * 1.7
	}
	for i := range ws {
		ws[i] = float32(math.Cos(float64(i)*0.11)) * 0.3
	}
	for i := range bs {
		bs[i] = 0.1 * float32(i+1)
	}
	x := ferry.FromFloat32s(dev, xs, rows, in)
	w := ferry.FromFloat32s(dev, ws, out, in).RequireGrad()
	b := ferry.FromFloat32s(dev, bs, out).RequireGrad()
	defer func() { x.Release(); w.Release(); b.Release() }()
	err := ferry.Step(func(tp *ferry.Tape) error {
		var y *ferry.Tensor
		tp.Autocast(device.BFloat16, func() { y = ferry.Linear(tp.Input(x), w, b) })
		if y.DType() != device.BFloat16 {
			t.Fatalf("Linear under autocast returned %s", y.DType())
		}
		got := ferry.Cast(y, device.Float32).Float32s()
		for r := 0; r < rows; r++ {
			for o := 0; o < out; o++ {
				var acc float64
				for k := 0; k < in; k++ {
					acc += float64(bf16Of(xs[r*in+k])) * float64(bf16Of(ws[o*in+k]))
				}
				acc += float64(bf16Of(bs[o]))
				want := bf16Of(float32(acc))
				// float32 accumulation in another order may land one
				// bfloat16 step away at most.
				if d := math.Abs(float64(got[r*out+o] - want)); d > math.Abs(float64(want))/128 {
					t.Errorf("y[%d,%d] = %v, want %v", r, o, got[r*out+o], want)
				}
			}
		}
		l := ferry.Sum(y)
		if l.DType() != device.Float32 {
			t.Errorf("Sum of bfloat16 is %s; sums compute in float32", l.DType())
		}
		return l.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Grad().DType() != device.Float32 || b.Grad().DType() != device.Float32 {
		t.Fatalf("parameter gradients: %s, %s; want float32", w.Grad().DType(), b.Grad().DType())
	}
	// dW[o,k] = Σ_r bf16(x[r,k]) (the output gradient is 1), rounded to
	// bfloat16 as the cast copy's gradient; db = rows, exactly.
	gw := w.Grad().Float32s()
	for o := 0; o < out; o++ {
		for k := 0; k < in; k++ {
			var acc float32
			for r := 0; r < rows; r++ {
				acc += bf16Of(xs[r*in+k])
			}
			if d := math.Abs(float64(gw[o*in+k] - bf16Of(acc))); d > math.Abs(float64(acc))/128 {
				t.Errorf("dW[%d,%d] = %v, want about %v", o, k, gw[o*in+k], bf16Of(acc))
			}
		}
	}
	for i, v := range b.Grad().Float32s() {
		if v != rows {
			t.Errorf("db[%d] = %v, want %d", i, v, rows)
		}
	}
}

// Under autocast a parameter is cast once per tape however often it is
// used, and the copies go with the tape.
func TestAutocastCastsParametersOncePerTape(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	w := ferry.Zeros(dev, 256, 256).RequireGrad()
	defer w.Release()
	x := ferry.Zeros(dev, 4, 256)
	defer x.Release()
	alloc := dev.Allocator()
	before := alloc.Allocated()
	err := ferry.Step(func(tp *ferry.Tape) error {
		h := tp.Input(x)
		var a, b, c *ferry.Tensor
		tp.Autocast(device.BFloat16, func() {
			a = ferry.Linear(h, w, nil)
			m0 := alloc.Allocated()
			b = ferry.Linear(a, w, nil) // a is bfloat16 already: no cast of a, none of w
			c = ferry.Linear(b, w, nil)
			// Two outputs of 4×256 bfloat16 and nothing else.
			if grown := alloc.Allocated() - m0; grown != 2*4*256*2 {
				t.Errorf("two more uses of w allocated %d bytes, want %d (the outputs only)", grown, 2*4*256*2)
			}
		})
		l := ferry.Mean(c)
		return l.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := alloc.Allocated() - before; got != w.Grad().Bytes() {
		t.Errorf("after the step %d bytes are held beyond w's gradient (%d): the cast copies leaked", got, w.Grad().Bytes())
	}
	w.Grad().Release()
}

// What an op saves of a bfloat16 input stays bfloat16, though the op
// computes in float32: GELU of a bfloat16 tensor keeps 2 bytes an element.
func TestOpsOnBF16SaveBF16(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	const n = 1 << 16
	x := ferry.Zeros(dev, n).RequireGrad()
	defer x.Release()
	alloc := dev.Allocator()
	err := ferry.Step(func(tp *ferry.Tape) error {
		b := ferry.Cast(tp.Input(x), device.BFloat16)
		m0 := alloc.Allocated()
		g := ferry.GELU(b) // saves b
		if g.DType() != device.BFloat16 {
			t.Errorf("GELU of bfloat16 is %s", g.DType())
		}
		b.Release()
		// Held now: b (saved by GELU) and g, 2 bytes an element each.
		if got, want := alloc.Allocated()-m0, int64(n*2); got != want {
			t.Errorf("GELU holds %d bytes beyond its input, want %d (its bfloat16 output; the input saved as bfloat16)", got, want)
		}
		sm := ferry.Softmax(g)
		if sm.DType() != device.Float32 {
			t.Errorf("Softmax of bfloat16 is %s; softmax computes in float32", sm.DType())
		}
		mixed := ferry.Add(sm, g)
		if mixed.DType() != device.Float32 {
			t.Errorf("float32 + bfloat16 is %s; want float32", mixed.DType())
		}
		return ferry.Sum(mixed).Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	if x.Grad().DType() != device.Float32 {
		t.Errorf("x's gradient is %s", x.Grad().DType())
	}
	x.Grad().Release()
}

func TestAutocastRefusesFloat16AndDevicesWithoutBF16(t *testing.T) {
	dev := newCPU(t, device.Options{})
	err := ferry.Step(func(tp *ferry.Tape) error {
		tp.Autocast(device.Float16, func() {})
		return nil
	})
	var fe *ferry.Error
	if !errors.As(err, &fe) {
		t.Fatalf("Autocast(Float16): %v, want an *ferry.Error", err)
	}
	x := ferry.FromFloat32s(dev, []float32{1, 2}, 2)
	defer x.Release()
	err = ferry.Catch(func() error { ferry.Cast(x, device.Float16).Release(); return nil })
	var ue *device.UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatalf("Cast to float16: %v, want a *device.UnsupportedError", err)
	}
	err = ferry.Catch(func() error { ferry.Cast(ferry.FromInt32s(dev, []int32{1}, 1), device.BFloat16).Release(); return nil })
	if err == nil {
		t.Fatal("Cast of int32 indices to bfloat16 succeeded")
	}
}
