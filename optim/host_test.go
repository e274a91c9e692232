package optim_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/nn"
	"ferry/optim"
)

// hostShapes are the parameters of the host tests: empty, tiny, vector
// remainders, and one large enough to be split across cores.
var hostShapes = [][]int{{0}, {1}, {3, 5}, {17}, {33, 31}, {300, 300}, {4, 0}}

func newCPU(t testing.TB) device.Device {
	t.Helper()
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// hostParams returns named parameters with seeded values, and a last one
// ("idle") that never gets a gradient.
func hostParams(dev device.Device) []*ferry.Tensor {
	rng := rand.New(rand.NewPCG(3, 4))
	var ps []*ferry.Tensor
	for i, sh := range append(slices.Clone(hostShapes), []int{5}) {
		p := ferry.RandnAs(dev, device.Parameter, rng, sh...)
		p.SetName(fmt.Sprintf("p%d", i))
		ps = append(ps, p)
	}
	ps[len(ps)-1].SetName("idle")
	return ps
}

// setGrads gives every parameter but the idle one a gradient drawn from
// (seed, step); with special, some elements are NaN, ±Inf, ±0 or
// subnormal.
func setGrads(dev device.Device, ps []*ferry.Tensor, step int, special bool) {
	rng := rand.New(rand.NewPCG(uint64(step), 77))
	odd := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0,
		float32(math.Copysign(0, -1)), 1e-41, 1e30}
	for _, p := range ps[:len(ps)-1] {
		g := make([]float32, p.Numel())
		for i := range g {
			g[i] = float32(rng.NormFloat64())
			if special && rng.IntN(64) == 0 {
				g[i] = odd[rng.IntN(len(odd))]
			}
		}
		p.SetGrad(ferry.FromFloat32s(dev, g, p.Shape()...))
	}
}

type optCase struct {
	name string
	make func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful
}

var optCases = []optCase{
	{"adamw", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		return optim.NewAdamW(ps, 1e-2, opts...)
	}},
	{"adamw-wd", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		o := optim.NewAdamW(ps, 3e-3, opts...)
		o.Beta2, o.WeightDecay, o.Eps = 0.95, 0.1, 1e-6
		return o
	}},
	{"sgd", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful { return optim.NewSGD(ps, 0.1, opts...) }},
	{"sgd-wd", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		o := optim.NewSGD(ps, 0.1, opts...)
		o.WeightDecay = 1e-2
		return o
	}},
	{"sgd-momentum", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		o := optim.NewSGD(ps, 0.05, opts...)
		o.Momentum, o.Dampening, o.WeightDecay = 0.9, 0.1, 1e-3
		return o
	}},
	{"sgd-nesterov", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		o := optim.NewSGD(ps, 0.05, opts...)
		o.Momentum, o.Nesterov, o.WeightDecay = 0.9, true, 1e-2
		return o
	}},
	{"adamw8bit", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		o := optim.NewAdamW8bit(ps, 1e-2, opts...)
		o.MinQuantized = 17 // the shapes here are small: quantise most of them
		return o
	}},
	{"lion", func(ps []*ferry.Tensor, opts ...optim.Option) optim.Stateful {
		o := optim.NewLion(ps, 1e-3, opts...)
		o.WeightDecay = 0.5
		return o
	}},
}

// snapshot is every parameter's values and the optimizer's state, as
// bits.
type snapshot struct {
	params  [][]uint32
	tensors map[string][]uint32
	shapes  map[string][]int
	scalars map[string]float64
}

func bitsOf(t *ferry.Tensor) []uint32 {
	if t.Numel() == 0 {
		return nil
	}
	if t.DType() != device.Float32 { // (quantised state: a word a byte)
		var b []uint32
		for _, x := range t.RawBytes() {
			b = append(b, uint32(x))
		}
		return b
	}
	f := t.Float32s()
	b := make([]uint32, len(f))
	for i, x := range f {
		b[i] = math.Float32bits(x)
	}
	return b
}

func snap(ps []*ferry.Tensor, o optim.Stateful) snapshot {
	s := snapshot{tensors: map[string][]uint32{}, shapes: map[string][]int{}}
	for _, p := range ps {
		s.params = append(s.params, bitsOf(p))
	}
	st := o.State()
	for k, t := range st.Tensors {
		s.tensors[k], s.shapes[k] = bitsOf(t), t.Shape()
	}
	s.scalars = st.Scalars
	return s
}

