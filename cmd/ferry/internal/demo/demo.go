// Package demo runs the experiment ferry started from: L layers of
// Linear(W, W) + ReLU at batch B, trained with MSE loss and SGD, once per
// offload mode, measuring memory the way the original PyTorch user did
// (allocated before and after forward, peak during forward) and more.
// `ferry demo` prints its results; tests compare devices with it.
package demo

import (
	"context"
	"encoding/binary"
	"errors"
	"ferry/device/meta"
	"ferry/internal/fsx"
	"ferry/models"
	_ "ferry/models/all" // the families the demo and the planner know
	"ferry/nn"
	"ferry/plan"
	"ferry/train"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unsafe"

	"ferry"
	"ferry/device"
	"ferry/internal/rss"
	"ferry/offload"
	"ferry/optim"
	"ferry/trace"
	"ferry/trace/plots"
)

// The demo's modes: the memory modes of package offload, and naive, the
// origin user's mistake, which only the demo runs.
const (
	None             = string(offload.None)
	Naive            = "naive" // copy each layer input to the host and discard the copy
	SaveOnHost       = string(offload.SaveOnHost)
	Offload          = string(offload.Offload)
	OffloadDisk      = string(offload.OffloadDisk)
	Recompute        = string(offload.Recompute)
	RecomputeOffload = string(offload.RecomputeOffload)
	// Policy applies Config.Policy and Config.Segments whatever their
	// placements (keep, host, disk, recompute), exactly as the planner
	// replays them (PlanModel): `ferry demo --policy FILE` runs it.
	Policy = string(offload.PolicyMode)
)

// AllModes lists the modes a demo runs by default (every mode but
// policy, which needs a policy; naive only for a model that can make the
// origin user's copy, models.NaiveForwarder).
var AllModes = []string{None, Naive, SaveOnHost, Offload, OffloadDisk, Recompute, RecomputeOffload}

// NaiveExplanation says why the naive mode saves nothing.
const NaiveExplanation = `Why "naive" saves nothing: x.To(host) makes a new tensor on the host and leaves x where it is. ` +
	`The copy is discarded at once, and the tape still holds the device tensor that Linear saved for ` +
	`backward, so no device byte is freed (PyTorch: prev_tensor.to('cpu') returns a copy; autograd keeps ` +
	`the original). Offloading has to happen where tensors are saved: saved-tensor hooks, as in ` +
	`save-on-host and offload.`

// Config describes one demo run.
type Config struct {
	Device        string
	DeviceOptions device.Options
	// Family is the model (models.Lookup) and Sizes its sizes (missing
	// ones take the family's defaults for the device).
	Family     models.Family
	Sizes      models.Sizes
	Modes      []string
	Steps      int    // timed steps after one warm-up
	SkipWarmup bool   // no warm-up step (the meta device needs none)
	Seed       uint64 // parameters, input and target
	// Optimizer is a registered optimizer's name (optim.Names), "" for
	// the family's usual one; LR its learning rate (0: the usual).
	Optimizer string
	LR        float32
	DiskDir   string         // for offload-disk ("" = the system's temporary directory)
	Offload   offload.Config // for offload and offload-disk
	// Policy, if set, replaces the offloader's default choices (ferry plan
	// writes one).
	Policy func(ferry.SaveInfo, *ferry.Tensor) offload.Placement
	// Segments says which segments mode policy recomputes (see
	// offload.Policy.SegmentHooks); nil: none.
	Segments *ferry.SegmentHooks
	// OptimizerInBackward updates each parameter as soon as its gradient
	// is complete and frees the gradient (optim.InBackward), so gradients
	// never all exist at once.
	OptimizerInBackward bool
	// OptimizerState places the optimizer's state: "" or "device", or
	// "host" (optim.OnHost), for every mode alike (it changes no value).
	OptimizerState string
	// ParamsOnHost names the parameters that live in host memory ("*":
	// all), and GradsOnHost sends the gradients there (offload.Setup), for
	// every mode alike.
	ParamsOnHost []string
	GradsOnHost  bool
	// StateOnDevice names parameters that keep their optimizer state on
	// the device, with the rest's on the host (optim.KeepOnDevice): they
	// are neither streamed nor their gradients sent to the host.
	StateOnDevice []string
	// StateVisiting names parameters whose optimizer state is on the host
	// with the rest's but steps on the device (optim.StateVisits): their
	// gradients are not sent to the host.
	StateVisiting []string
	// StateAhead: optim.StateVisitsAhead.
	StateAhead int
	// SerialGradCopies waits for each gradient's copy to the host when
	// the next gradient completes (offload.StreamConfig), as a plan for
	// the least memory says.
	SerialGradCopies bool
	// Precision is the element type of the model's matrix products
	// (train.Config.Precision): device.Float32 (the zero value) or
	// device.BFloat16.
	Precision device.DType
	// TraceDir, if set, receives for each mode a Chrome trace
	// (<mode>.trace.json) and a chart (<mode>.memory.svg) of the last
	// step's memory by category and its phases.
	TraceDir string
	// Open opens the device; nil uses device.Open.
	Open func(name string, opts device.Options) (device.Device, error)
	// Stop, when closed, ends the run at the next step boundary: the mode
	// under way is abandoned and Execute returns the finished modes with
	// ErrInterrupted.
	Stop <-chan struct{}
}

