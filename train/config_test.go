package train_test

import (
	"errors"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"ferry/dist"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// Settings that cannot work together, or with the memory mode, are
// ConfigErrors naming the field too (TestConfigErrors has those that
// fail on their own).
func TestConfigErrorsOfCombinations(t *testing.T) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 1, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	adam := optim.NewAdamW(model.Parameters(), 1e-3)
	defer adam.Release()
	plain := &plainSGD{params: model.Parameters(), lr: 0.1} // neither Stateful nor a Stepper
	dir := t.TempDir()
	cases := []struct {
		field string
		cfg   train.Config
	}{
		{"Optimizer", train.Config{Optimizer: plain, CheckpointDir: filepath.Join(dir, "ck")}},
		{"Resume", train.Config{Optimizer: adam, Resume: true}},
		{"Schedule", train.Config{Optimizer: adam, Schedule: train.Cosine{Peak: -1, Total: 1}}},
		{"Memory", train.Config{Optimizer: adam, Memory: offload.Setup{Mode: "bogus"}}},
		{"Memory", train.Config{Optimizer: plain, Memory: offload.Setup{OptimizerInBackward: true}}},
		{"Memory", train.Config{Optimizer: adam, Memory: offload.Setup{GradsOnHost: true}}},
		{"BucketBytes", train.Config{Optimizer: adam, Comm: dist.NewGroup(2)[0], BucketBytes: -1}},
	}
	for _, c := range cases {
		c.cfg.Steps = 1
		_, err := train.New(dev, task, c.cfg)
		var ce *train.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
}

// A New that fails after setting up the memory mode frees it again, as
// Close does: the disk tier's goroutine of mode offload-disk ends. (The
// device keeps the copy streams it made, in both cases, until it closes.)
func TestNewCleansUpOnError(t *testing.T) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 1, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	plain := &plainSGD{params: model.Parameters(), lr: 0.1}
	setup := offload.Setup{Mode: offload.OffloadDisk, DiskDir: t.TempDir()}
	// settled is the number of goroutines once those ending have ended.
	settled := func() int {
		n := runtime.NumGoroutine()
		for i := 0; i < 50; i++ {
			time.Sleep(5 * time.Millisecond)
			n = min(n, runtime.NumGoroutine())
		}
		return n
	}
	before := settled()
	tr, err := train.New(dev, task, train.Config{Steps: 1, Optimizer: plain, Memory: setup})
	if err != nil {
		t.Fatal(err)
	}
	open := settled()
	tr.Close()
	closed := settled()
	if open <= closed {
		t.Skipf("closing mode offload-disk ended no goroutine (%d before, %d open, %d closed): nothing to observe", before, open, closed)
	}

	setup.OptimizerInBackward = true // plainSGD cannot step inside backward
	_, err = train.New(dev, task, train.Config{Steps: 1, Optimizer: plain, Memory: setup})
	var ce *train.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Memory" {
		t.Fatalf("got %v, want a ConfigError for Memory", err)
	}
	if n := settled(); n-closed > closed-before {
		t.Errorf("a failed New left %d goroutines, a closed Trainer %d: the memory mode was not closed", n-closed, closed-before)
	}
}

// A run whose resume fails gives the checkpoint directory back: the next
// run takes it.
func TestFailedResumeUnlocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	if _, _, _, err := run(t, train.Config{Steps: 2, CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	// Other settings: the checkpoint is refused.
	if _, _, _, err := run(t, train.Config{Steps: 2, Clip: 1, CheckpointDir: dir, Resume: true}); err == nil {
		t.Fatal("a checkpoint of another run was resumed")
	}
	// No Resume: a directory with checkpoints is refused.
	if _, _, _, err := run(t, train.Config{Steps: 2, CheckpointDir: dir}); err == nil {
		t.Fatal("a fresh run wrote into a directory holding checkpoints")
	}
	_, _, res, err := run(t, train.Config{Steps: 3, Overrides: []string{"steps"}, CheckpointDir: dir, Resume: true})
	if err != nil {
		t.Fatalf("the directory stayed locked: %v", err)
	}
	if res.ResumedFrom != 2 || res.Steps != 3 {
		t.Errorf("resumed from %d to %d, want 2 to 3", res.ResumedFrom, res.Steps)
	}
}