func sameSnap(t *testing.T, got, want snapshot) {
	t.Helper()
	for i := range want.params {
		if j := firstDiff(got.params[i], want.params[i]); j >= 0 {
			t.Fatalf("parameter %d differs at %d: %#x, want %#x", i, j, got.params[i][j], want.params[i][j])
		}
	}
	if len(got.tensors) != len(want.tensors) {
		t.Fatalf("%d state tensors, want %d", len(got.tensors), len(want.tensors))
	}
	for k, w := range want.tensors {
		g, ok := got.tensors[k]
		if !ok {
			t.Fatalf("no state tensor %q", k)
		}
		if !slices.Equal(got.shapes[k], want.shapes[k]) {
			t.Fatalf("state %q has shape %v, want %v", k, got.shapes[k], want.shapes[k])
		}
		if j := firstDiff(g, w); j >= 0 {
			t.Fatalf("state %q differs at %d: %#x, want %#x", k, j, g[j], w[j])
		}
	}
	if fmt.Sprint(got.scalars) != fmt.Sprint(want.scalars) {
		t.Fatalf("scalars %v, want %v", got.scalars, want.scalars)
	}
}

// onDevice is c's optimizer over hostParams after four steps with its
// state on the device: what the other placements must give to the bit.
func onDevice(t *testing.T, c optCase) snapshot {
	t.Helper()
	dev := newCPU(t)
	ps := hostParams(dev)
	o := c.make(ps)
	if err := trainSteps(dev, ps, o, 0, 4); err != nil {
		t.Fatal(err)
	}
	defer o.Release()
	return snap(ps, o)
}

func firstDiff(a, b []uint32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// train runs steps steps of o over ps from step first, NaN and Inf among
// the gradients of the third.
func trainSteps(dev device.Device, ps []*ferry.Tensor, o optim.Optimizer, first, steps int) error {
	for s := first; s < first+steps; s++ {
		setGrads(dev, ps, s, s == 2)
		if err := o.Step(); err != nil {
			return err
		}
		o.ZeroGrad()
	}
	return nil
}

// With the state on the host, SGD and AdamW give the device optimizer's
// parameters and state bit for bit, on every vector path, NaN and Inf
// gradients included, and leave nothing on the device.
func TestHostMatchesDevice(t *testing.T) {
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			want := onDevice(t, c)
			for _, isa := range optim.HostISAs() {
				t.Run(isa, func(t *testing.T) {
					defer optim.SetHostISA(isa)()
					dev := newCPU(t)
					ps := hostParams(dev)
					o := c.make(ps, optim.OnHost())
					if err := trainSteps(dev, ps, o, 0, 4); err != nil {
						t.Fatal(err)
					}
					if got := dev.Allocator().Stats().ByCategory[device.OptimizerState].Peak; got != 0 {
						t.Errorf("%d bytes of optimizer state on the device", got)
					}
					sameSnap(t, snap(ps, o), want)
					o.Release()
					o.Release() // twice: nothing
					for _, p := range ps {
						p.Release()
					}
					if n := dev.Allocator().Allocated(); n != 0 {
						t.Errorf("%d bytes left on the device", n)
					}
				})
			}
		})
	}
}

// A checkpoint's state moves between the placements: two steps with the
// state in one place, State into SetState of an optimizer with it in the
// other, two more steps, give the bits of four steps on the device. Mixed
// is the state on the host but two parameters' (KeepOnDevice), which keep
// theirs on the device: exactly their state is there. Visiting is the
// state on the host, three parameters' stepping on the device
// (StateVisits; p2 is kept, which wins; p0 has no elements).
func TestHostStateResumesAcrossPlacements(t *testing.T) {
	placements := map[string][]optim.Option{"device": nil, "host": {optim.OnHost()},
		"mixed":    {optim.OnHost(), optim.KeepOnDevice("p0", "p2", "no such parameter")},
		"visiting": {optim.OnHost(), optim.KeepOnDevice("p2"), optim.StateVisits("p0", "p4", "p5", "p2", "no such parameter")}}
	for _, c := range optCases {
		want := onDevice(t, c)
		for _, from := range []string{"device", "host", "mixed", "visiting"} {
			for _, to := range []string{"device", "host", "mixed", "visiting"} {
				t.Run(c.name+"/"+from+"-to-"+to, func(t *testing.T) {
					dev := newCPU(t)
					ps := hostParams(dev)
					a := c.make(ps, placements[from]...)
					if err := trainSteps(dev, ps, a, 0, 2); err != nil {
						t.Fatal(err)
					}
					b := c.make(ps, placements[to]...)
					if err := b.SetState(a.State()); err != nil {
						t.Fatal(err)
					}
					a.Release()
					if err := trainSteps(dev, ps, b, 2, 2); err != nil {
						t.Fatal(err)
					}
					sameSnap(t, snap(ps, b), want)
					if to == "mixed" && len(b.(optim.Stateful).State().Tensors) > 0 {
						// p0's and p2's state on the device, the rest's
						// on the host.
						var onDevice, total int64
						for k, st := range b.(optim.Stateful).State().Tensors {
							total += st.Bytes()
							if st.Device() == dev && (strings.HasPrefix(k, "p0.") || strings.HasPrefix(k, "p2.")) {
								onDevice += st.Bytes()
							}
						}
						host := b.(interface{ HostStateBytes() int64 }).HostStateBytes()
						if got := dev.Allocator().Stats().ByCategory[device.OptimizerState].Current; onDevice == 0 || got < onDevice || host == 0 {
							t.Errorf("mixed: %d bytes of p0's and p2's state on the device (%d of the category there), %d on the host, of %d", onDevice, dev.Allocator().Stats().ByCategory[device.OptimizerState].Current, host, total)
						}
					}
					b.Release()
				})
			}
		}
	}
}

