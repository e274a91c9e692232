package mlp_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry/data/mnist"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/models/mlp"
)

// The ranks' shares of the test set split it: the number right adds up
// to one process's exactly, the loss to float32 rounding, whatever the
// shares' sizes (2,500 images in 3 shares, chunks of 1,000 cut apart).
func TestClassifierEvaluationShards(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(4, 4))
	set := &mnist.Set{Rows: 4, Cols: 4}
	for i := 0; i < 2500; i++ {
		for range 16 {
			set.TestImages = append(set.TestImages, rng.Float32())
			set.TrainImages = append(set.TrainImages, rng.Float32())
		}
		set.TestLabels = append(set.TestLabels, int32(rng.IntN(10)))
		set.TrainLabels = append(set.TrainLabels, int32(rng.IntN(10)))
	}
	c, err := mlp.NewClassifier(dev, set, 1, 8, 4, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	want, err := c.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	sums, counts := make([]float64, 2), make([]float64, 2)
	for r := range 3 {
		ms, err := c.EvaluateShard(r, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			sums[i] += m.Sum
			counts[i] += m.Count
		}
	}
	if counts[0] != 2500 || sums[0]/counts[0] != want[0].Value {
		t.Errorf("accuracy over the shares %v/%v, one process %v", sums[0], counts[0], want[0].Value)
	}
	if math.Abs(sums[1]/counts[1]-want[1].Value) > 1e-6 {
		t.Errorf("loss over the shares %v, one process %v", sums[1]/counts[1], want[1].Value)
	}
}
