package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/train"
)

func init() {
	register(command{
		name:    "train mnist",
		summary: "train an MLP on MNIST (the data ships in a Go module) and report test accuracy",
		setup:   setupTrainMNIST,
	})
}

// mnistTask is an MLP classifier on MNIST: Linear+ReLU hidden layers
// (PyTorch's nn.Sequential names: 0.weight, 2.weight, …), cross-entropy.
type mnistTask struct {
	dev       device.Device
	data      *train.MNIST
	seq       *nn.Sequential
	linear    []*nn.Linear
	batchSize int
	seed      uint64
	steps     int // per epoch
	depth     int
	width     int
}

func newMNISTTask(dev device.Device, data *train.MNIST, depth, width, batch int, seed uint64) (*mnistTask, error) {
	t := &mnistTask{dev: dev, data: data, batchSize: batch, seed: seed, depth: depth, width: width}
	t.steps = (data.TrainCount() + batch - 1) / batch
	rng := rand.New(rand.NewPCG(seed, 0x6d6c70))
	var mods []nn.Module
	in := data.Pixels()
	for i := 0; i <= depth; i++ {
		out := width
		if i == depth {
			out = 10
		}
		l, err := nn.NewLinear(dev, in, out, true, rng)
		if err != nil {
			for _, l := range t.linear {
				nn.Release(l)
			}
			return nil, err
		}
		t.linear = append(t.linear, l)
		mods = append(mods, l)
		if i < depth {
			mods = append(mods, nn.ReLU{})
		}
		in = out
	}
	t.seq = nn.NewSequential(mods...)
	return t, nil
}

func (t *mnistTask) describe() string {
	return fmt.Sprintf("MLP %d→%s→10 (%d hidden layers of %d, ReLU), batch %d, on MNIST (%d training, %d test images)",
		t.data.Pixels(), repeatWidth(t.width, t.depth), t.depth, t.width, t.batchSize, t.data.TrainCount(), t.data.TestCount())
}

func (t *mnistTask) title() string {
	return fmt.Sprintf("MLP %d×%d on MNIST, batch %d", t.depth, t.width, t.batchSize)
}

func repeatWidth(w, n int) string {
	s := ""
	for i := 0; i < n; i++ {
		if i > 0 {
			s += "→"
		}
		s += fmt.Sprint(w)
	}
	return s
}

func (t *mnistTask) model() nn.Module { return t.seq }

func (t *mnistTask) forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	if !recompute {
		return t.seq.Forward(x)
	}
	// Each hidden Linear+ReLU is a checkpointed segment, named as
	// Sequential names it; the last Linear runs plainly.
	h := x
	for i, l := range t.linear {
		var y *ferry.Tensor
		tape.PushModule(fmt.Sprint(2 * i))
		if i < len(t.linear)-1 {
			y = nn.Checkpoint{Module: &nn.Sequential{Modules: []nn.Module{l, nn.ReLU{}}}}.Forward(h)
		} else {
			y = l.Forward(h)
		}
		tape.PopModule()
		if h != x {
			h.Release()
		}
		h = y
	}
	return h
}

func (t *mnistTask) loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(out, y) }

// batch takes the step's slice of its epoch's order.
func (t *mnistTask) batch(step, micro int) (x, y *ferry.Tensor, items int) {
	// With accumulation, micro-batches are consecutive slices.
	_ = micro
	i := step - 1
	epoch, k := i/t.steps, i%t.steps
	order := train.EpochOrder(t.seed, epoch, t.data.TrainCount())
	idx := order[k*t.batchSize : min((k+1)*t.batchSize, len(order))]
	x, y = train.Gather(t.dev, t.data.TrainImages, t.data.TrainLabels, t.data.Pixels(), idx)
	return x, y, len(idx)
}

func (t *mnistTask) setStep(uint64)   {}
func (t *mnistTask) setTraining(bool) {}

