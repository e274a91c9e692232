package ferry_test

// Autograd behaviours beyond the numbers: no-grad mode, running backward
// twice, in-place changes of saved tensors, and saved-tensor hooks
// (what they see, who releases what, and that they do not change results).

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/optim"
)

// smallMLP is Linear(4,8) ReLU Linear(8,8) GELU Linear(8,3).
func smallMLP(t *testing.T, dev device.Device) *nn.Sequential {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	var ms []nn.Module
	for i, sz := range [][2]int{{4, 8}, {8, 8}, {8, 3}} {
		l, err := nn.NewLinear(dev, sz[0], sz[1], true, rng)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, l)
		switch i {
		case 0:
			ms = append(ms, nn.ReLU{})
		case 1:
			ms = append(ms, nn.GELU{})
		}
	}
	m := nn.NewSequential(ms...)
	t.Cleanup(func() { nn.Release(m) })
	return m
}

// mlpLoss runs the model on a fixed batch and returns the MSE loss.
func mlpLoss(tape *ferry.Tape, dev device.Device, m nn.Module) *ferry.Tensor {
	rng := rand.New(rand.NewPCG(7, 8))
	x := tape.Adopt(ferry.Randn(dev, rng, 5, 4))
	y := tape.Adopt(ferry.Randn(dev, rng, 5, 3))
	out := m.Forward(x)
	defer out.Release()
	return ferry.MSELoss(out, y)
}

func paramGrads(t *testing.T, ps []*ferry.Tensor) [][]float32 {
	t.Helper()
	var gs [][]float32
	for _, p := range ps {
		if p.Grad() == nil {
			t.Fatalf("%s has no gradient", p.Name())
		}
		gs = append(gs, p.Grad().Float32s())
	}
	return gs
}

func zeroGrads(ps []*ferry.Tensor) {
	for _, p := range ps {
		p.SetGrad(nil)
	}
}