// ErrInterrupted is returned (wrapped) by Execute when Config.Stop closed.
var ErrInterrupted = errors.New("interrupted")

func (c Config) stopped() bool {
	select {
	case <-c.Stop:
		return true
	default:
		return false
	}
}

// Origin is the family of the origin experiment, the demo's default.
const Origin = "mlp"

// DefaultConfig is the origin experiment at a size the device can take in
// well under a minute: 40 layers of 4096 at batch 1024 on a GPU or the meta
// device, of 1024 at batch 256 on the CPU (the mlp family's defaults).
func DefaultConfig(dev string) Config {
	f, err := models.Lookup(Origin)
	if err != nil {
		panic("demo: the origin model's family is not registered (import ferry/models/mlp)")
	}
	return Config{Device: dev, Family: f, Steps: 5, Seed: 1, Offload: offload.DefaultConfig()}
}

// sizes are cfg's sizes with the family's defaults for the device filled
// in.
func (cfg Config) sizes() models.Sizes {
	kind, _, _ := device.ParseName(cfg.Device)
	s := models.Defaults(cfg.Family, kind)
	for k, v := range cfg.Sizes {
		s[k] = v
	}
	return s
}

// Run is one mode's measurements. Byte figures are the device allocator's
// (PyTorch's memory_allocated), from the last timed step; every step gives
// the same figures.
type Run struct {
	Mode               string  `json:"mode"`
	BeforeForwardBytes int64   `json:"before_forward_bytes"`
	AfterForwardBytes  int64   `json:"after_forward_bytes"`
	PeakForwardBytes   int64   `json:"peak_forward_bytes"`
	PeakStepBytes      int64   `json:"peak_step_bytes"`
	StepSeconds        float64 `json:"step_seconds"` // median of the timed steps
	// StepSecondsFast is their tenth percentile (plan.FastQuantile):
	// the step on the machine with nothing else running, what a profile
	// fitted by ferry calibrate predicts.
	StepSecondsFast float64   `json:"step_seconds_fast"`
	StepSecondsAll  []float64 `json:"step_seconds_all"`
	Loss            float32   `json:"loss"` // of the first step
	GradsEqualNone  *bool     `json:"grads_equal_none"`
	OffloadedBytes  int64     `json:"offloaded_bytes"` // per step, to host and disk
	ToHostBytes     int64     `json:"to_host_bytes"`
	ToDiskBytes     int64     `json:"to_disk_bytes"`
	StallSeconds    float64   `json:"stall_seconds"` // per step
	OverlapRatio    float64   `json:"overlap_ratio"`
	PeakRSSBytes    int64     `json:"peak_rss_bytes,omitempty"`
	// Simulated is true when times are the meta device\'s predictions.
	Simulated bool `json:"simulated,omitempty"`
	// Clock says what the times are: "measured" on a device that computes,
	// "predicted" by a meta device's cost model (Simulated), or "none" on
	// a meta device without one, whose step times are only the host's
	// bookkeeping and mean nothing.
	Clock             string `json:"clock"`
	HostPeakBytes     int64  `json:"host_peak_bytes"` // the host allocator's peak (pinned pool on a GPU)
	ReservedPeakBytes int64  `json:"reserved_peak_bytes"`
	gradHash          uint64
	hasData           bool
}

