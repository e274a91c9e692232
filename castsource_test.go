package ferry_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
)

// A tape's cast source (SetCastSource) stands for the tape's own cast of
// a parameter under bfloat16 autocast: given the rounding of the
// parameter, the products, the loss and the parameter's gradient are the
// bits of the tape's own cast, and every product asks the source; a
// source that gives a tensor of the wrong type or size is an error that
// names it.
func TestCastSourceStandsForTheTapesCast(t *testing.T) {
	dev := newCPU(t, device.Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, 6*5)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	w := ferry.FromFloat32s(dev, vals, 6, 5).RequireGrad()
	defer w.Release()
	x := ferry.FromFloat32s(dev, vals[:4*5], 4, 5)
	defer x.Release()
	low := ferry.Cast(w, device.BFloat16) // the rounding of w, on no tape
	defer low.Release()
	run := func(source func(*ferry.Tensor) *ferry.Tensor) (loss float32, grad []float32, err error) {
		w.SetGrad(nil)
		err = ferry.Step(func(tp *ferry.Tape) error {
			if source != nil {
				tp.SetCastSource(source)
			}
			var l *ferry.Tensor
			tp.Autocast(device.BFloat16, func() {
				h := ferry.Linear(tp.Input(x), w, nil) // w as it is
				y := ferry.MatMul(h, w)                // again, cached
				l = ferry.Sum(ferry.Square(ferry.Cast(y, device.Float32)))
			})
			loss = l.Item()
			return l.Backward()
		})
		if err == nil {
			grad = w.Grad().Float32s()
		}
		return loss, grad, err
	}
	wantLoss, wantGrad, err := run(nil)
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	gotLoss, gotGrad, err := run(func(p *ferry.Tensor) *ferry.Tensor {
		asked++
		if p.Storage() != w.Storage() {
			return nil
		}
		return low
	})
	if err != nil {
		t.Fatal(err)
	}
	if asked != 1 { // once per tape: the copy is cached
		t.Errorf("the source was asked %d times, want 1", asked)
	}
	if math.Float32bits(gotLoss) != math.Float32bits(wantLoss) {
		t.Fatalf("loss %v with the source, %v without", gotLoss, wantLoss)
	}
	for i := range wantGrad {
		if math.Float32bits(gotGrad[i]) != math.Float32bits(wantGrad[i]) {
			t.Fatalf("gradient[%d] %v with the source, %v without", i, gotGrad[i], wantGrad[i])
		}
	}
	short := ferry.FromFloat32s(dev, vals[:5], 5)
	defer short.Release()
	shortLow := ferry.Cast(short, device.BFloat16)
	defer shortLow.Release()
	for _, bad := range []*ferry.Tensor{w, shortLow} {
		_, _, err := run(func(*ferry.Tensor) *ferry.Tensor { return bad })
		if err == nil || !strings.Contains(err.Error(), "cast source") {
			t.Errorf("a source giving %v %v: error %v, want one naming the cast source", bad.DType(), bad.Shape(), err)
		}
	}
}