// Inside backward the host optimizer gives the bits of the device
// optimizer stepping after backward, and the device's peak holds no
// optimizer state.
func TestHostInBackward(t *testing.T) {
	for _, name := range []string{"sgd", "adamw"} {
		t.Run(name, func(t *testing.T) {
			var params [2][][]float32
			for variant := 0; variant < 2; variant++ {
				dev := newCPU(t)
				m := mlp(t, dev)
				var opt optim.Stepper
				var opts []optim.Option
				if variant == 1 {
					opts = append(opts, optim.OnHost())
				}
				if name == "sgd" {
					s := optim.NewSGD(m.Parameters(), 0.1, opts...)
					s.Momentum, s.WeightDecay = 0.9, 1e-2
					opt = s
				} else {
					opt = optim.NewAdamW(m.Parameters(), 1e-2, opts...)
				}
				rng := rand.New(rand.NewPCG(9, 9))
				x := ferry.Randn(dev, rng, 16, 32)
				y := ferry.Randn(dev, rng, 16, 32)
				for step := 0; step < 3; step++ {
					err := ferry.Step(func(tape *ferry.Tape) error {
						loss := ferry.MSELoss(m.Forward(tape.Input(x)), tape.Input(y))
						if variant == 0 {
							if err := loss.Backward(); err != nil {
								return err
							}
							if err := opt.Step(); err != nil {
								return err
							}
							opt.ZeroGrad()
							return nil
						}
						opts, upd := optim.InBackward(opt)
						if err := loss.BackwardWith(opts); err != nil {
							return err
						}
						return upd.Err()
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				if variant == 1 {
					if got := dev.Allocator().Stats().ByCategory[device.OptimizerState].Peak; got != 0 {
						t.Errorf("%d bytes of optimizer state on the device", got)
					}
				}
				for _, p := range m.Parameters() {
					params[variant] = append(params[variant], p.Float32s())
				}
				x.Release()
				y.Release()
				opt.Release()
				nn.Release(m)
				if got := dev.Allocator().Allocated(); got != 0 {
					t.Errorf("%d bytes left after releasing everything", got)
				}
			}
			for i := range params[0] {
				for j := range params[0][i] {
					if math.Float32bits(params[0][i][j]) != math.Float32bits(params[1][i][j]) {
						t.Fatalf("param %d[%d]: %v on the device, %v on the host", i, j, params[0][i][j], params[1][i][j])
					}
				}
			}
		})
	}
}

// On the meta device the moments are no device allocation: the device
// optimizer's state shows in the allocator's statistics, the host
// optimizer's does not, and it holds no host memory either (it reports
// what it would hold).
func TestHostOnMeta(t *testing.T) {
	for _, host := range []bool{false, true} {
		dev := meta.New(device.Options{}, nil)
		var ps []*ferry.Tensor
		var numel int64
		for i, sh := range [][]int{{1024, 1024}, {1024}, {0}} {
			p := ferry.ZerosAs(dev, device.Parameter, sh...).SetName(fmt.Sprint("w", i))
			p.SetGrad(ferry.ZerosAs(dev, device.Gradient, sh...))
			ps = append(ps, p)
			numel += int64(p.Numel())
		}
		var opts []optim.Option
		if host {
			opts = append(opts, optim.OnHost())
		}
		o := optim.NewAdamW(ps, 1e-3, opts...)
		for range 2 {
			if err := o.Step(); err != nil {
				t.Fatal(err)
			}
		}
		onDev := dev.Allocator().Stats().ByCategory[device.OptimizerState].Current
		if host {
			if onDev != 0 || o.HostStateBytes() != 8*numel {
				t.Errorf("host: %d bytes of state on the device, %d on the host; want 0 and %d", onDev, o.HostStateBytes(), 8*numel)
			}
		} else if onDev < 8*numel || o.HostStateBytes() != 0 {
			t.Errorf("device: %d bytes of state on the device, %d on the host; want ≥ %d and 0", onDev, o.HostStateBytes(), 8*numel)
		}
		st := o.State()
		if len(st.Tensors) != 6 || st.Scalars["w0.step"] != 2 {
			t.Errorf("state %v", st.Scalars)
		}
		for k, tt := range st.Tensors {
			if tt.Device() == dev && host {
				t.Errorf("%s: host state handed out on the device", k)
			}
		}
		if err := o.SetState(st); err != nil {
			t.Fatal(err)
		}
		o.Release()
		for _, p := range ps {
			p.Release()
		}
		if n := dev.Allocator().Allocated(); n != 0 {
			t.Errorf("host=%v: %d bytes left", host, n)
		}
	}
}

// Hostile uses: a parameter the optimizer does not know is left alone (as
// Stepper says), state that does not fit is refused with nothing changed,
// an update after Release starts afresh, StateOn refuses unknown places.
func TestHostMisuse(t *testing.T) {
	dev := newCPU(t)
	ps := hostParams(dev)
	o := optim.NewAdamW(ps[:3], 1e-2, optim.OnHost())
	stranger := ps[4]
	setGrads(dev, ps, 0, false)
	before := stranger.Float32s()
	if err := o.StepParam(stranger); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, stranger.Float32s()) || len(o.State().Tensors) != 0 {
		t.Fatal("StepParam of a parameter the optimizer does not hold changed something")
	}
	if err := o.Step(); err != nil {
		t.Fatal(err)
	}
	st := o.State()
	if len(st.Tensors) != 6 {
		t.Fatalf("%d state tensors after one step, want 6", len(st.Tensors))
	}
	bad := optim.State{Tensors: map[string]*ferry.Tensor{"p1.exp_avg": ferry.Zeros(dev, 2)}, Scalars: map[string]float64{"p1.step": 1}}
	if err := o.SetState(bad); err == nil {
		t.Fatal("SetState took a tensor of the wrong shape")
	}
	bad.Tensors["p1.exp_avg"].Release()
	if got := o.State().Scalars["p2.step"]; got != 1 {
		t.Fatalf("a refused SetState changed the state: step %v", got)
	}
	o.Release()
	o.Release()
	if err := o.Step(); err != nil {
		t.Fatal(err)
	}
	if got := o.State().Scalars["p2.step"]; got != 1 {
		t.Fatalf("after Release the step count is %v, want 1", got)
	}
	o.Release()
	ints := ferry.FromInt32s(dev, []int32{1, 2}).SetName("ints")
	ints.SetGrad(ferry.FromInt32s(dev, []int32{1, 2}))
	io := optim.NewSGD([]*ferry.Tensor{ints}, 0.1, optim.OnHost())
	if err := io.Step(); err == nil || !strings.Contains(err.Error(), "float32") {
		t.Errorf("an int32 parameter: %v", err)
	}
	ints.Release()
	if _, err := optim.StateOn("gpu"); err == nil {
		t.Fatal("StateOn took gpu")
	}
	for _, w := range []string{"host", "device"} {
		if _, err := optim.StateOn(w); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		p.Release()
	}
}

// BenchmarkHostAdamWStep times one AdamW update of a 16M-element
// parameter on the CPU device, with the state on the device (the CPU
// device's kernel) and on the host (download, host update, upload).
//
//	go test -run - -bench HostAdamWStep ./optim
func BenchmarkHostAdamWStep(b *testing.B) {
	for _, place := range []string{"device", "host"} {
		b.Run(place, func(b *testing.B) {
			dev := newCPU(b)
			n := 1 << 24
			p := ferry.Zeros(dev, n).SetName("w")
			p.SetGrad(ferry.Full(dev, 0.01, n))
			opt, _ := optim.StateOn(place)
			o := optim.NewAdamW([]*ferry.Tensor{p}, 1e-3, opt)
			if err := o.Step(); err != nil { // makes the state
				b.Fatal(err)
			}
			b.SetBytes(28 * int64(n))
			for b.Loop() {
				if err := o.Step(); err != nil {
					b.Fatal(err)
				}
			}
			o.Release()
			p.Release()
		})
	}
}

// State that visits the device (StateVisits) steps there to the bits of
// the state on the device, for each optimizer, and between steps is on
// the host only: the device's optimizer-state memory is back to what the
// kept parameter holds, and peaked at more while the state visited. Its
// State's tensors are on the host, and Release leaves nothing behind.
func TestStateVisitsTheDevice(t *testing.T) {
	for _, c := range optCases {
		t.Run(c.name, func(t *testing.T) {
			want := onDevice(t, c)
			kept := map[bool]int64{}
			for _, keep := range []bool{false, true} {
				dev := newCPU(t)
				ps := hostParams(dev)
				opts := []optim.Option{optim.OnHost(), optim.StateVisits("p5", "p4")}
				if keep {
					opts = append(opts, optim.KeepOnDevice("p4"))
				}
				o := c.make(ps, opts...)
				if err := trainSteps(dev, ps, o, 0, 4); err != nil {
					t.Fatal(err)
				}
				sameSnap(t, snap(ps, o), want)
				st := dev.Allocator().Stats().ByCategory[device.OptimizerState]
				kept[keep] = st.Current
				if st.Peak <= st.Current && len(o.(optim.Stateful).State().Tensors) > 0 {
					t.Errorf("keep %v: the device's optimizer state peaked at %d, its %d now: the state never visited", keep, st.Peak, st.Current)
				}
				for k, s := range o.(optim.Stateful).State().Tensors {
					if strings.HasPrefix(k, "p5.") && s.Device() == dev {
						t.Errorf("%s is on the device", k)
					}
				}
				if got := o.(interface{ StateVisiting() []string }).StateVisiting(); keep && !slices.Equal(got, []string{"p5"}) || !keep && !slices.Equal(got, []string{"p4", "p5"}) {
					t.Errorf("keep %v: StateVisiting %v", keep, got)
				}
				o.Release()
				for _, p := range ps {
					p.Release()
				}
				if n := dev.Allocator().Allocated(); n != 0 {
					t.Errorf("%d bytes left on the device", n)
				}
			}
			if stateful := len(want.tensors) > 0; kept[false] != 0 || (kept[true] > 0) != stateful {
				t.Errorf("optimizer state on the device between steps: %d visiting p4 and p5, %d with p4 kept", kept[false], kept[true])
			}
		})
	}
}

// Inside backward, a visiting state brought up ahead of its update
// (StateVisitsAhead) is on the device before its update (as its
// gradient, backward's last, completes), and the parameters are the
// device optimizer's to the bit either way.
func TestStateVisitsAheadInBackward(t *testing.T) {
	var want *snapshot
	for _, ahead := range []int{-1, 0, 3, 100} { // -1: the state on the device
		dev := newCPU(t)
		m := mlp(t, dev)
		for i, p := range m.Parameters() {
			p.SetName(fmt.Sprintf("p%d", i))
		}
		opt := optim.NewAdamW(m.Parameters(), 1e-2)
		if ahead >= 0 {
			opt = optim.NewAdamW(m.Parameters(), 1e-2, optim.OnHost(), optim.StateVisits("p0"), optim.StateVisitsAhead(ahead))
		}
		rng := rand.New(rand.NewPCG(9, 9))
		x := ferry.Randn(dev, rng, 16, 32)
		y := ferry.Randn(dev, rng, 16, 32)
		var before int64 // the most optimizer state on the device before an update, in the last step
		for step := 0; step < 3; step++ {
			err := ferry.Step(func(tape *ferry.Tape) error {
				loss := ferry.MSELoss(m.Forward(tape.Input(x)), tape.Input(y))
				opts, upd := optim.InBackward(opt)
				update := opts.GradReady
				before = 0
				opts.GradReady = func(p *ferry.Tensor) {
					before = max(before, dev.Allocator().Stats().ByCategory[device.OptimizerState].Current)
					update(p)
				}
				if err := loss.BackwardWith(opts); err != nil {
					return err
				}
				return upd.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		switch {
		case ahead > 0 && before == 0:
			t.Errorf("ahead %d: no optimizer state on the device before its update", ahead)
		case ahead == 0 && before != 0:
			t.Errorf("ahead 0: %d bytes of optimizer state on the device before its update", before)
		}
		got := snap(m.Parameters(), opt)
		if want == nil {
			want = &got
		}
		sameSnap(t, got, *want)
		x.Release()
		y.Release()
		opt.Release()
		nn.Release(m)
		if n := dev.Allocator().Allocated(); n != 0 {
			t.Errorf("ahead %d: %d bytes left on the device", ahead, n)
		}
	}
}