// Result is a whole demo.
type Result struct {
	Device          string       `json:"device"`
	Layers          int          `json:"layers"`
	Width           int          `json:"width"`
	Batch           int          `json:"batch"`
	Steps           int          `json:"steps"`
	ActivationBytes int64        `json:"activation_bytes"` // one layer's output
	ParameterBytes  int64        `json:"parameter_bytes"`
	Model           string       `json:"model"`
	Sizes           models.Sizes `json:"sizes"`
	Description     string       `json:"description,omitempty"`
	ParameterCount  int64        `json:"parameter_count"`
	MatmulBackend   string       `json:"matmul_backend,omitempty"`
	Precision       string       `json:"precision"` // fp32 or bf16 (Config.Precision)
	Runs            []Run        `json:"runs"`
	Notes           []string     `json:"notes,omitempty"`
}

// Execute runs every mode of cfg.
func Execute(cfg Config) (*Result, error) {
	if cfg.Family == nil {
		return nil, fmt.Errorf("demo: no model family")
	}
	if cfg.Steps < 1 {
		return nil, fmt.Errorf("demo: steps must be positive, got %d", cfg.Steps)
	}
	cfg.Sizes = cfg.sizes()
	if err := models.Validate(cfg.Family, cfg.Sizes); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	// The header's figures, from the model built on the meta device
	// (shapes only; no step runs).
	w, err := cfg.Family.Workload(meta.New(device.Options{}, nil), cfg.Sizes, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	_, naive := w.(models.NaiveForwarder)
	rows, width := w.MatmulShape()
	res := &Result{Device: cfg.Device, Layers: cfg.Sizes.Int("layers"), Width: width, Batch: cfg.Sizes.Int("batch"), Steps: cfg.Steps,
		ActivationBytes: w.ActivationBytes(), ParameterCount: w.ParameterCount(), ParameterBytes: 4 * w.ParameterCount(),
		Model: cfg.Family.Name(), Description: w.Describe() + ", " + cfg.optimizerName(w), Sizes: cfg.Sizes, Precision: offload.PrecisionName(cfg.Precision)}
	_ = rows
	w.Release()
	if cfg.Modes == nil {
		for _, m := range AllModes {
			if m != Naive || naive {
				cfg.Modes = append(cfg.Modes, m)
			}
		}
	}
	for _, m := range cfg.Modes {
		if m == Policy && cfg.Policy == nil {
			return nil, fmt.Errorf("demo: mode policy needs a policy (ferry demo --policy FILE, written by ferry plan)")
		}
		if !slices.Contains(AllModes, m) && m != Policy {
			return nil, fmt.Errorf("demo: unknown mode %q (modes: %s, %s)", m, strings.Join(AllModes, ", "), Policy)
		}
		if m == Naive && !naive {
			return nil, fmt.Errorf("demo: mode naive is the origin MLP's mistake; a %s has no layer inputs to copy by hand", cfg.Family.Name())
		}
	}
	if cfg.Open == nil {
		cfg.Open = device.Open
	}
	var none *Run
	for _, mode := range cfg.Modes {
		if cfg.stopped() {
			return res, fmt.Errorf("before mode %s: %w", mode, ErrInterrupted)
		}
		r, err := runMode(cfg, mode)
		if err != nil {
			res.finish(none)
			return res, fmt.Errorf("mode %s: %w", mode, err)
		}
		if mode == None {
			none = r
		}
		res.Runs = append(res.Runs, *r)
	}
	res.finish(none)
	return res, nil
}

// samePeakNote explains a step peak that no mode lowers: when every run
// peaks within 5% of the others, above what any forward held,
// the peak falls in backward, where the parameters and the gradients
// built so far are what the device holds, and no mode of the demo moves
// those. It is "" otherwise.
func samePeakNote(res *Result) string {
	if len(res.Runs) < 2 {
		return ""
	}
	lo, hi, fwd := res.Runs[0].PeakStepBytes, res.Runs[0].PeakStepBytes, int64(0)
	for _, r := range res.Runs {
		lo, hi, fwd = min(lo, r.PeakStepBytes), max(hi, r.PeakStepBytes), max(fwd, r.PeakForwardBytes)
	}
	if hi-lo > hi/20 || hi <= fwd {
		return ""
	}
	same := device.FormatBytes(hi)
	if lo != hi {
		same = device.FormatBytes(lo) + " to " + same
	}
	return fmt.Sprintf("the step peak is about the same in every mode (%s): it falls in backward, above forward's peak (at most %s), "+
		"when the parameters (%s) and the gradients built so far are what the device holds, and the modes move saved activations, "+
		"not those; ferry train and ferry plan can place gradients and parameters in host memory (--gradients, --parameters)",
		same, device.FormatBytes(fwd), device.FormatBytes(res.ParameterBytes))
}

// finish compares every finished run's gradients with mode none's.
func (res *Result) finish(none *Run) {
	for _, r := range res.Runs {
		if none != nil && r.Mode == Recompute && r.AfterForwardBytes-r.BeforeForwardBytes >= none.AfterForwardBytes-none.BeforeForwardBytes {
			res.Notes = append(res.Notes, "recompute keeps as much after forward as none here: each checkpointed segment keeps its input, "+
				"and its input is all that the segment saves anyway (a Linear saves its input, its ReLU the next layer's input), "+
				"so there is nothing to drop; recompute pays off where a segment saves more than its input, as a transformer block does")
		}
	}
	if note := samePeakNote(res); note != "" {
		res.Notes = append(res.Notes, note)
	}
	if none != nil && none.hasData {
		for i := range res.Runs {
			eq := res.Runs[i].gradHash == none.gradHash && math.Float32bits(res.Runs[i].Loss) == math.Float32bits(none.Loss)
			res.Runs[i].GradsEqualNone = &eq
		}
	}
}

// demoTask is a workload as the Trainer's task: the same input and target
// every step (the first made once, on the host, and copied in for each
// step, so that the device holds one input as the origin test did), and
// forward in the mode's way (the origin user's copy in mode naive).
type demoTask struct {
	w             models.Workload
	dev           device.Device
	input, target *ferry.Tensor // on the host
	naive         bool
}

func (d *demoTask) Model() nn.Module { return workloadModule{d.w} }

func (d *demoTask) Batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	err = ferry.Catch(func() error {
		x, y = d.input.To(d.dev), d.target.Clone()
		return nil
	})
	return x, y, 1, err
}

