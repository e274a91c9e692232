package train_test

import (
	"context"
	"testing"

	"ferry"
	"ferry/nn"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// scripted is an MLP whose evaluation gives, after each step, the values
// its script holds for that step (step 0: before the first).
type scripted struct {
	*traintest.MLP
	step   *int
	script map[int][2]float64 // step → loss, accuracy
}

func (s scripted) Batch(step, micro int) (x, y *ferry.Tensor, n int, err error) {
	*s.step = step
	return s.MLP.Batch(step, micro)
}

func (s scripted) Evaluate() ([]train.Metric, error) {
	v := s.script[*s.step]
	return []train.Metric{{Name: "val_loss", Value: v[0]}, {Name: "accuracy", Value: v[1], Better: train.Higher}}, nil
}

// A run stopped after its best evaluation and resumed reports that
// evaluation as its best (the loss lowest, the accuracy highest), as an
// unbroken run does, though the resumed part never matches it.
func TestBestCountsEvaluationsBeforeTheResume(t *testing.T) {
	script := map[int][2]float64{0: {3, 0.1}, 2: {1, 0.7}, 4: {2, 0.4}, 6: {2.5, 0.3}}
	want := map[string]float64{"val_loss": 1, "accuracy": 0.7}
	dir := t.TempDir()
	for _, part := range []struct {
		name string
		cfg  train.Config
	}{
		{"straight", train.Config{}},
		{"first", train.Config{CheckpointDir: dir, StopAfter: 2}},
		{"resumed", train.Config{CheckpointDir: dir, Resume: true}},
	} {
		dev := cpu(t)
		step := 0
		task := scripted{&traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 3}, &step, script}
		model := task.Model()
		opt := optim.NewAdamW(model.Parameters(), 1e-2)
		cfg := part.cfg
		cfg.Steps, cfg.EvalEvery, cfg.Optimizer = 6, 2, opt
		tr, err := train.New(dev, task, cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.Run(context.Background())
		tr.Close()
		opt.Release()
		nn.Release(model)
		if err != nil {
			t.Fatalf("%s: %v", part.name, err)
		}
		if part.name == "first" {
			continue
		}
		if len(res.Best) != 2 {
			t.Fatalf("%s: best %v, want val_loss and accuracy", part.name, res.Best)
		}
		for _, m := range res.Best {
			if m.Value != want[m.Name] {
				t.Errorf("%s: best %s %v, want %v (step 2's)", part.name, m.Name, m.Value, want[m.Name])
			}
		}
	}
}
