package train_test

import (
	"context"
	"math"
	"sync"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/dist"
	"ferry/nn"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// sharded is the MLP task with BatchShard: rank r's rows of the batch one
// process draws at size × the rows.
type sharded struct{ *traintest.MLP }

func (s sharded) BatchShard(step, micro, rank, size int) (x, y *ferry.Tensor, n int, err error) {
	whole := &traintest.MLP{Dev: s.Dev, Layers: s.Layers, Width: s.Width, Rows: s.Rows * size, Seed: s.Seed}
	xa, ya, _, err := whole.Batch(step, micro)
	if err != nil {
		return nil, nil, 0, err
	}
	defer xa.Release()
	defer ya.Release()
	cut := func(t *ferry.Tensor) *ferry.Tensor {
		v := t.Float32s()[rank*s.Rows*s.Width : (rank+1)*s.Rows*s.Width]
		return ferry.FromFloat32s(s.Dev, v, s.Rows, s.Width)
	}
	return cut(xa), cut(ya), s.Rows, nil
}

// Three ranks (goroutines of one process) at batch 4 train as one process
// at batch 12, up to float32 rounding of the reduction, with parameters
// bit-identical across ranks (the Trainer checks at the end).
func TestDataParallelEqualsOneProcessAtTheWholeBatch(t *testing.T) {
	const ranks, rows, steps = 3, 4, 5
	train1 := func(comm dist.Comm, rows int) ([]float64, [][]float32, error) {
		dev, err := device.Open("cpu", device.Options{})
		if err != nil {
			return nil, nil, err
		}
		defer dev.Close()
		task := sharded{&traintest.MLP{Dev: dev, Layers: 2, Width: 16, Rows: rows, Seed: 5}}
		model := task.Model()
		defer nn.Release(model)
		opt := optim.NewAdamW(model.Parameters(), 1e-2)
		defer opt.Release()
		var losses []float64
		tr, err := train.New(dev, task, train.Config{Steps: steps, Optimizer: opt, Comm: comm, Clip: 1, BucketBytes: 512, CheckEvery: 1,
			Hooks: train.Hooks{Step: func(s train.StepInfo) { losses = append(losses, s.Loss) }}})
		if err != nil {
			return nil, nil, err
		}
		defer tr.Close()
		if _, err := tr.Run(context.Background()); err != nil {
			return nil, nil, err
		}
		var ps [][]float32
		for _, p := range model.Parameters() {
			ps = append(ps, p.Float32s())
		}
		return losses, ps, nil
	}
	want, wantParams, err := train1(nil, ranks*rows)
	if err != nil {
		t.Fatal(err)
	}
	comms := dist.NewGroup(ranks)
	got := make([][]float64, ranks)
	params := make([][][]float32, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer comms[r].Close() // a failed rank fails the others' collectives
			got[r], params[r], errs[r] = train1(comms[r], rows)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	var worst float64
	for i := range want {
		for r := range got {
			worst = max(worst, math.Abs(got[r][i]-want[i]))
		}
	}
	t.Logf("largest loss difference from one process at batch %d: %.3g", ranks*rows, worst)
	if worst > 1e-5 {
		t.Errorf("losses %v, one process %v", got[0], want)
	}
	var pdiff float64
	for i := range wantParams {
		for j := range wantParams[i] {
			pdiff = max(pdiff, math.Abs(float64(params[1][i][j]-wantParams[i][j])))
		}
	}
	if pdiff > 1e-4 {
		t.Errorf("parameters differ from one process by %.3g", pdiff)
	}
	if !sameBits(params[0], params[1]) || !sameBits(params[0], params[2]) {
		t.Error("ranks' parameters differ")
	}
}
