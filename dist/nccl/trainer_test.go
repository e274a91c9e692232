package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"ferry/device"
	"ferry/dist"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// outcome is one rank's training: its losses and final parameters.
type outcome struct {
	losses []float64
	params [][]float32
}

// trainMLP trains the test MLP (3 layers of 32, 4 rows, seed 7) on dev
// under cfg, with AdamW at 1e-2 made with opts as its optimizer.
func trainMLP(dev device.Device, cfg train.Config, opts ...optim.Option) (outcome, error) {
	var out outcome
	task := &traintest.MLP{Dev: dev, Layers: 3, Width: 32, Rows: 4, Seed: 7}
	opt := optim.NewAdamW(task.Model().Parameters(), 1e-2, opts...)
	defer opt.Release()
	cfg.Optimizer = opt
	cfg.Hooks.Step = func(s train.StepInfo) { out.losses = append(out.losses, s.Loss) }
	tr, err := train.New(dev, task, cfg)
	if err != nil {
		return out, err
	}
	defer tr.Close()
	if _, err := tr.Run(context.Background()); err != nil {
		return out, err
	}
	for _, p := range task.Model().Parameters() {
		out.params = append(out.params, p.Float32s())
	}
	return out, nil
}

// sameOutcomes fails t unless every rank of got has ref's losses and
// parameters, bit for bit.
func sameOutcomes(t *testing.T, what string, got, ref []outcome) {
	t.Helper()
	for r := range ref {
		if len(got[r].losses) != len(ref[r].losses) {
			t.Fatalf("%s, rank %d: %d losses, want %d", what, r, len(got[r].losses), len(ref[r].losses))
		}
		for i := range ref[r].losses {
			if got[r].losses[i] != ref[r].losses[i] {
				t.Fatalf("%s, rank %d, step %d: loss %v, want %v", what, r, i+1, got[r].losses[i], ref[r].losses[i])
			}
		}
		for i := range ref[r].params {
			for k := range ref[r].params[i] {
				if math.Float32bits(got[r].params[i][k]) != math.Float32bits(ref[r].params[i][k]) {
					t.Fatalf("%s, rank %d, parameter %d[%d]: %v, want %v", what, r, i, k, got[r].params[i][k], ref[r].params[i][k])
				}
			}
		}
	}
}