// evaluate runs the test set: accuracy and mean cross-entropy.
func (t *mnistTask) evaluate() (map[string]float64, error) {
	n := t.data.TestCount()
	const chunk = 1000
	correct, lossSum := 0, 0.0
	for at := 0; at < n; at += chunk {
		idx := make([]int, 0, chunk)
		for j := at; j < min(at+chunk, n); j++ {
			idx = append(idx, j)
		}
		x, y := train.Gather(t.dev, t.data.TestImages, t.data.TestLabels, t.data.Pixels(), idx)
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				logits := t.seq.Forward(tape.Input(x))
				lossSum += float64(ferry.CrossEntropy(logits, tape.Input(y)).Item()) * float64(len(idx))
				vals, labels := logits.Float32s(), y.Int32s()
				for r := range idx {
					best := 0
					for c := 1; c < 10; c++ {
						if vals[r*10+c] > vals[r*10+best] {
							best = c
						}
					}
					if int32(best) == labels[r] {
						correct++
					}
				}
			})
			return nil
		})
		x.Release()
		y.Release()
		if err != nil {
			return nil, err
		}
	}
	return map[string]float64{"test_accuracy": float64(correct) / float64(n), "test_loss": lossSum / float64(n)}, nil
}

func (t *mnistTask) identity() map[string]any {
	return map[string]any{"task": "mnist", "depth": t.depth, "width": t.width, "batch": t.batchSize, "seed": t.seed}
}

func (t *mnistTask) release() { nn.Release(t.seq) }

func setupTrainMNIST(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	var o trainOptions
	o.register(fs, 1e-3, "adamw")
	data := fs.String("data", "", "directory holding MNIST's four .gz files (default: the GoMNIST module's)")
	depth := fs.Int("depth", 2, "hidden layers")
	width := fs.Int("width", 512, "units per hidden layer")
	epochs := fs.Int("epochs", 3, "passes over the training set")
	fs.IntVar(&o.batch, "batch", 64, "images per step")
	fs.IntVar(&o.steps, "steps", 0, "optimizer steps (default: --epochs passes over the training set)")
	fs.IntVar(&o.evalEvery, "eval-every", 0, "steps between test-set evaluations (default: each epoch)")
	return func(out io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if err := positive(set, map[string]int{"width": *width, "epochs": *epochs}); err != nil {
			return err
		}
		if *depth < 0 {
			return fmt.Errorf("--depth must be ≥ 0")
		}
		if set["steps"] && set["epochs"] {
			return fmt.Errorf("give --epochs or --steps, not both")
		}
		if err := o.validate(set); err != nil {
			return err
		}
		if o.accum != 1 {
			return fmt.Errorf("--accum is for train text; give mnist a larger --batch")
		}
		if *depth > 1000 {
			return fmt.Errorf("--depth %d: at most 1000 hidden layers", *depth)
		}
		o.unit = "samples"
		ds, err := train.LoadMNIST(*data)
		if err != nil {
			return err
		}
		if o.batch > ds.TrainCount() {
			return fmt.Errorf("--batch %d is more than the %d training images", o.batch, ds.TrainCount())
		}
		dev, err := openTrainDevice(o.device)
		if err != nil {
			return err
		}
		defer dev.Close()
		w, d, pix := int64(*width), int64(*depth), int64(ds.Pixels())
		params := (pix+1)*w + (d-1)*(w+1)*w + (w+1)*10
		if d == 0 {
			params = (pix + 1) * 10
		}
		if err := preflight(dev, params, stateCopies(o.optimizer), int64(o.batch)*w*d*4*2, int64(o.batch)*pix*4*2,
			"lower --width, --depth or --batch"); err != nil {
			return err
		}
		task, err := newMNISTTask(dev, ds, *depth, *width, o.batch, o.seed)
		if err != nil {
			return err
		}
		defer task.release()
		if !set["steps"] {
			o.steps = *epochs * task.steps
		}
		if o.evalEvery == 0 {
			o.evalEvery = task.steps
		}
		stop, unlisten := interruptions()
		defer unlisten()
		p := newProgress(out, stderrOf(out), asJSON)
		p.line("%s\non %s, %d steps (%d per epoch), mode %s", task.describe(), dev.Name(), o.steps, task.steps, o.mode)
		sum, err := runTraining(task, dev, &o, p, stop)
		if err != nil {
			return err
		}
		sum.Task = "mnist"
		return finishTraining(out, asJSON, sum, o.unit)
	}
}

// openTrainDevice opens a device that holds values: training on meta
// computes nothing.
func openTrainDevice(name string) (device.Device, error) {
	if kind, _, err := device.ParseName(name); err == nil && kind == "meta" {
		return nil, fmt.Errorf("--device meta records memory but computes no values, so it cannot train; " +
			"use `ferry demo --device meta` or `ferry plan` to size a run, and --device cpu or cuda to train")
	}
	dev, err := device.Open(name, device.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w\n(`ferry doctor` reports which devices ferry found; --device cpu runs anywhere)", err)
	}
	return dev, nil
}
