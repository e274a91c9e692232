package train_test

import (
	"context"
	"errors"
	"testing"

	"ferry/device"
	"ferry/nn"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// fakePlotter records what the Trainer hands it.
type fakePlotter struct {
	checkErr, plotErr error
	checks, plots     int
	data              train.PlotData
	steps             []int // the training curve's steps, copied during Plot
}

func (f *fakePlotter) Check() error { f.checks++; return f.checkErr }

func (f *fakePlotter) Plot(d train.PlotData) ([]string, error) {
	f.plots++
	f.data = d
	for _, p := range d.History.Train {
		f.steps = append(f.steps, p.Step)
	}
	return []string{"a.png", "b.svg"}, f.plotErr
}

// titled is the MLP task with a title.
type titled struct{ *traintest.MLP }

func (titled) Title() string { return "the MLP" }

// The Plotter is checked once in New and called once at the run's end
// with the whole curve, the task's title, the device and one step's
// memory; the files it returns are the result's. A Check error refuses
// the run before any step as a ConfigError for Plots; a Plot error fails
// the run.
func TestPlotterHook(t *testing.T) {
	dev := cpu(t)
	task := titled{&traintest.MLP{Dev: dev, Layers: 1, Width: 8, Rows: 4, Seed: 1}}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewAdamW(model.Parameters(), 1e-3)
	defer opt.Release()
	train1 := func(p train.Plotter, steps, stopAfter int) (*train.Result, error) {
		tr, err := train.New(dev, task, train.Config{Steps: steps, StopAfter: stopAfter, Optimizer: opt, Plots: p})
		if err != nil {
			return nil, err
		}
		defer tr.Close()
		return tr.Run(context.Background())
	}

	p := &fakePlotter{}
	res, err := train1(p, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.checks != 1 || p.plots != 1 {
		t.Fatalf("Check called %d times, Plot %d; want 1 and 1", p.checks, p.plots)
	}
	if len(p.steps) != 4 || p.steps[0] != 1 || p.steps[3] != 4 {
		t.Errorf("Plot saw the curve's steps %v, want 1…4", p.steps)
	}
	if p.data.Title != "the MLP" || p.data.Device != dev.Name() {
		t.Errorf("title %q, device %q", p.data.Title, p.data.Device)
	}
	if len(p.data.Memory) == 0 {
		t.Error("no memory samples of a step")
	}
	var peak int64
	for _, s := range p.data.Memory {
		peak = max(peak, s.Bytes[device.Parameter])
	}
	if peak == 0 {
		t.Errorf("the memory samples hold no parameter bytes: %v", p.data.Memory)
	}
	if len(res.Plots) != 2 || res.Plots[0] != "a.png" {
		t.Errorf("Result.Plots %v", res.Plots)
	}

	// A run of one step records it; a run stopped before its second step
	// records none.
	p = &fakePlotter{}
	if _, err := train1(p, 1, 0); err != nil || p.plots != 1 || len(p.data.Memory) == 0 {
		t.Errorf("one step: %v, %d plots, %d memory samples", err, p.plots, len(p.data.Memory))
	}
	p = &fakePlotter{}
	if _, err := train1(p, 4, 1); err != nil || p.plots != 1 || p.data.Memory != nil {
		t.Errorf("stopped after one step: %v, %d plots, %d memory samples", err, p.plots, len(p.data.Memory))
	}

	boom := errors.New("boom")
	p = &fakePlotter{checkErr: boom}
	_, err = train1(p, 2, 0)
	var ce *train.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Plots" || !errors.Is(err, boom) || p.plots != 0 {
		t.Errorf("a failing Check: %v (Plot called %d times)", err, p.plots)
	}

	p = &fakePlotter{plotErr: boom}
	if _, err := train1(p, 2, 0); !errors.Is(err, boom) {
		t.Errorf("a failing Plot: %v", err)
	}
}

// A Plotter changes nothing of the training: the weights are those of a
// run without one.
func TestPlotterChangesNoBits(t *testing.T) {
	bits := func(p train.Plotter) [][]float32 {
		_, params, _, err := run(t, train.Config{Steps: 3, Plots: p})
		if err != nil {
			t.Fatal(err)
		}
		return params
	}
	if !sameBits(bits(nil), bits(&fakePlotter{})) {
		t.Error("a Plotter changed the trained weights")
	}
}
