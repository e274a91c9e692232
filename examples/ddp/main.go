// Command ddp trains L × (Linear(W, W) + ReLU) data-parallel on the ranks
// of an MPI job with dist.GradientReducer: each rank takes its own slice of
// every batch, gradients are averaged in buckets while backward runs, and
// at the end the ranks check that their parameters are bit-identical.
//
//	go build -o ddp ./examples/ddp
//	mpirun -np 2 ./ddp                    # (as root: mpirun --allow-run-as-root)
//	./ddp                                 # without mpirun: one rank, dist.Local
//	mpirun -np 2 ./ddp -overlap=false     # all-reduce only after backward, to compare
//
// Rank 0 prints the step time, the part of it spent in Wait (communication
// not hidden behind backward), and the reducer's counters.
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"time"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/dist"
	"ferry/dist/mpi"
	"ferry/nn"
	"ferry/optim"
)

func main() {
	layers := flag.Int("layers", 8, "layers")
	width := flag.Int("width", 1024, "layer width")
	batch := flag.Int("batch", 64, "batch size per rank")
	steps := flag.Int("steps", 6, "training steps (the first is not timed)")
	bucketMiB := flag.Float64("bucket-mib", 25, "gradient MiB per all-reduce")
	overlap := flag.Bool("overlap", true, "start each bucket's all-reduce during backward (false: all after backward)")
	flag.Parse()

	comm, err := mpi.Auto()
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	rank, size := comm.Rank(), comm.Size()

	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(uint64(rank)+1, 2)) // different on purpose: Broadcast makes them equal
	var model nn.ModuleList
	for range *layers {
		l, err := nn.NewLinear(dev, *width, *width, true, rng)
		if err != nil {
			log.Fatal(err)
		}
		model = append(model, l, nn.ReLU{})
	}
	params := model.Parameters()
	red, err := dist.NewGradientReducer(comm, params, dist.ReducerOptions{BucketBytes: int64(*bucketMiB * (1 << 20))})
	if err != nil {
		log.Fatal(err)
	}
	if err := red.Broadcast(0); err != nil {
		log.Fatal(err)
	}
	opt := optim.NewSGD(params, 1e-3)
	data := rand.New(rand.NewPCG(7, uint64(rank))) // each rank its own data
	var stepTime, waitTime time.Duration
	for step := range *steps {
		x := ferry.Randn(dev, data, *batch, *width)
		y := ferry.Randn(dev, data, *batch, *width)
		t0 := time.Now()
		var loss float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			h := tape.Input(x)
			for _, m := range model {
				h = m.Forward(h)
			}
			l := ferry.MSELoss(h, tape.Input(y))
			opts := ferry.BackwardOptions{}
			if *overlap {
				opts.GradReady = red.GradReady
			}
			if err := l.BackwardWith(opts); err != nil {
				return err
			}
			loss = l.Item()
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
		tw := time.Now()
		if err := red.Wait(); err != nil {
			log.Fatal(err)
		}
		w := time.Since(tw)
		if err := opt.Step(); err != nil {
			log.Fatal(err)
		}
		opt.ZeroGrad()
		d := time.Since(t0)
		x.Release()
		y.Release()
		if step > 0 {
			stepTime += d
			waitTime += w
		}
		if rank == 0 {
			fmt.Printf("step %d: loss %.5f  step %.1f ms  wait %.1f ms\n", step, loss, ms(d), ms(w))
		}
	}
	if err := red.CheckParameters(); err != nil {
		log.Fatal(err)
	}
	if rank == 0 {
		n := time.Duration(max(1, *steps-1))
		st := red.Stats()
		fmt.Printf("%d rank(s), %d buckets, %.1f MiB of gradients per step, overlap %v: mean step %.1f ms, of which Wait %.1f ms\n",
			size, st.Buckets, float64(st.BytesReduced)/float64(st.Steps)/(1<<20), *overlap, ms(stepTime/n), ms(waitTime/n))
		fmt.Printf("buckets started during backward %d, at Wait %d; parameters bit-identical on every rank\n", st.StartedInReverse, st.StartedAtWait)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
