// Command custom trains a model ferry does not ship with the Trainer: an
// autoencoder squeezing 32-dimensional points of a 4-dimensional subspace
// through a 4-wide bottleneck, with checkpoints, a stop and a resume,
// progress, offloading and plots, in a temporary directory it removes.
package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/plot"
)

// autoencoder is the task: a model, batches keyed by step, and a loss.
type autoencoder struct {
	dev   device.Device
	net   *nn.Sequential
	basis *ferry.Tensor // [4, 32]: the subspace the data lies in
}

func (a *autoencoder) Model() nn.Module { return a.net }
func (a *autoencoder) Forward(_ *ferry.Tape, x *ferry.Tensor, _ bool) *ferry.Tensor {
	return a.net.Forward(x)
}
func (a *autoencoder) Loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(out, y) }
func (a *autoencoder) Title() string                           { return "autoencoder 32→4→32" }

func (a *autoencoder) Batch(step, micro int) (x, y *ferry.Tensor, n int, err error) {
	z := ferry.Randn(a.dev, rand.New(rand.NewPCG(uint64(step), uint64(micro))), 256, 4)
	defer z.Release()
	x = ferry.MatMul(z, a.basis) // the points; the target is the input
	return x, x.Clone(), 256, nil
}

func main() {
	dir, _ := os.MkdirTemp("", "ferry-custom-")
	defer os.RemoveAll(dir)
	dev, _ := device.Open("cpu", device.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	lin := func(in, out int) nn.Module { l, _ := nn.NewLinear(dev, in, out, true, rng); return l }
	net := nn.NewSequential(lin(32, 128), nn.GELU{}, lin(128, 4), lin(4, 128), nn.GELU{}, lin(128, 32))
	task := &autoencoder{dev: dev, net: net, basis: ferry.Randn(dev, rng, 4, 32)}
	for _, stopAfter := range []int{150, 0} { // stop at step 150, then resume to the end
		opt := optim.NewAdamW(task.Model().Parameters(), 1e-2)
		tr, err := train.New(dev, task, train.Config{
			Steps: 300, Optimizer: opt, Schedule: train.Cosine{Peak: 1e-2, Min: 1e-3, Warmup: 20, Total: 300},
			Memory:        offload.Setup{Mode: offload.Offload},
			CheckpointDir: dir + "/ckpt", CheckpointEvery: 50, Resume: stopAfter == 0, StopAfter: stopAfter,
			Plots: plot.Writer{Dir: dir + "/plots"}, LogEvery: 50,
			Hooks: train.Hooks{Step: func(s train.StepInfo) {
				if s.Log {
					fmt.Printf("step %3d  loss %.5f  %.0f samples/s\n", s.Step, s.Smoothed, s.ItemsPerSecond)
				}
			}},
		})
		var res *train.Result
		if err == nil {
			res, err = tr.Run(context.Background())
		}
		if err != nil {
			os.RemoveAll(dir)
			log.Fatal(err)
		}
		fmt.Printf("ran to step %d (checkpoint %s), plots %d files, %d B offloaded\n",
			res.Steps, res.Checkpoint[len(dir)+1:], len(res.Plots), res.Offload.BytesToHost)
		tr.Close()
		opt.Release()
	}
}
