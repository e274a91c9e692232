package ferry_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

// The fused cross-entropy (device.CrossEntropyKernels) gives the loss and
// the logits' gradient of LogSoftmax then NLLLoss bit for bit, ignored
// rows, extreme logits and a sequence of rows included, and saves the
// logits and 8 bytes a row where the two ops save the log-probabilities.
func TestCrossEntropyFusedMatchesTwoOps(t *testing.T) {
	dev := newCPU(t, device.Options{})
	for _, c := range []struct {
		name       string
		rows, V    int
		ignoreEach int
		scale      float64
	}{
		{"small", 4, 5, 0, 1},
		{"vocabulary", 37, 1031, 5, 3},
		{"extreme logits", 6, 64, 3, 80},
		{"every row ignored", 3, 7, 1, 1},
	} {
		rng := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.V)))
		vals := make([]float32, c.rows*c.V)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * c.scale)
		}
		tg := make([]int32, c.rows)
		for r := range tg {
			tg[r] = int32(rng.IntN(c.V))
			if c.ignoreEach > 0 && r%c.ignoreEach == c.ignoreEach-1 {
				tg[r] = ferry.IgnoreIndex
			}
		}
		run := func(fused bool) (loss float32, grad []float32) {
			x := ferry.FromFloat32s(dev, vals, c.rows, c.V).RequireGrad()
			defer x.Release()
			target := ferry.FromInt32s(dev, tg)
			defer target.Release()
			err := ferry.Step(func(tape *ferry.Tape) error {
				var l *ferry.Tensor
				if fused {
					l = ferry.CrossEntropy(tape.Input(x), tape.Adopt(target.To(dev)))
				} else {
					lp := ferry.LogSoftmax(tape.Input(x))
					l = ferry.NLLLoss(lp, tape.Adopt(target.To(dev)))
					lp.Release()
				}
				loss = l.Float32s()[0]
				return l.Backward()
			})
			if err != nil {
				t.Fatal(err)
			}
			return loss, x.Grad().Float32s()
		}
		fl, fg := run(true)
		ul, ug := run(false)
		if math.Float32bits(fl) != math.Float32bits(ul) {
			t.Errorf("%s: fused loss %v, two ops %v", c.name, fl, ul)
		}
		for i := range fg {
			if math.Float32bits(fg[i]) != math.Float32bits(ug[i]) {
				t.Fatalf("%s: gradient element %d: fused %v, two ops %v", c.name, i, fg[i], ug[i])
			}
		}
		if c.name == "every row ignored" && !math.IsNaN(float64(fl)) {
			t.Errorf("every row ignored: loss %v, want NaN as PyTorch", fl)
		}
	}
}

// On the meta device the fused loss keeps the logits and 8 bytes a row
// after forward: what the two ops kept (the log-probabilities, as large as
// the logits) less the logits the caller drops, and no pair of
// [rows, classes] tensors at once.
func TestCrossEntropyFusedMemory(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	const rows, V = 64, 1000
	x := ferry.Zeros(dev, rows, V).RequireGrad()
	defer x.Release()
	target := ferry.FromInt32s(dev, make([]int32, rows))
	defer target.Release()
	var peak, kept int64
	err := ferry.Step(func(tape *ferry.Tape) error {
		before := dev.Allocator().Allocated()
		dev.Allocator().ResetPeak()
		l := ferry.CrossEntropy(tape.Input(x), tape.Adopt(target.To(dev)))
		peak = dev.Allocator().Stats().AllocatedBytes.Peak - before
		kept = dev.Allocator().Allocated() - before
		return l.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	logits := int64(4 * rows * V)
	if peak >= logits/2 || kept >= logits/2 {
		t.Errorf("forward allocated %d bytes at its peak and kept %d; the logits are %d (the two ops made and kept a second copy)", peak, kept, logits)
	}
}
