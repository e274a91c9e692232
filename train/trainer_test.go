package train_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/plot"
	"ferry/train/traintest"
)

func cpu(t *testing.T) device.Device {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// run trains a fresh MLP with AdamW under cfg and returns the step losses
// and the parameters' bits.
func run(t *testing.T, cfg train.Config) ([]float64, [][]float32, *train.Result, error) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 3, Width: 16, Rows: 8, Seed: 3}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewAdamW(model.Parameters(), 1e-2)
	defer opt.Release()
	cfg.Optimizer = opt
	var losses []float64
	cfg.Hooks.Step = func(s train.StepInfo) { losses = append(losses, s.Loss) }
	tr, err := train.New(dev, task, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	defer tr.Close()
	res, err := tr.Run(context.Background())
	var params [][]float32
	for _, p := range model.Parameters() {
		params = append(params, p.Float32s())
	}
	return losses, params, res, err
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// Six steps straight equal three, a stop, and three more after a resume,
// bit for bit, with accumulation, clipping, a schedule and offloading, in
// float32 and in bfloat16 mixed precision (which gives other losses).
func TestResumeIsExact(t *testing.T) {
	var fp32 []float64
	for _, prec := range []device.DType{device.Float32, device.BFloat16} {
		t.Run(prec.String(), func(t *testing.T) {
			losses := testResumeIsExact(t, prec)
			if prec == device.Float32 {
				fp32 = losses
			} else if fp32 != nil && slices.Equal(fp32, losses) {
				t.Errorf("bfloat16 gave float32's losses %v: autocast did nothing", losses)
			}
		})
	}
}

func testResumeIsExact(t *testing.T, prec device.DType) []float64 {
	sched := train.Cosine{Peak: 1e-2, Min: 1e-3, Warmup: 2, Total: 6}
	base := train.Config{Steps: 6, Accum: 2, Clip: 0.5, Schedule: sched, Memory: offload.Setup{Mode: offload.Offload}, Precision: prec}
	straight, want, _, err := run(t, base)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first := base
	first.CheckpointDir, first.StopAfter = dir, 3
	l1, _, res, err := run(t, first)
	if err != nil || !res.Stopped || res.Steps != 3 || res.Checkpoint == "" {
		t.Fatalf("first part: %v, %+v", err, res)
	}
	second := base
	second.CheckpointDir, second.Resume = dir, true
	l2, got, res, err := run(t, second)
	if err != nil || res.ResumedFrom != 3 || res.Steps != 6 {
		t.Fatalf("second part: %v, %+v", err, res)
	}
	resumed := append(l1, l2...)
	for i := range straight {
		if math.Float64bits(straight[i]) != math.Float64bits(resumed[i]) {
			t.Fatalf("step %d: loss %v straight, %v resumed", i+1, straight[i], resumed[i])
		}
	}
	if !sameBits(want, got) {
		t.Fatal("parameters differ after the resume")
	}
	if len(res.History.Train) != 6 {
		t.Errorf("the resumed run's history has %d points, want 6", len(res.History.Train))
	}
	return straight
}

// poisoned is a task whose batch at one step holds an infinity.
type poisoned struct {
	*traintest.MLP
	at int
}

func (p poisoned) Batch(step, micro int) (x, y *ferry.Tensor, n int, err error) {
	x, y, n, err = p.MLP.Batch(step, micro)
	if step == p.at {
		v := x.Float32s()
		v[0] = float32(math.Inf(1))
		x.Release()
		x = ferry.FromFloat32s(p.Dev, v, x.Shape()...)
	}
	return x, y, n, err
}

// A step whose loss is not finite stops the run before the optimizer or a
// checkpoint sees it: the last checkpoint is the last step's, and latest
// names the one before it, the newest whose weights gave a finite loss
// (step 3's forward ran on step 2's weights and failed, so step 2 was
// never proven); --keep 1 keeps both.
func TestNonFiniteStepNeverReachesACheckpoint(t *testing.T) {
	dev := cpu(t)
	task := poisoned{&traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 1}, 3}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewSGD(model.Parameters(), 0.1)
	dir := t.TempDir()
	tr, err := train.New(dev, task, train.Config{Steps: 5, Optimizer: opt, CheckpointDir: dir, CheckpointEvery: 1, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	before := [][]float32{}
	_, err = tr.Run(context.Background())
	if !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("got %v, want an error wrapping ErrNonFinite", err)
	}
	for _, p := range model.Parameters() {
		before = append(before, p.Float32s())
		for _, v := range p.Float32s() {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s holds %v after the failed step", p.Name(), v)
			}
		}
	}
	c := &train.Checkpointer{Dir: dir}
	latest, err := c.Latest()
	if err != nil || filepath.Base(latest) != "step-00000001" {
		t.Fatalf("latest %q, %v; want step 1", latest, err)
	}
	latest = c.PathFor(2)
	meta, err := train.ReadMeta(latest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(latest, model, opt, meta.Identity); err != nil {
		t.Fatal(err)
	}
	if !sameBits(before, func() (ps [][]float32) {
		for _, p := range model.Parameters() {
			ps = append(ps, p.Float32s())
		}
		return
	}()) {
		t.Error("the model after the failed step is not the step-2 checkpoint's")
	}
}

// plainSGD is an optimizer ferry does not ship: the Trainer drives it
// through optim.Optimizer alone.
type plainSGD struct {
	params []*ferry.Tensor
	lr     float64
	seen   []float64
}

func (o *plainSGD) Step() error {
	o.seen = append(o.seen, o.lr)
	for _, p := range o.params {
		if g := p.Grad(); g != nil {
			w, d := p.Float32s(), g.Float32s()
			for i := range w {
				w[i] -= float32(o.lr) * d[i]
			}
			src := ferry.FromFloat32s(p.Device(), w, p.Shape()...)
			p.CopyFrom(src)
			src.Release()
		}
	}
	return nil
}
func (o *plainSGD) ZeroGrad() {
	for _, p := range o.params {
		p.SetGrad(nil)
	}
}
func (o *plainSGD) Release()     {}
func (o *plainSGD) Name() string { return "plain-sgd" }
func (o *plainSGD) Hyper() map[string]any {
	return nil
}
func (o *plainSGD) LR() float64      { return o.lr }
func (o *plainSGD) SetLR(lr float64) { o.lr = lr }

func TestCustomOptimizerAndSchedule(t *testing.T) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	opt := &plainSGD{params: model.Parameters(), lr: 1}
	sched := train.Cosine{Peak: 0.1, Min: 0.01, Warmup: 2, Total: 5}
	tr, err := train.New(dev, task, train.Config{Steps: 5, Optimizer: opt, Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, lr := range opt.seen {
		if lr != sched.At(i+1) {
			t.Errorf("step %d ran at lr %v, the schedule says %v", i+1, lr, sched.At(i+1))
		}
	}
	if len(opt.seen) != 5 {
		t.Errorf("%d steps", len(opt.seen))
	}
	// Checkpoints need state that can be saved.
	if _, err := train.New(dev, task, train.Config{Steps: 5, Optimizer: opt, CheckpointDir: t.TempDir()}); err == nil {
		t.Error("a checkpoint directory with a stateless optimizer was accepted")
	}
}

// Cancelling the context ends the run at the next step boundary with a
// checkpoint of the last step done.
func TestCancelCheckpoints(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewAdamW(model.Parameters(), 1e-3)
	defer opt.Release()
	dir := t.TempDir()
	tr, err := train.New(dev, task, train.Config{Steps: 10, Optimizer: opt, CheckpointDir: dir, CheckpointEvery: 100,
		Hooks: train.Hooks{Step: func(s train.StepInfo) {
			if s.Step == 4 {
				cancel()
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Run(ctx)
	if err != nil || !res.Interrupted || res.Steps != 4 || filepath.Base(res.Checkpoint) != "step-00000004" {
		t.Fatalf("%v %+v", err, res)
	}
}

// evaluated has a lower- and a higher-is-better metric.
type evaluated struct {
	*traintest.MLP
	calls int
}

func (e *evaluated) Evaluate() ([]train.Metric, error) {
	e.calls++
	v := []float64{0.5, 0.9, 0.7}[min(e.calls-1, 2)]
	return []train.Metric{{Name: "acc", Value: v, Better: train.Higher}, {Name: "err", Value: v, Better: train.Lower}}, nil
}

func TestBestFollowsEachMetricsDirection(t *testing.T) {
	dev := cpu(t)
	task := &evaluated{MLP: &traintest.MLP{Dev: dev, Layers: 1, Width: 8, Rows: 4, Seed: 1}}
	model := task.Model()
	defer nn.Release(model)
	tr, err := train.New(dev, task, train.Config{Steps: 2, EvalEvery: 1, Optimizer: optim.NewSGD(model.Parameters(), 0.01)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if task.calls != 3 || res.Best[0].Value != 0.9 || res.Best[1].Value != 0.5 {
		t.Fatalf("%d evaluations, best %+v", task.calls, res.Best)
	}
}

// Settings that cannot work fail in New, naming the Config field, before
// any training.
func TestConfigErrors(t *testing.T) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 1, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewAdamW(model.Parameters(), 1e-3)
	defer opt.Release()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	cases := map[string]train.Config{
		"Steps":           {Steps: 0},
		"Accum":           {Steps: 1, Accum: -1},
		"Clip":            {Steps: 1, Clip: math.NaN()},
		"Plots":           {Steps: 1, Plots: plot.Writer{Dir: file}},
		"LogPath":         {Steps: 1, LogPath: fifo},
		"CheckpointDir":   {Steps: 1, CheckpointDir: filepath.Join(file, "sub")},
		"Memory.Policy":   {Steps: 1, Memory: offload.Setup{Mode: offload.PolicyMode, Policy: &offload.Policy{}}},
		"EvalEvery":       {Steps: 1, EvalEvery: -2},
		"CheckpointEvery": {Steps: 1, CheckpointEvery: -1},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		cases["CheckpointDir"] = train.Config{Steps: 1, CheckpointDir: ro}
	}
	for field, cfg := range cases {
		cfg.Optimizer = opt
		_, err := train.New(dev, task, cfg)
		var ce *train.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	if ents, _ := os.ReadDir(ro); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}
