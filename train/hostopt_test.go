package train_test

import (
	"context"
	"math"
	"testing"

	"ferry/device"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// The Trainer with AdamW's moments on the host, stepping after backward
// and inside it (offload.Setup.OptimizerInBackward), trains bit for bit as
// with them on the device, and the device never holds optimizer state.
func TestTrainerOptimizerStateOnHost(t *testing.T) {
	train1 := func(host, inBwd bool) ([]float64, [][]float32, int64) {
		dev := cpu(t)
		task := &traintest.MLP{Dev: dev, Layers: 3, Width: 16, Rows: 8, Seed: 3}
		model := task.Model()
		defer nn.Release(model)
		var opts []optim.Option
		if host {
			opts = append(opts, optim.OnHost())
		}
		opt := optim.NewAdamW(model.Parameters(), 1e-2, opts...)
		defer opt.Release()
		var losses []float64
		cfg := train.Config{Steps: 4, Optimizer: opt, Memory: offload.Setup{Mode: offload.None, OptimizerInBackward: inBwd}}
		cfg.Hooks.Step = func(s train.StepInfo) { losses = append(losses, s.Loss) }
		tr, err := train.New(dev, task, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		var params [][]float32
		for _, p := range model.Parameters() {
			params = append(params, p.Float32s())
		}
		return losses, params, dev.Allocator().Stats().ByCategory[device.OptimizerState].Peak
	}
	wantLoss, want, _ := train1(false, false)
	for _, inBwd := range []bool{false, true} {
		loss, got, onDev := train1(true, inBwd)
		if !sameBits(got, want) {
			t.Errorf("in backward %v: parameters differ from the device optimizer's", inBwd)
		}
		for i := range wantLoss {
			if math.Float64bits(loss[i]) != math.Float64bits(wantLoss[i]) {
				t.Errorf("in backward %v: step %d loss %v, want %v", inBwd, i, loss[i], wantLoss[i])
			}
		}
		if onDev != 0 {
			t.Errorf("in backward %v: %d bytes of optimizer state on the device", inBwd, onDev)
		}
	}
}
