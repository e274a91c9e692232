package train_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"ferry/nn"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// jump is a learning rate of 0.01 until step from, 1e30 after: a run that
// diverges with finite weights (about 1e29) whose next loss is not.
type jump struct{ from int }

func (j jump) At(step int) float64 {
	if step >= j.from {
		return 1e30
	}
	return 0.01
}

func latestName(t *testing.T, dir string) string {
	t.Helper()
	p, err := (&train.Checkpointer{Dir: dir}).Latest()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(p)
}

// A step with a learning rate of 1e30 leaves finite weights, which Save's
// check accepts; the next step's loss is not finite. That checkpoint is
// written but never named in latest, and --keep 1 does not prune the last
// good one, whose weights gave a finite loss.
func TestDivergedCheckpointNeverReplacesTheGoodOne(t *testing.T) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewSGD(model.Parameters(), 0.01)
	dir := t.TempDir()
	tr, err := train.New(dev, task, train.Config{Steps: 6, Optimizer: opt, Schedule: jump{3}, CheckpointDir: dir, CheckpointEvery: 1, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(context.Background()); !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("got %v; want the step after the jump to fail", err)
	}
	if got := latestName(t, dir); got != "step-00000002" {
		t.Fatalf("latest names %s; want step-00000002, the last whose weights gave a finite loss", got)
	}
	meta, err := train.ReadMeta(filepath.Join(dir, "step-00000003"))
	if err != nil || !meta.Finite {
		t.Fatalf("step 3 (finite, diverged weights) should be kept beside it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "step-00000001")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("step 1 was not pruned: %v", err)
	}
	// The good one loads and its weights give a finite loss.
	m2 := (&traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 9}).Model()
	defer nn.Release(m2)
	if err := nn.LoadSafetensorsWith(filepath.Join(dir, "step-00000002", "model.safetensors"), m2, nn.LoadOptions{RequireFinite: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range m2.Parameters() {
		for _, v := range p.Float32s() {
			if math.Abs(float64(v)) > 100 {
				t.Fatalf("the good checkpoint holds %v", v)
			}
		}
	}
}

// A run stopped right after a checkpoint (written pending), or between
// checkpoints, proves its last weights with a forward pass and names the
// checkpoint in latest, so that --resume goes on from where it stopped.
func TestStoppedRunNamesItsLastCheckpoint(t *testing.T) {
	for _, c := range []struct {
		every, stop int
		want        string
	}{{1, 2, "step-00000002"}, {2, 3, "step-00000003"}} {
		dev := cpu(t)
		task := &traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 1}
		model := task.Model()
		opt := optim.NewSGD(model.Parameters(), 0.01)
		dir := t.TempDir()
		tr, err := train.New(dev, task, train.Config{Steps: 10, Optimizer: opt, CheckpointDir: dir, CheckpointEvery: c.every, StopAfter: c.stop, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.Run(context.Background())
		if err != nil || !res.Stopped {
			t.Fatalf("%+v %v", res, err)
		}
		if got := latestName(t, dir); got != c.want {
			t.Errorf("every %d, stop after %d: latest names %s, want %s", c.every, c.stop, got, c.want)
		}
		tr.Close()
		nn.Release(model)
	}
}

// A checkpoint whose evaluation at its step is not finite is not written
// at all: the run stops with ErrNonFinite.
func TestNonFiniteEvaluationStopsTheRun(t *testing.T) {
	dev := cpu(t)
	task := &nanEval{MLP: &traintest.MLP{Dev: dev, Layers: 1, Width: 8, Rows: 4, Seed: 1}}
	model := task.Model()
	defer nn.Release(model)
	dir := t.TempDir()
	tr, err := train.New(dev, task, train.Config{Steps: 4, Optimizer: optim.NewSGD(model.Parameters(), 0.01), EvalEvery: 2, CheckpointDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(context.Background()); !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "step-00000002")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the checkpoint of a NaN evaluation was written: %v", err)
	}
}

// nanEval's evaluation is finite at step 0 and NaN afterwards.
type nanEval struct {
	*traintest.MLP
	calls int
}

func (e *nanEval) Evaluate() ([]train.Metric, error) {
	e.calls++
	v := 1.0
	if e.calls > 1 {
		v = math.NaN()
	}
	return []train.Metric{{Name: "loss", Value: v, Better: train.Lower}}, nil
}