func wantErrMentioning(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestNoGrad(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	m := smallMLP(t, dev)
	var withGrad, without []float32
	err := ferry.Step(func(tape *ferry.Tape) error {
		loss := mlpLoss(tape, dev, m)
		if !loss.RequiresGrad() || tape.Len() == 0 {
			t.Errorf("grad mode: loss requires grad %v, %d ops recorded", loss.RequiresGrad(), tape.Len())
		}
		withGrad = loss.Float32s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = ferry.Step(func(tape *ferry.Tape) error {
		var loss *ferry.Tensor
		tape.NoGrad(func() {
			loss = mlpLoss(tape, dev, m)
		})
		if loss.RequiresGrad() || tape.Len() != 0 {
			t.Errorf("no-grad mode: loss requires grad %v, %d ops recorded", loss.RequiresGrad(), tape.Len())
		}
		without = loss.Float32s()
		wantErrMentioning(t, loss.Backward(), "does not require grad", "NoGrad")
		// Recording resumes after NoGrad.
		again := mlpLoss(tape, dev, m)
		if !again.RequiresGrad() {
			t.Error("after NoGrad returned, ops are still not recorded")
		}
		return again.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(withGrad, without) {
		t.Errorf("loss %v with grad, %v without", withGrad, without)
	}
	for _, p := range m.Parameters() {
		if p.Grad() == nil {
			t.Errorf("%s: no gradient from the recorded pass", p.Name())
		}
	}
}

func TestBackwardTwice(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	m := smallMLP(t, dev)
	ps := m.Parameters()
	var once [][]float32
	err := ferry.Step(func(tape *ferry.Tape) error {
		loss := mlpLoss(tape, dev, m)
		if err := loss.Backward(); err != nil {
			return err
		}
		once = paramGrads(t, ps)
		wantErrMentioning(t, loss.Backward(), "mse_loss", "freed by an earlier Backward", "RetainGraph")
		if got := paramGrads(t, ps); !slices.EqualFunc(got, once, slices.Equal) {
			t.Error("a failed second Backward changed the gradients")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	zeroGrads(ps)
	err = ferry.Step(func(tape *ferry.Tape) error {
		loss := mlpLoss(tape, dev, m)
		if err := loss.BackwardWith(ferry.BackwardOptions{RetainGraph: true}); err != nil {
			return err
		}
		if got := paramGrads(t, ps); !slices.EqualFunc(got, once, slices.Equal) {
			t.Error("gradients with RetainGraph differ from without")
		}
		if err := loss.Backward(); err != nil {
			return err
		}
		// The second pass adds the same gradients: exactly twice the first.
		for i, g := range paramGrads(t, ps) {
			for j := range g {
				if g[j] != 2*once[i][j] {
					t.Fatalf("%s[%d] after two passes = %g, want 2·%g", ps[i].Name(), j, g[j], once[i][j])
				}
			}
		}
		// The second pass did not retain: a third fails.
		wantErrMentioning(t, loss.Backward(), "freed by an earlier Backward")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	zeroGrads(ps)
	if n, want := dev.Allocator().Allocated(), allocatedBytes(m); n != want {
		t.Errorf("%d bytes allocated after the steps, want the parameters' %d", n, want)
	}
}

func TestInPlaceOfSavedTensor(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	rng := rand.New(rand.NewPCG(1, 1))
	w := ferry.Randn(dev, rng, 3, 4).RequireGrad()
	defer w.Release()

	t.Run("input of mul", func(t *testing.T) {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(ferry.Randn(dev, rng, 3, 4)) // no grad: may change in place
			y := ferry.Mul(x, w)                         // saves x
			x.AddInPlace(ferry.Ones(dev, 4))
			return ferry.Sum(y).Backward()
		})
		wantErrMentioning(t, err, "mul", "add_", "modified in place", "version 1, saved at version 0")
	})
	t.Run("output of exp", func(t *testing.T) {
		err := ferry.Step(func(tape *ferry.Tape) error {
			y := ferry.Exp(tape.Input(w)) // saves its output
			tape.NoGrad(func() { y.ScaleInPlace(2) })
			return ferry.Sum(y).Backward()
		})
		wantErrMentioning(t, err, "exp", "mul_", "modified in place")
	})
	t.Run("weight updated before backward", func(t *testing.T) {
		// Backward reads the weight for the input's gradient, so the
		// input must want one: a saved tensor is checked when it is used.
		xl := ferry.Randn(dev, rng, 2, 4).RequireGrad()
		defer xl.Release()
		defer w.SetGrad(nil)
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Input(xl)
			y := ferry.Linear(x, w, nil) // saves x and w
			w.SetGrad(ferry.Ones(dev, 3, 4))
			opt := optim.NewSGD([]*ferry.Tensor{w}, 0.1)
			if err := opt.Step(); err != nil {
				return err
			}
			return ferry.Sum(y).Backward()
		})
		wantErrMentioning(t, err, "linear", "sgd_step", "modified in place")
	})
	t.Run("tensor that requires grad", func(t *testing.T) {
		err := ferry.Step(func(tape *ferry.Tape) error {
			y := ferry.Exp(tape.Input(w))
			y.AddInPlace(ferry.Ones(dev, 4))
			return nil
		})
		wantErrMentioning(t, err, "add_", "not differentiable")
	})
	t.Run("unsaved tensor may change", func(t *testing.T) {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(ferry.Randn(dev, rng, 3, 4))
			y := ferry.Add(x, w) // saves nothing
			x.AddInPlace(ferry.Ones(dev, 4))
			return ferry.Sum(y).Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		g := w.Grad().Float32s()
		w.SetGrad(nil)
		for _, v := range g {
			if v != 1 {
				t.Fatalf("gradient of a sum through add: %v, want ones", g)
			}
		}
	})
}

// countedPack is what countingHooks' Pack returns: the saved tensor (or
// its host copy), and what Unpack made from it.
type countedPack struct {
	h        *hookLog
	t        *ferry.Tensor   // owned
	unpacked []*ferry.Tensor // owned copies Unpack returned (host hooks)
	released int
}

func (p *countedPack) Release() {
	p.released++
	p.h.releases++
	p.t.Release()
	for _, u := range p.unpacked {
		u.Release()
	}
	p.unpacked = nil
}

type hookLog struct {
	infos    []ferry.SaveInfo
	storages []any // Storage() of each tensor packed
	packs    []*countedPack
	unpacks  int
	releases int
}

// countingHooks logs every save. With toHost, Pack copies the tensor to
// the host and releases the device handle it was given (as an offloader
// would), and Unpack copies it back; otherwise the tensor itself is kept.
func countingHooks(dev device.Device, toHost bool) (*ferry.SavedTensorHooks, *hookLog) {
	log := &hookLog{}
	return &ferry.SavedTensorHooks{
		Pack: func(t *ferry.Tensor, info ferry.SaveInfo) any {
			log.infos = append(log.infos, info)
			log.storages = append(log.storages, t.Storage())
			p := &countedPack{h: log, t: t}
			if toHost {
				p.t = t.To(dev.Host())
				t.Release()
			}
			log.packs = append(log.packs, p)
			return p
		},
		Unpack: func(packed any) (*ferry.Tensor, error) {
			log.unpacks++
			p := packed.(*countedPack)
			if !toHost {
				return p.t, nil
			}
			u := p.t.To(dev)
			p.unpacked = append(p.unpacked, u)
			return u, nil
		},
	}, log
}

func (l *hookLog) checkReleasedOnce(t *testing.T) {
	t.Helper()
	for i, p := range l.packs {
		if p.released != 1 {
			t.Errorf("pack %d (%s slot %d) released %d times, want once", i, l.infos[i].Op, l.infos[i].Slot, p.released)
		}
	}
}

func TestSavedTensorHooksSeeEverySave(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	m := smallMLP(t, dev)
	hooks, log := countingHooks(dev, false)
	err := ferry.Step(func(tape *ferry.Tape) error {
		tape.PushHooks(hooks)
		defer tape.PopHooks()
		if err := mlpLoss(tape, dev, m).Backward(); err != nil {
			return err
		}
		if log.releases != len(log.packs) {
			t.Errorf("%d of %d packs released when backward returned, want all", log.releases, len(log.packs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	zeroGrads(m.Parameters())
	// Linear saves its input and weight, ReLU its output, GELU its input,
	// MSE its input and target.
	type save struct {
		op     string
		node   int
		slot   int
		module string
		param  bool
	}
	want := []save{
		{"linear", 0, 0, "0", false}, {"linear", 0, 1, "0", true},
		{"relu", 1, 0, "1", false},
		{"linear", 2, 0, "2", false}, {"linear", 2, 1, "2", true},
		{"gelu", 3, 0, "3", false},
		{"linear", 4, 0, "4", false}, {"linear", 4, 1, "4", true},
		{"mse_loss", 5, 0, "", false}, {"mse_loss", 5, 1, "", false},
	}
	var got []save
	for _, in := range log.infos {
		got = append(got, save{in.Op, in.Node, in.Slot, in.Module, in.Parameter})
	}
	if !slices.Equal(got, want) {
		t.Errorf("saved tensors:\n got %v\nwant %v", got, want)
	}
	if len(log.storages) == len(want) && log.storages[2] != log.storages[3] {
		t.Error("ReLU's saved output and the next Linear's saved input are different storages, want one")
	}
	// Every saved tensor is brought back once, except the first Linear's
	// weight: it serves only the gradient of the input, which needs none.
	if log.unpacks != len(want)-1 {
		t.Errorf("%d unpacks, want one per saved tensor but one (%d)", log.unpacks, len(want)-1)
	}
	log.checkReleasedOnce(t)
	if n, want := dev.Allocator().Allocated(), allocatedBytes(m); n != want {
		t.Errorf("%d bytes allocated after the step, want the parameters' %d", n, want)
	}
}

func TestSavedTensorHooksRelease(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	m := smallMLP(t, dev)
	for _, toHost := range []bool{false, true} {
		name := map[bool]string{false: "identity", true: "host"}[toHost]
		t.Run(name+"/no backward", func(t *testing.T) {
			hooks, log := countingHooks(dev, toHost)
			err := ferry.Step(func(tape *ferry.Tape) error {
				tape.WithHooks(hooks, func() { mlpLoss(tape, dev, m) }) //ferry:discard the tape owns the output
				if log.releases != 0 {
					t.Errorf("%d packs released before the tape closed", log.releases)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(log.packs) != 10 || log.unpacks != 0 {
				t.Errorf("%d packs and %d unpacks, want 10 and 0", len(log.packs), log.unpacks)
			}
			log.checkReleasedOnce(t)
		})
		t.Run(name+"/retain graph", func(t *testing.T) {
			hooks, log := countingHooks(dev, toHost)
			err := ferry.Step(func(tape *ferry.Tape) error {
				var loss *ferry.Tensor
				tape.WithHooks(hooks, func() { loss = mlpLoss(tape, dev, m) })
				if err := loss.BackwardWith(ferry.BackwardOptions{RetainGraph: true}); err != nil {
					return err
				}
				if log.releases != 0 {
					t.Errorf("RetainGraph: %d packs released by backward", log.releases)
				}
				if err := loss.Backward(); err != nil {
					return err
				}
				if log.releases != len(log.packs) {
					t.Errorf("after the last backward %d of %d packs released", log.releases, len(log.packs))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if log.unpacks != 2*(len(log.packs)-1) { // see TestSavedTensorHooksSeeEverySave
				t.Errorf("%d unpacks for %d packs and two backward passes", log.unpacks, len(log.packs))
			}
			log.checkReleasedOnce(t)
			zeroGrads(m.Parameters())
		})
		t.Run(name+"/unpack fails", func(t *testing.T) {
			hooks, log := countingHooks(dev, toHost)
			failing := &ferry.SavedTensorHooks{Pack: hooks.Pack, Unpack: func(p any) (*ferry.Tensor, error) {
				if pk := p.(*countedPack); pk == log.packs[len(log.packs)-2] { // MSE's input
					return nil, errDisk
				}
				return hooks.Unpack(p)
			}}
			err := ferry.Step(func(tape *ferry.Tape) error {
				var loss *ferry.Tensor
				tape.WithHooks(failing, func() { loss = mlpLoss(tape, dev, m) })
				return loss.Backward()
			})
			if !errors.Is(err, errDisk) {
				t.Fatalf("Backward error %v, want one wrapping %v", err, errDisk)
			}
			wantErrMentioning(t, err, "mse_loss")
			log.checkReleasedOnce(t)
			zeroGrads(m.Parameters())
		})
	}
	if n, want := dev.Allocator().Allocated(), allocatedBytes(m); n != want {
		t.Errorf("%d bytes allocated after the steps, want the parameters' %d", n, want)
	}
	if n := dev.Host().Allocator().Allocated(); n != 0 {
		t.Errorf("%d host bytes still allocated", n)
	}
}

var errDisk = errors.New("disk on fire")

func TestSavedTensorHooksKeepGradients(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	m := smallMLP(t, dev)
	ps := m.Parameters()
	run := func(hooks *ferry.SavedTensorHooks) ([][]float32, float32) {
		var loss float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			if hooks != nil {
				tape.PushHooks(hooks)
			}
			l := mlpLoss(tape, dev, m)
			loss = l.Item()
			return l.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		g := paramGrads(t, ps)
		zeroGrads(ps)
		return g, loss
	}
	plain, loss := run(nil)
	for _, toHost := range []bool{false, true} {
		hooks, log := countingHooks(dev, toHost)
		got, l := run(hooks)
		if l != loss || !slices.EqualFunc(got, plain, slices.Equal) {
			t.Errorf("hooks (to host %v) changed the loss or gradients", toHost)
		}
		log.checkReleasedOnce(t)
		if n := dev.Host().Allocator().Allocated(); n != 0 {
			t.Errorf("to host %v: %d host bytes still allocated", toHost, n)
		}
		if toHost && dev.Host().Allocator().Stats().AllocatedBytes.Peak == 0 {
			t.Error("host hooks never allocated host memory")
		}
	}
	if n, want := dev.Allocator().Allocated(), allocatedBytes(m); n != want {
		t.Errorf("%d bytes allocated after the steps, want the parameters' %d", n, want)
	}
}

func TestSavedTensorHooksStack(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	outer, outerLog := countingHooks(dev, false)
	inner, innerLog := countingHooks(dev, true)
	w := ferry.Ones(dev, 2, 2).RequireGrad()
	defer w.Release()
	err := ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Input(w)
		tape.PushHooks(outer)
		a := ferry.Exp(x) // outer
		var b *ferry.Tensor
		tape.WithHooks(inner, func() { b = ferry.Tanh(a) }) // inner
		c := ferry.Sigmoid(b)                               // outer again
		tape.PopHooks()
		d := ferry.Square(c) // no hooks
		return ferry.Sum(d).Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	var outerOps, innerOps []string
	for _, in := range outerLog.infos {
		outerOps = append(outerOps, in.Op)
	}
	for _, in := range innerLog.infos {
		innerOps = append(innerOps, in.Op)
	}
	if !slices.Equal(outerOps, []string{"exp", "sigmoid"}) || !slices.Equal(innerOps, []string{"tanh"}) {
		t.Errorf("outer hooks saw %v, inner %v; want [exp sigmoid] and [tanh]", outerOps, innerOps)
	}
	if outerLog.unpacks != 2 || innerLog.unpacks != 1 {
		t.Errorf("unpacks: outer %d, inner %d; want 2 and 1", outerLog.unpacks, innerLog.unpacks)
	}
	outerLog.checkReleasedOnce(t)
	innerLog.checkReleasedOnce(t)
	if w.Grad() == nil {
		t.Fatal("no gradient")
	}
}

// Every op of the gradient checks, run with no hooks, with hooks that keep
// the saved tensor and with hooks that copy it to the host (and bring back
// a contiguous copy even of a saved view): the gradients are identical, and
// every packed value is released once.
func TestSavedTensorHooksAllOps(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	for i, c := range fdCases(dev) {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			data := fdData(c, rng)
			shape, out := fdForward(t, dev, c, data)
			G := make([]float32, len(out))
			for k := range G {
				G[k] = float32(rng.NormFloat64())
			}
			var ref [][]float32
			for _, mode := range []string{"none", "identity", "host"} {
				var hooks *ferry.SavedTensorHooks
				var log *hookLog
				if mode != "none" {
					hooks, log = countingHooks(dev, mode == "host")
				}
				leaves := fdTensors(dev, c, data)
				if err := fdBackward(dev, c, leaves, shape, G, hooks); err != nil {
					t.Fatalf("%s hooks: %v", mode, err)
				}
				var gs [][]float32
				for _, l := range leaves {
					if l.Grad() != nil {
						gs = append(gs, l.Grad().Float32s())
					}
				}
				releaseAll(leaves...)
				if ref == nil {
					ref = gs
				} else if !slices.EqualFunc(gs, ref, slices.Equal) {
					t.Errorf("%s hooks change the gradients", mode)
				}
				if log != nil {
					log.checkReleasedOnce(t)
				}
				if n := dev.Allocator().Allocated(); n != 0 {
					t.Errorf("%s hooks: %d bytes allocated after the step", mode, n)
				}
				if n := dev.Host().Allocator().Allocated(); n != 0 {
					t.Errorf("%s hooks: %d host bytes allocated after the step", mode, n)
				}
			}
		})
	}
}
