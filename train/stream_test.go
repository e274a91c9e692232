package train_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// gptTask is a small GPT on random tokens, with dropout.
type gptTask struct {
	dev device.Device
	lm  *nn.GPT
	cfg nn.GPTConfig
}

func newGPTTask(t testing.TB, dev device.Device) *gptTask {
	cfg := nn.GPTConfig{Vocab: 23, Seq: 8, Layers: 2, Heads: 2, Embd: 16, Dropout: 0.1, Bias: true, Seed: 5}
	lm, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	return &gptTask{dev: dev, lm: lm, cfg: cfg}
}

func (g *gptTask) Model() nn.Module { return g.lm }

func (g *gptTask) Batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	rng := rand.New(rand.NewPCG(uint64(step), uint64(micro)))
	const b = 3
	xs, ys := make([]int32, b*g.cfg.Seq), make([]int32, b*g.cfg.Seq)
	for i := range xs {
		xs[i], ys[i] = int32(rng.IntN(g.cfg.Vocab)), int32(rng.IntN(g.cfg.Vocab))
	}
	return ferry.FromInt32s(g.dev, xs, b, g.cfg.Seq), ferry.FromInt32s(g.dev, ys, b, g.cfg.Seq), b, nil
}

func (g *gptTask) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	g.lm.SetRecompute(recompute)
	return g.lm.Forward(x)
}

func (g *gptTask) Loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(out, y) }

// streamRun is what one training run left: its losses, its parameters'
// bits, and the device's peaks of parameter, gradient and optimizer-state
// bytes.
type streamRun struct {
	losses                   []float64
	params                   [][]float32
	paramPeak, gradPeak, opt int64
	paramBytes               int64 // the parameters' bytes
	stats                    offload.StreamStats
}

// streamTask is trainStreamed's task on dev: the GPT (built in host
// memory with hostBuilt, its batches on dev) or the MLP.
func streamTask(t *testing.T, dev device.Device, gpt, hostBuilt bool) train.Task {
	switch {
	case gpt && hostBuilt:
		g := newGPTTask(t, dev.Host())
		g.dev = dev // its batches on the device
		return g
	case gpt:
		return newGPTTask(t, dev)
	default:
		return &traintest.MLP{Dev: dev, Layers: 3, Width: 16, Rows: 8, Seed: 3}
	}
}

// firstNames names the first n parameters of trainStreamed's model.
func firstNames(t *testing.T, gpt bool, n int) []string {
	model := streamTask(t, cpu(t), gpt, false).Model()
	defer nn.Release(model)
	var names []string
	for _, p := range model.Parameters()[:n] {
		names = append(names, p.Name())
	}
	return names
}

// streamOpts are trainStreamed's less common choices.
type streamOpts struct {
	keep      int   // the first parameters keep their optimizer state on the device
	visit     []int // these parameters' state visits the device for their updates
	hostBuilt bool  // the GPT is built in host memory (as ferry train does when it streams parameters)
}

