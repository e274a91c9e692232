package main

import (
	"flag"
	"fmt"
	"io"

	"ferry/device"
	"ferry/models/mlp"
	"ferry/train"
)

func init() {
	register(command{
		name:    "train mnist",
		summary: "train an MLP on MNIST (the data ships in a Go module) and report test accuracy",
		setup:   setupTrainMNIST,
	})
}

func setupTrainMNIST(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	var o trainOptions
	o.register(fs, 1, "adamw")
	data := fs.String("data", "", "directory holding MNIST's four .gz files (default: the GoMNIST module's)")
	depth := fs.Int("depth", 2, "hidden layers")
	width := fs.Int("width", 512, "units per hidden layer")
	epochs := fs.Int("epochs", 3, "passes over the training set")
	fs.IntVar(&o.batch, "batch", 64, "images per step")
	fs.IntVar(&o.steps, "steps", 0, "optimizer steps (default: --epochs passes over the training set)")
	fs.IntVar(&o.evalEvery, "eval-every", 0, "steps between test-set evaluations (default: each epoch)")
	return o.ranked(func(out io.Writer, asJSON bool) error { // ranked: leaves the job at the end (ranks.go)
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
		out, err := o.openComm(out)
		if err != nil {
			return err
		}
		if err := o.checkOutputs(); err != nil {
			return err
		}
		o.checkWorld(set)
		ds, dir, err := loadMNIST(*data)
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
		if err := o.preflight(dev, params, int64(o.batch)*w*d*4*2, int64(o.batch)*pix*4*2,
			"lower --width, --depth or --batch"); err != nil {
			return err
		}
		task, err := mlp.NewClassifier(dev, ds, *depth, *width, o.batch, o.comm.Size(), o.seed)
		if err != nil {
			return err
		}
		defer task.Release()
		if task.DataID, err = train.HashPath(dir); err != nil {
			return err
		}
		if !set["steps"] {
			o.steps = *epochs * task.StepsPerEpoch
		}
		if o.evalEvery == 0 {
			o.evalEvery = task.StepsPerEpoch
		}
		ctx, unlisten := interruptContext()
		defer unlisten()
		p := newProgress(out, stderrOf(out), asJSON)
		p.line("%s\non %s, %d steps (%d per epoch), mode %s", task.Describe(), dev.Name(), o.steps, task.StepsPerEpoch, o.modeName())
		sum, err := runTrainer(trainRun{task: task, name: "mnist", describe: task.Describe()}, dev, &o, p, ctx)
		if err != nil {
			return err
		}
		sum.Task = "mnist"
		return finishTraining(out, asJSON, sum, o.unit)
	})
}

// trainDeviceOptions are the options openTrainDevice opens with: none, so
// that a CPU device holds what the machine has free (tests cap it).
var trainDeviceOptions device.Options

// openTrainDevice opens a device that holds values: training on meta
// computes nothing.
func openTrainDevice(name string) (device.Device, error) {
	name = rankDeviceName(name)
	if kind, _, err := device.ParseName(name); err == nil && kind == "meta" {
		return nil, fmt.Errorf("--device meta records memory but computes no values, so it cannot train; " +
			"use `ferry demo --device meta` or `ferry plan` to size a run, and --device cpu or cuda to train")
	}
	dev, err := device.Open(name, trainDeviceOptions)
	if err != nil {
		return nil, fmt.Errorf("%w\n(`ferry doctor` reports which devices ferry found; --device cpu runs anywhere)", err)
	}
	return dev, nil
}