// train.Trainer on two fake GPUs with Config.DeviceComm (the gradients
// averaged on the device through NCCL, the stand-in) trains to the losses
// and parameters of the same ranks reducing through host memory over the
// group, bit for bit, clipping and accumulating, with 0 stand-in
// violations; so do ZeRO-3 (Shard 3), its gathers and reduce-scatters
// on the device through NCCL or through the host, ZeRO-1 (Shard 1) with
// its owners' broadcasts on the device, and ZeRO-2 (Shard 2) with its
// reduce-scatter buckets there too. In bfloat16, ZeRO-3 gathering
// bfloat16 copies of the weights, on the device and through the host,
// trains as ZeRO-0 in bfloat16 does.
func TestTrainerOverNCCL(t *testing.T) {
	l := setup(t)
	const size = 2
	run := func(withNCCL, onCPU bool, shard int, precision ...device.DType) []outcome {
		comms := dist.NewGroup(size)
		out := make([]outcome, size)
		errs := ranks(size, func(r int) error {
			defer comms[r].Close()
			var dev device.Device
			var dc dist.DeviceComm
			if onCPU {
				cpu, err := device.Open("cpu", device.Options{})
				if err != nil {
					return err
				}
				defer cpu.Close()
				dev = cpu
			} else {
				g, err := openRank(l, comms, r, withNCCL)
				if err != nil {
					return err
				}
				defer g.close()
				dev = g.dev
				if withNCCL {
					dc = g.dc
				}
			}
			// Small buckets (several all-reduces), and at ZeRO-2 one
			// bucket of all six parameters, which splits evenly enough
			// between the ranks to be reduce-scattered.
			bucket := int64(2000)
			if shard == 2 {
				bucket = 1 << 20
			}
			cfg := train.Config{Steps: 4, Accum: 2, Clip: 0.5, Comm: comms[r], BucketBytes: bucket, CheckEvery: 1, Shard: shard, DeviceComm: dc}
			if len(precision) > 0 {
				cfg.Precision = precision[0]
			}
			var err error
			out[r], err = trainMLP(dev, cfg)
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("NCCL %v: %v", withNCCL, err)
		}
		return out
	}
	host, dev, cpu := run(false, false, 0), run(true, false, 0), run(false, true, 0)
	// ZeRO-3: its gathers and reduce-scatters on the device through
	// NCCL, and through the host, train as ZeRO-0 does.
	before := l.Counter("collectives")
	z3nccl := run(true, false, 3)
	// Per step and rank: a gather per parameter in forward and in
	// backward, a reduce-scatter and the clip's gather each (6
	// parameters): far more than ZeRO-0's few buckets.
	if n := l.Counter("collectives") - before; n < 4*6*3 {
		t.Fatalf("ZeRO-3 on NCCL posted %d collectives to the stand-in", n)
	} else {
		t.Logf("ZeRO-3 on NCCL: %d collectives posted in 4 steps of 2 ranks", n)
	}
	same := func(what string, runs [][]outcome, ref []outcome) {
		t.Helper()
		for which, z3 := range runs {
			sameOutcomes(t, fmt.Sprintf("%s run %d (against ZeRO-0)", what, which), z3, ref)
		}
	}
	// ZeRO-1 and ZeRO-2 with their broadcasts (and ZeRO-2's buckets) on
	// the device too.
	same("sharded", [][]outcome{z3nccl, run(false, false, 3), run(true, false, 1), run(true, false, 2)}, host)
	// bfloat16: the weights gathered as bfloat16 copies, rounded on the
	// compute stream and gathered as words through NCCL, or through the
	// host.
	bf16 := run(false, false, 0, device.BFloat16)
	same("bfloat16 ZeRO-3", [][]outcome{run(true, false, 3, device.BFloat16), run(false, false, 3, device.BFloat16)}, bf16)
	if math.Float32bits(bf16[0].params[0][0]) == math.Float32bits(host[0].params[0][0]) && bf16[0].losses[3] == host[0].losses[3] {
		t.Fatal("bfloat16 trained as float32 did: the bfloat16 runs test nothing")
	}
	if l.Counter("collectives") == 0 {
		t.Fatal("no collective reached the stand-in")
	}
	for r := range size {
		if len(dev[r].losses) != 4 {
			t.Fatalf("rank %d: %d losses", r, len(dev[r].losses))
		}
	}
	sameOutcomes(t, "on NCCL (against through the host)", dev, host)
	// Against the CPU device (MPI's path, here the group's): the same
	// reduction (a+b, then × 1/2). The fake GPU's kernels are not the
	// CPU's, so in general the losses agree to rounding; on this MLP
	// they agree to the bit (largest difference 0 when written).
	var worst float64
	for i := range cpu[0].losses {
		worst = max(worst, math.Abs(cpu[0].losses[i]-dev[0].losses[i]))
	}
	t.Logf("4 steps on 2 fake GPUs, gradients averaged through NCCL (stand-in): losses %v, as through the host; the CPU's %v (largest difference %.3g)", dev[0].losses, cpu[0].losses, worst)
	if worst > 1e-5 {
		t.Errorf("the CPU's losses differ from the GPUs' by %v", worst)
	}
}

// ZeRO-3 offload on two fake GPUs through NCCL (the stand-in): the
// optimizer's state on the host with each shard stepping beside the
// device as its share of the gradient lands in host memory (a policy's
// updates inside backward), and the shards in host memory too (each
// gather copying its shard up first), train to the losses and parameters
// of ZeRO-0 on the same GPUs, bit for bit, with 0 stand-in violations;
// so do the shards in host memory stepped after backward, clipping and
// accumulating.
func TestTrainerZeRO3OffloadOverNCCL(t *testing.T) {
	l := setup(t)
	const size = 2
	run := func(withNCCL bool, shard int, host, inBackward bool, params []string, clip float64, accum int) []outcome {
		comms := dist.NewGroup(size)
		out := make([]outcome, size)
		errs := ranks(size, func(r int) error {
			defer comms[r].Close()
			g, err := openRank(l, comms, r, withNCCL)
			if err != nil {
				return err
			}
			defer g.close()
			var where []optim.Option
			if host {
				where = append(where, optim.OnHost())
			}
			cfg := train.Config{Steps: 4, Accum: accum, Clip: clip, Comm: comms[r], CheckEvery: 1, Shard: shard,
				Memory: offload.Setup{OptimizerInBackward: inBackward, ParamsOnHost: params}}
			if withNCCL {
				cfg.DeviceComm = g.dc
			}
			out[r], err = trainMLP(g.dev, cfg, where...)
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("ZeRO-%d, state on the host %v, in backward %v, parameters on the host %v: %v", shard, host, inBackward, params, err)
		}
		return out
	}
	all := []string{"*"}
	ref := run(true, 0, false, false, nil, 0, 1)
	before := l.Counter("collectives")
	sameOutcomes(t, "state on the host, stepping beside", run(true, 3, true, true, nil, 0, 1), ref)
	sameOutcomes(t, "shards in host memory, stepping beside", run(true, 3, true, true, all, 0, 1), ref)
	if l.Counter("collectives") == before {
		t.Fatal("no collective reached the stand-in")
	}
	sameOutcomes(t, "shards in host memory, clipped and accumulating", run(true, 3, true, false, all, 0.5, 2), run(true, 0, false, false, nil, 0.5, 2))
}