// trainStreamed trains under setup; hostOpt keeps the optimizer's state
// on the host, but for the first o.keep parameters' (optim.KeepOnDevice,
// offload.Setup.StateOnDevice).
func trainStreamed(t *testing.T, gpt bool, setup offload.Setup, hostOpt bool, cfg train.Config, o streamOpts) streamRun {
	t.Helper()
	dev := cpu(t)
	task := streamTask(t, dev, gpt, o.hostBuilt)
	model := task.Model()
	defer nn.Release(model)
	var opts []optim.Option
	if hostOpt {
		opts = append(opts, optim.OnHost())
		if o.keep > 0 {
			for _, p := range model.Parameters()[:o.keep] {
				setup.StateOnDevice = append(setup.StateOnDevice, p.Name())
			}
			opts = append(opts, optim.KeepOnDevice(setup.StateOnDevice...))
		}
		if len(o.visit) > 0 {
			for _, i := range o.visit {
				setup.StateVisiting = append(setup.StateVisiting, model.Parameters()[i].Name())
			}
			opts = append(opts, optim.StateVisits(setup.StateVisiting...))
		}
	}
	opt := optim.NewAdamW(model.Parameters(), 1e-2, opts...)
	defer opt.Release()
	var r streamRun
	cfg.Optimizer, cfg.Memory = opt, setup
	cfg.Hooks.Step = func(s train.StepInfo) { r.losses = append(r.losses, s.Loss) }
	tr, err := train.New(dev, task, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev.Allocator().ResetPeak() // the model was built on the device
	if _, err := tr.Run(context.Background()); err != nil {
		tr.Close()
		t.Fatal(err)
	}
	if s := tr.Memory().Streamer(); s != nil {
		r.stats = s.Stats()
	}
	st := dev.Allocator().Stats()
	r.paramPeak = st.ByCategory[device.Parameter].Peak
	r.gradPeak = st.ByCategory[device.Gradient].Peak
	r.opt = st.ByCategory[device.OptimizerState].Peak
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range model.Parameters() {
		r.paramBytes += p.Bytes()
		if p.PagedOut() {
			t.Errorf("%s is still paged out after Close", p.Name())
		}
		r.params = append(r.params, p.Float32s())
	}
	return r
}

// Parameters streamed from the host, gradients sent to the host and the
// optimizer stepping there train to the bits of a run that keeps all of
// it on the device: the MLP and a GPT with dropout, with gradient
// accumulation and clipping, the optimizer after backward and inside it,
// with and without the activation offloader.
func TestStreamingTrainsToTheSameBits(t *testing.T) {
	for _, gpt := range []bool{false, true} {
		for _, inBwd := range []bool{false, true} {
			cfg := train.Config{Steps: 3, Accum: 2, Clip: 0.05}
			if inBwd {
				// A step inside backward neither accumulates nor clips. The
				// rate changes every step: the host's updates, which may
				// still run during the next step, keep their step's.
				cfg = train.Config{Steps: 4, Schedule: train.Cosine{Peak: 1e-2, Min: 1e-3, Warmup: 1, Total: 4}}
			}
			base := offload.Setup{Mode: offload.None, OptimizerInBackward: inBwd}
			want := trainStreamed(t, gpt, base, false, cfg, streamOpts{})
			for _, c := range []struct {
				name           string
				mode           offload.Mode
				params         []string
				grads, hostOpt bool
				keep           int  // the first parameters' state on the device
				stream         int  // only the first parameters streamed (with params nil)
				hostBuilt      bool // the GPT built in host memory
			}{
				{"params", offload.None, []string{"*"}, false, false, 0, 0, false},
				{"grads", offload.None, nil, true, true, 0, 0, false},
				{"params+grads+host optimizer", offload.None, []string{"*"}, true, true, 0, 0, false},
				{"params+grads+host optimizer, offload", offload.Offload, []string{"*"}, true, true, 0, 0, false},
				{"params+host optimizer", offload.Recompute, []string{"*"}, false, true, 0, 0, false},
				{"params+grads+host optimizer but the first 2 parameters'", offload.None, []string{"*"}, true, true, 2, 0, false},
				{"the first 3 params+grads+host optimizer", offload.None, nil, true, true, 0, 3, false},
				{"the first 3 params+grads+host optimizer, offload", offload.Offload, nil, true, true, 0, 3, false},
				{"the first 3 params+grads+host optimizer, built on the host", offload.None, nil, true, true, 0, 3, true},
			} {
				t.Run(fmt.Sprintf("gpt=%v/inBackward=%v/%s", gpt, inBwd, c.name), func(t *testing.T) {
					s := base
					s.Mode, s.ParamsOnHost, s.GradsOnHost = c.mode, c.params, c.grads
					if c.stream > 0 {
						s.ParamsOnHost = firstNames(t, gpt, c.stream)
					}
					got := trainStreamed(t, gpt, s, c.hostOpt, cfg, streamOpts{keep: c.keep, hostBuilt: c.hostBuilt && gpt})
					if !sameBits(got.params, want.params) {
						t.Error("parameters differ from the run on the device")
					}
					for i := range want.losses {
						if math.Float64bits(got.losses[i]) != math.Float64bits(want.losses[i]) {
							t.Errorf("step %d: loss %v, want %v", i+1, got.losses[i], want.losses[i])
						}
					}
					if c.grads && c.hostOpt && inBwd && c.keep == 0 {
						// Every parameter has a master in host memory: the
						// ones not streamed are mirrored, and their updates
						// run beside the device too, their values uploaded
						// after (offload.StreamConfig.HostStepsBeside).
						if got.stats.HostParamBytes != want.paramBytes {
							t.Errorf("%d bytes of parameters in host memory, want all %d", got.stats.HostParamBytes, want.paramBytes)
						}
						if got.stats.ParamUploads == 0 {
							t.Errorf("stats %+v: no parameter uploaded", got.stats)
						}
					}
					if c.params != nil {
						// A recomputed segment's parameters stay on the
						// device from its recomputation through its backward
						// (TestRecomputeKeepsStreamedParametersThroughBackward):
						// the MLP's one segment is the whole model.
						wholeSegment := !gpt && c.mode == offload.Recompute
						if c.keep == 0 && !wholeSegment && got.paramPeak >= want.paramPeak {
							t.Errorf("parameters peak at %d bytes on the device, as many as without streaming (%d)", got.paramPeak, want.paramPeak)
						}
						if got.stats.ParamUploads == 0 || got.stats.Prefetched == 0 {
							t.Errorf("stats %+v: nothing uploaded or nothing prefetched", got.stats)
						}
					}
					// (Inside backward, a gradient on its way to the host
					// stays until the next one leaves: no fewer than the
					// device optimizer's, which frees each at once.)
					if c.grads && !inBwd && got.gradPeak >= want.gradPeak {
						t.Errorf("gradients peak at %d bytes on the device, as many as without offloading them (%d)", got.gradPeak, want.gradPeak)
					}
					switch {
					case c.hostOpt && c.keep == 0 && got.opt != 0:
						t.Errorf("%d bytes of optimizer state on the device", got.opt)
					case c.keep > 0 && (got.opt == 0 || got.opt >= want.opt):
						t.Errorf("%d bytes of optimizer state on the device with the first %d parameters' there, %d with all", got.opt, c.keep, want.opt)
					}
				})
			}
		}
	}
}

// Gradients on the host with the optimizer's state on the device cannot
// work: the Trainer says so before training.
func TestGradientsOnHostNeedAHostOptimizer(t *testing.T) {
	dev := cpu(t)
	task := &traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 4, Seed: 1}
	model := task.Model()
	defer nn.Release(model)
	opt := optim.NewAdamW(model.Parameters(), 1e-2)
	defer opt.Release()
	_, err := train.New(dev, task, train.Config{Steps: 1, Optimizer: opt, Memory: offload.Setup{GradsOnHost: true}})
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
}