func (d *demoTask) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	if d.naive {
		return d.w.(models.NaiveForwarder).ForwardNaive(tape, x)
	}
	return d.w.Forward(tape, x, recompute)
}

// Loss moves the target to the device only now: as in the original test,
// forward runs holding only the parameters and the input.
func (d *demoTask) Loss(out, y *ferry.Tensor) *ferry.Tensor {
	return d.w.Loss(out, y.To(d.dev))
}

// workloadModule lends a workload's parameters to the Trainer, which
// never calls Forward on it (the task does).
type workloadModule struct{ w models.Workload }

func (m workloadModule) Forward(x *ferry.Tensor) *ferry.Tensor {
	panic("demo: the workload runs through its task")
}
func (m workloadModule) Parameters() []*ferry.Tensor { return m.w.Parameters() }

// runMode trains the workload in one mode through the Trainer, measuring
// each step from its hooks: memory before and after forward and at its
// peaks, time (the device's prediction on meta), what moved, and a hash
// of the first step's gradients.
func runMode(cfg Config, mode string) (*Run, error) {
	opts := cfg.DeviceOptions
	dev, err := cfg.Open(cfg.Device, opts)
	if err != nil {
		return nil, fmt.Errorf("%w\n(`ferry doctor` reports which devices ferry found; --device cpu and --device meta run anywhere)", err)
	}
	defer dev.Close()
	m, err := cfg.Family.Workload(buildOn(dev, cfg), cfg.Sizes, cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer m.Release()
	where, err := optim.StateOn(cfg.OptimizerState)
	if err != nil {
		return nil, err
	}
	opt, err := models.NewOptimizer(m, cfg.Optimizer, cfg.LR, where, optim.KeepOnDevice(cfg.StateOnDevice...), optim.StateVisits(cfg.StateVisiting...), optim.StateVisitsAhead(cfg.StateAhead))
	if err != nil {
		return nil, err
	}
	defer opt.Release()
	task := &demoTask{w: m, dev: dev, naive: mode == Naive}
	if err := ferry.Catch(func() error {
		in, tgt := m.Data(dev, cfg.Seed)
		task.input, task.target = in.To(dev.Host()), tgt
		in.Release()
		return nil
	}); err != nil {
		return nil, err
	}
	defer task.input.Release()
	defer task.target.Release()

	// The mode, as offload sets it up for every caller; naive is the
	// demo's own, and mode policy applies cfg's placements, segments and
	// optimizer placement with the hooks over the loss too, as the
	// planner replays a step.
	setup := offload.Setup{Mode: offload.Mode(mode), Config: &cfg.Offload, DiskDir: cfg.DiskDir,
		OptimizerInBackward: cfg.OptimizerInBackward, Params: m.Parameters(), ParamsOnHost: cfg.ParamsOnHost, GradsOnHost: cfg.GradsOnHost,
		SerialGradCopies: cfg.SerialGradCopies, StateOnDevice: cfg.StateOnDevice, StateVisiting: cfg.StateVisiting}
	switch mode {
	case Naive:
		setup.Mode = offload.None
	case Policy:
		oc := cfg.Offload
		oc.Policy = cfg.Policy
		setup.Mode, setup.Config, setup.Segments, setup.HooksOverLoss = offload.Offload, &oc, cfg.Segments, true
	}

	r := &Run{Mode: mode, hasData: device.HasData(dev)}
	alloc := dev.Allocator()
	hostAlloc := dev.Host().Allocator()
	sim, simulated := dev.(interface {
		Now() float64
		StallSeconds() float64
	})
	first, last := 1, cfg.Steps+1 // step 1 warms up
	if cfg.SkipWarmup {
		last = cfg.Steps
	}
	warm := func(step int) bool { return step > 1 || cfg.SkipWarmup }
	var (
		simStart, simStall float64
		t0                 time.Time
		statsBefore        offload.Stats
		rec                *trace.Recorder
		stopRec, endPhase  func()
		// preForward is the most the step held before its forwards (the
		// streamer's page-outs and prefetches at its start, a micro-batch
		// before the last), which the peak's reset at each forward's start
		// would drop: plan.Replay's step peak counts them.
		preForward, preForwardReserved int64
		hashes                         = map[*ferry.Tensor]uint64{}
		memory                         *offload.Memory
	)
	stats := func() (offload.Stats, bool) { return memory.Stats() }
	hooks := train.Hooks{
		StepStart: func(step int) {
			hostAlloc.ResetPeak()
			alloc.ResetPeak()
			preForward, preForwardReserved = 0, 0
			if simulated {
				simStart, simStall = sim.Now(), sim.StallSeconds()
			}
			statsBefore, _ = stats()
			if cfg.TraceDir != "" && step == last {
				rec = newRecorder(dev, simulated)
				stopDev := rec.Allocator(dev.Name(), alloc)
				// The host's memory too: offloaded tensors, and parameters,
				// gradients and optimizer state placed there.
				stopHost := rec.Allocator(hostName(dev), hostAlloc)
				stopRec = func() { stopDev(); stopHost() }
			}
		},
		ForwardStart: func(step, micro int) {
			t0 = time.Now()
			r.BeforeForwardBytes = alloc.Allocated()
			st := alloc.Stats()
			preForward, preForwardReserved = max(preForward, st.AllocatedBytes.Peak), max(preForwardReserved, st.ReservedBytes.Peak)
			alloc.ResetPeak()
			if rec != nil {
				endPhase = rec.Begin("step", "forward")
			}
		},
		ForwardEnd: func(step, micro int) {
			if rec != nil {
				endPhase()
				endPhase = rec.Begin("step", "backward + optimizer")
			}
			r.AfterForwardBytes = alloc.Allocated()
			r.PeakForwardBytes = alloc.Stats().AllocatedBytes.Peak
		},
		GradReady: func(step int, p *ferry.Tensor) {
			if step == first && r.hasData {
				hashes[p] = hashGrad(p)
			}
		},
		GradsReady: func(step int, params []*ferry.Tensor) {
			if step == first && r.hasData {
				for _, p := range params {
					hashes[p] = hashGrad(p)
				}
			}
		},
		StepEnd: func(step int) {
			dev.Compute().Synchronize()
			elapsed := time.Since(t0).Seconds()
			if rec != nil {
				endPhase()
				stopRec()
			}
			if !warm(step) {
				return
			}
			if simulated && sim.Now() > 0 {
				// A device with a cost model: report its prediction.
				elapsed = sim.Now() - simStart
				r.Simulated = true
			}
			r.StepSecondsAll = append(r.StepSecondsAll, elapsed)
			st := alloc.Stats()
			// The most any timed step took (plan.Replay's too: a step's
			// peak may alternate by a cached block's rounding).
			r.PeakStepBytes = max(r.PeakStepBytes, preForward, st.AllocatedBytes.Peak)
			r.ReservedPeakBytes = max(r.ReservedPeakBytes, preForwardReserved, st.ReservedBytes.Peak)
			r.HostPeakBytes = max(r.HostPeakBytes, hostAlloc.Stats().AllocatedBytes.Peak)
			if s, ok := stats(); ok {
				s = s.Since(statsBefore)
				r.ToHostBytes, r.ToDiskBytes = s.BytesToHost, s.BytesToDisk
				r.OffloadedBytes = s.BytesToHost + s.BytesToDisk
				r.StallSeconds = s.StallSeconds
				r.OverlapRatio = s.OverlapRatio()
			}
			if r.Simulated {
				r.StallSeconds = sim.StallSeconds() - simStall
			}
		},
		Step: func(s train.StepInfo) {
			if s.Step == first {
				r.Loss = float32(s.Loss)
			}
		},
	}
	tr, err := train.New(dev, task, train.Config{Steps: last, Optimizer: opt, Memory: setup, Hooks: hooks, Precision: cfg.Precision})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	memory = tr.Memory()
	runtime.GC()
	debug.FreeOSMemory()
	rssOK := rss.ResetPeak() == nil
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-cfg.Stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := tr.Run(ctx)
	if err != nil {
		return nil, err
	}
	if res.Interrupted {
		return nil, ErrInterrupted
	}
	if r.hasData {
		h := fnv.New64a()
		for _, p := range m.Parameters() {
			binary.Write(h, binary.LittleEndian, hashes[p])
		}
		r.gradHash = h.Sum64()
	}
	if rec != nil {
		if err := writeTrace(cfg.TraceDir, mode, dev.Name(), hostName(dev), rec); err != nil {
			return nil, err
		}
	}
	r.StepSeconds = train.Median(r.StepSecondsAll)
	r.StepSecondsFast = train.Quantile(r.StepSecondsAll, plan.FastQuantile)
	switch {
	case r.Simulated:
		r.Clock = "predicted"
	case r.hasData:
		r.Clock = "measured"
	default:
		r.Clock = "none"
	}
	if rssOK {
		_, r.PeakRSSBytes, _ = rss.Read()
	}
	return r, nil
}

// hashGrad hashes the bits of p's gradient: equal hashes mean bitwise
// equal gradients (to a 64-bit hash's certainty).
func hashGrad(p *ferry.Tensor) uint64 {
	h := fnv.New64a()
	if g := p.Grad(); g != nil {
		v := g.Float32s()
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*4))
	}
	return h.Sum64()
}

func newRecorder(dev device.Device, simulated bool) *trace.Recorder {
	if sim, ok := dev.(interface{ Now() float64 }); ok {
		if simulated && sim.Now() > 0 {
			return trace.New(sim.Now) // predicted time
		}
		return trace.NewCounting() // time does not move: order events
	}
	return trace.New(nil)
}

// hostName names the host's allocator in traces.
func hostName(dev device.Device) string { return dev.Name() + " host" }

func writeTrace(dir, mode, allocator, host string, rec *trace.Recorder) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Each file appears whole or not at all (a full disk leaves no
	// truncated trace).
	if err := fsx.WriteAtomic(filepath.Join(dir, mode+".trace.json"), rec.WriteChrome); err != nil {
		return err
	}
	if err := plots.MemoryOf(dir, mode+".memory", "ferry demo, mode "+mode+": memory allocated on "+allocator+" during one step, by category",
		rec, allocator); err != nil {
		return err
	}
	return plots.MemoryOf(dir, mode+".host-memory", "ferry demo, mode "+mode+": host memory allocated for "+allocator+" during one step, by category",
		rec, host)
}