// Streamed parameters whose state visits the device step there to the
// bits of a run on the device, the optimizer after backward and inside
// it. Inside backward each stays on the device from its gradient through
// its update (offload's streamed.stepsHere): the MLP's weights, which
// backward uses, cross the link up no more often than where the host
// steps them, not once more for their updates.
func TestStreamedVisitingStateTrainsToTheSameBits(t *testing.T) {
	for _, gpt := range []bool{false, true} {
		for _, inBwd := range []bool{false, true} {
			t.Run(fmt.Sprintf("gpt=%v/inBackward=%v", gpt, inBwd), func(t *testing.T) {
				cfg := train.Config{Steps: 3}
				base := offload.Setup{Mode: offload.None, OptimizerInBackward: inBwd}
				want := trainStreamed(t, gpt, base, false, cfg, streamOpts{})
				s := base
				s.ParamsOnHost, s.GradsOnHost = []string{"*"}, true
				host := trainStreamed(t, gpt, s, true, cfg, streamOpts{})
				visit := []int{2, 4} // the MLP's second and third weights
				if gpt {
					visit = []int{1, 3, 4, 5}
				}
				got := trainStreamed(t, gpt, s, true, cfg, streamOpts{visit: visit})
				if !sameBits(got.params, want.params) {
					t.Error("parameters differ from the run on the device")
				}
				for i := range want.losses {
					if math.Float64bits(got.losses[i]) != math.Float64bits(want.losses[i]) {
						t.Errorf("step %d: loss %v, want %v", i+1, got.losses[i], want.losses[i])
					}
				}
				if !gpt && inBwd && got.stats.ParamUploads != host.stats.ParamUploads {
					t.Errorf("%d parameter uploads with two weights' state visiting, %d with every parameter stepped on the host: want as many",
						got.stats.ParamUploads, host.stats.ParamUploads)
				}
			})
		}
	}
}

// A recomputed segment's forward, run again in backward, brings its
// streamed parameters back, and its backward uses them next: they stay on
// the device until their gradients are complete (offload's
// Streamer.inBackward), so a step uploads each parameter at most twice
// (forward, and backward's recomputation), where the segment's backward
// used to bring back again those it needs; and training keeps the bits of
// the run on the device.
func TestRecomputeKeepsStreamedParametersThroughBackward(t *testing.T) {
	for _, gpt := range []bool{false, true} {
		t.Run(fmt.Sprintf("gpt=%v", gpt), func(t *testing.T) {
			cfg := train.Config{Steps: 3}
			// The host steps each parameter inside backward (a device
			// optimizer would bring each back once more for its update).
			want := trainStreamed(t, gpt, offload.Setup{Mode: offload.None, OptimizerInBackward: true}, false, cfg, streamOpts{})
			s := offload.Setup{Mode: offload.Recompute, ParamsOnHost: []string{"*"}, GradsOnHost: true, OptimizerInBackward: true}
			got := trainStreamed(t, gpt, s, true, cfg, streamOpts{})
			if !sameBits(got.params, want.params) {
				t.Error("parameters differ from the run on the device")
			}
			// One step more: what a step uploads, the first's aside.
			cfg.Steps++
			more := trainStreamed(t, gpt, s, true, cfg, streamOpts{})
			// The GPT's tied embedding comes up three times: forward uses
			// it first and last, far apart.
			var tied int64
			if gpt {
				c := newGPTTask(t, cpu(t)).cfg
				tied = int64(c.Vocab * c.Embd * 4)
			}
			if step := more.stats.ParamBytesIn - got.stats.ParamBytesIn; step > 2*got.paramBytes+tied {
				t.Errorf("a step uploads %d bytes of parameters, more than twice their %d (and the tied embedding's %d once more)", step, got.paramBytes, tied)
			}
		})
	}
}
