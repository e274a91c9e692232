package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/internal/demo"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/plan"
	"ferry/trace"
	"ferry/train"
)

// The train commands share one loop (runTraining) and differ in their
// task: the model, the data and the evaluation.

// trainTask is what runTraining trains.
type trainTask interface {
	// describe is one line about the model and data, for people; title
	// is a short form for plots.
	describe() string
	title() string
	model() nn.Module
	// forward runs the model; recompute checkpoints each layer or block.
	forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor
	loss(out, y *ferry.Tensor) *ferry.Tensor
	// batch returns the inputs and targets of micro-batch micro of step
	// (1-based), and how many samples or tokens it holds. It depends on
	// the step alone, so that a resumed run sees the same data.
	batch(step, micro int) (x, y *ferry.Tensor, items int)
	// setStep keys dropout; setTraining switches it.
	setStep(step uint64)
	setTraining(on bool)
	// evaluate computes held-out metrics (lower "loss" is better).
	evaluate() (map[string]float64, error)
	// identity is what a checkpoint must match to be resumed by this run.
	identity() map[string]any
	release()
}

// trainOptions are the flags every train command has.
type trainOptions struct {
	device, mode, policy, diskDir string
	offload                       bool
	batch, steps, warmup, accum   int
	evalEvery, logEvery           int
	seed                          uint64
	lr, minLR, clip               float64
	weightDecay, momentum         float64
	optimizer                     string
	logPath, plotDir              string
	checkpointDir                 string
	checkpointEvery, keep         int
	resume                        bool
	stopAfter                     int
	unit                          string // "samples" or "tokens"
}

// trainModes are the memory modes of a training run: the demo's, less
// naive (which trains the same as none and only shows the origin mistake).
var trainModes = []string{demo.None, demo.SaveOnHost, demo.Offload, demo.OffloadDisk, demo.Recompute, demo.RecomputeOffload}

func (o *trainOptions) register(fs *flag.FlagSet, lr float64, optimizer string) {
	fs.StringVar(&o.device, "device", "cpu", "device to train on: cpu or cuda[:N]")
	fs.StringVar(&o.mode, "mode", demo.None, "memory mode: "+strings.Join(trainModes, ", "))
	fs.BoolVar(&o.offload, "offload", false, "offload saved activations (the same as --mode offload)")
	fs.StringVar(&o.policy, "policy", "", "offload policy file from `ferry plan` (implies the offloader)")
	fs.StringVar(&o.diskDir, "disk-dir", "", "directory for the offloader's disk tier (offload-disk, or a policy with disk placements)")
	fs.IntVar(&o.accum, "accum", 1, "micro-batches per optimizer step (gradient accumulation)")
	fs.Float64Var(&o.lr, "lr", lr, "peak learning rate")
	fs.Float64Var(&o.minLR, "min-lr", -1, "learning rate at the end of the cosine decay (default a tenth of --lr)")
	fs.IntVar(&o.warmup, "warmup", -1, "linear warm-up steps (default a tenth of the steps)")
	fs.Float64Var(&o.clip, "clip", 0, "clip gradients to this global L2 norm (0: no clipping)")
	fs.StringVar(&o.optimizer, "optimizer", optimizer, "sgd or adamw")
	fs.Float64Var(&o.weightDecay, "weight-decay", -1, "weight decay (default: 0 for sgd, 0.1 for adamw)")
	fs.Float64Var(&o.momentum, "momentum", 0.9, "SGD momentum")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the initialisation, the data order and dropout")
	fs.IntVar(&o.logEvery, "log-every", 0, "steps between progress lines and --log records (default: about 50 per run)")
	fs.StringVar(&o.logPath, "log", "", "append one JSON object per logging interval to this file (JSON lines)")
	fs.StringVar(&o.plotDir, "plot", "", "write loss curves and one step's memory by category (PNG and SVG) to this directory")
	fs.StringVar(&o.checkpointDir, "checkpoint-dir", "", "write checkpoints to this directory")
	fs.IntVar(&o.checkpointEvery, "checkpoint-every", 0, "steps between checkpoints (default: at evaluations; 0 with --checkpoint-dir)")
	fs.IntVar(&o.keep, "keep", 3, "checkpoints to keep in --checkpoint-dir")
	fs.BoolVar(&o.resume, "resume", false, "resume from the latest checkpoint in --checkpoint-dir")
	fs.IntVar(&o.stopAfter, "stop-after", 0, "stop after this many steps of this run (the schedule still spans --steps), checkpointing if asked; resume later with --resume")
}

// validate checks the shared flags; set names the flags given.
func (o *trainOptions) validate(set map[string]bool) error {
	if err := positive(set, map[string]int{"batch": o.batch, "accum": o.accum, "log-every": o.logEvery,
		"checkpoint-every": o.checkpointEvery, "keep": o.keep, "steps": o.steps, "eval-every": o.evalEvery,
		"stop-after": o.stopAfter}); err != nil {
		return err
	}
	if set["warmup"] && o.warmup < 0 {
		return fmt.Errorf("--warmup must be ≥ 0, got %d", o.warmup)
	}
	if set["min-lr"] && !(o.minLR >= 0) {
		return fmt.Errorf("--min-lr must be ≥ 0, got %v", o.minLR)
	}
	if o.batch > maxTrainDim || o.steps > maxTrainDim || o.accum > maxTrainDim {
		return fmt.Errorf("--batch, --steps and --accum must be at most %d", maxTrainDim)
	}
	if o.offload {
		if set["mode"] && o.mode != demo.Offload {
			return fmt.Errorf("--offload and --mode %s disagree; give one", o.mode)
		}
		o.mode = demo.Offload
	}
	if !contains(trainModes, o.mode) {
		return fmt.Errorf("--mode %q is not one of %s", o.mode, strings.Join(trainModes, ", "))
	}
	if o.policy != "" && o.mode != demo.None && o.mode != demo.Offload && o.mode != demo.OffloadDisk {
		return fmt.Errorf("--policy applies to the offloader; it cannot be combined with --mode %s", o.mode)
	}
	if o.policy != "" && o.mode == demo.None {
		o.mode = demo.Offload // a policy runs through the offloader
	}
	if o.optimizer != "sgd" && o.optimizer != "adamw" {
		return fmt.Errorf("--optimizer %q: want sgd or adamw", o.optimizer)
	}
	if o.minLR < 0 {
		o.minLR = o.lr / 10
	}
	if o.weightDecay < 0 {
		o.weightDecay = 0
		if o.optimizer == "adamw" {
			o.weightDecay = 0.1
		}
	}
	finite := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("--%s must be a finite number ≥ 0, got %v", name, v)
		}
		return nil
	}
	for name, v := range map[string]float64{"clip": o.clip, "weight-decay": o.weightDecay, "momentum": o.momentum} {
		if err := finite(name, v); err != nil {
			return err
		}
	}
	if o.momentum >= 1 {
		return fmt.Errorf("--momentum must be below 1, got %v", o.momentum)
	}
	if (o.resume || set["checkpoint-every"] || set["keep"]) && o.checkpointDir == "" {
		return fmt.Errorf("--resume, --checkpoint-every and --keep need --checkpoint-dir")
	}
	return nil
}

// maxTrainDim bounds sizes and counts given on the command line, so that
// products of them cannot overflow before the memory checks see them.
const maxTrainDim = 1 << 24

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// trainSummary is the --json object (and the source of the human one).
type trainSummary struct {
	Task           string             `json:"task"`
	Device         string             `json:"device"`
	Mode           string             `json:"mode"`
	Model          string             `json:"model"`
	ParameterCount int64              `json:"parameter_count"`
	Steps          int                `json:"steps"`
	ResumedFrom    int                `json:"resumed_from_step,omitempty"`
	Interrupted    bool               `json:"interrupted"`
	Stopped        bool               `json:"stopped_early"` // --stop-after
	WallSeconds    float64            `json:"wall_seconds"`
	StepSeconds    float64            `json:"step_seconds"` // median
	ItemsPerSecond float64            `json:"-"`
	FinalTrainLoss float64            `json:"final_train_loss"`
	Metrics        map[string]float64 `json:"-"` // task metrics, merged into the object
	PeakBytes      map[string]int64   `json:"peak_bytes_by_category"`
	PeakTotalBytes int64              `json:"peak_bytes"`
	Offload        *offload.Stats     `json:"offload,omitempty"`
	Checkpoint     string             `json:"checkpoint,omitempty"`
	Plots          []string           `json:"plots,omitempty"`
	Sample         string             `json:"sample,omitempty"`
	history        *history
}

// history is what the loss curves are drawn from; a checkpoint carries it,
// so a resumed run's plot starts at step 1.
type history struct {
	Train    []train.Point `json:"train"`
	Val      []train.Point `json:"val"`                // validation or test loss
	Accuracy []train.Point `json:"accuracy,omitempty"` // test accuracy, by epoch
}

// runTraining trains task for o.steps optimizer steps and returns the
// summary. stop ends the run at the next step boundary.
func runTraining(task trainTask, dev device.Device, o *trainOptions, p *progress, stop <-chan struct{}) (*trainSummary, error) {
	sum := &trainSummary{Device: dev.Name(), Mode: o.mode, Model: task.describe(), Steps: 0}
	if o.policy != "" {
		sum.Mode = "policy"
	}
	model := task.model()
	for _, prm := range model.Parameters() {
		sum.ParameterCount += int64(prm.Numel())
	}

	// Optimizer.
	var opt optim.Stateful
	switch o.optimizer {
	case "sgd":
		s := optim.NewSGD(model.Parameters(), float32(o.lr))
		s.Momentum, s.WeightDecay = float32(o.momentum), float32(o.weightDecay)
		opt = s
	default:
		a := optim.NewAdamW(model.Parameters(), float32(o.lr))
		a.Beta2, a.WeightDecay = 0.95, float32(o.weightDecay)
		opt = a
	}
	defer opt.(interface{ Release() }).Release()
	warmup := o.warmup
	if warmup < 0 {
		warmup = o.steps / 10
	}
	sched := train.Cosine{Peak: o.lr, Min: o.minLR, Warmup: warmup, Total: o.steps}
	if err := sched.Validate(); err != nil {
		return nil, err
	}

	// Memory mode.
	var hooks *ferry.SavedTensorHooks
	var segments *ferry.SegmentHooks // a policy's recomputed blocks
	inBackward := false              // a policy's optimizer inside backward
	var off *offload.Offloader
	switch o.mode {
	case demo.SaveOnHost:
		hooks = offload.NewHostSaver(dev).Hooks()
	case demo.Offload, demo.OffloadDisk, demo.RecomputeOffload:
		cfg := offload.DefaultConfig()
		cfg.DiskDir = o.diskDir
		if o.mode == demo.OffloadDisk {
			if cfg.DiskDir == "" {
				cfg.DiskDir = os.TempDir()
			}
			cfg.HostLimit = -1
		}
		if o.policy != "" {
			pol, err := loadTrainPolicy(task, o)
			if err != nil {
				return nil, err
			}
			cfg.Policy = pol.Place
			segments = pol.SegmentHooks()
			inBackward = pol.OptimizerInBackward
		}
		var err error
		if off, err = offload.New(dev, cfg); err != nil {
			return nil, err
		}
		defer off.Close()
		hooks = off.Hooks()
	}
	recompute := o.mode == demo.Recompute || o.mode == demo.RecomputeOffload

	// Checkpoints and resume. A checkpoint resumes only a run of the same
	// model, data and optimizer.
	identity := task.identity()
	identity["optimizer"] = o.optimizer
	var ckpt *train.Checkpointer
	hist := &history{}
	first := 1
	if o.checkpointDir != "" {
		ckpt = &train.Checkpointer{Dir: o.checkpointDir, Keep: o.keep}
		if o.resume {
			meta, path, err := ckpt.Resume(model, opt, identity)
			if err != nil {
				return nil, err
			}
			if meta != nil {
				first = meta.Step + 1
				sum.ResumedFrom = meta.Step
				if len(meta.Extra) > 0 {
					if err := json.Unmarshal(meta.Extra, hist); err != nil {
						return nil, fmt.Errorf("checkpoint %s: its history: %w", path, err)
					}
				}
				p.line("resumed from %s (step %d of %d)", path, meta.Step, o.steps)
			} else {
				p.line("no checkpoint in %s yet; starting at step 1", o.checkpointDir)
			}
		} else if latest, err := ckpt.Latest(); err != nil || latest != "" {
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("--checkpoint-dir %s already holds checkpoints (latest %s); give --resume to continue that run, "+
				"or another directory to start afresh (nothing was changed)", o.checkpointDir, filepath.Base(latest))
		}
	}
	if first > o.steps {
		return nil, fmt.Errorf("the checkpoint is at step %d, and this run has --steps %d: nothing left to train (give more --steps)", first-1, o.steps)
	}

	if o.plotDir != "" { // fail now, not after the run
		if err := os.MkdirAll(o.plotDir, 0o755); err != nil {
			return nil, fmt.Errorf("--plot: %w", err)
		}
	}

	// Logging.
	logEvery := o.logEvery
	if logEvery == 0 {
		logEvery = max(1, o.steps/50)
	}
	evalEvery := o.evalEvery
	var logFile *os.File
	var logW *bufio.Writer
	if o.logPath != "" {
		flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
		if first > 1 {
			flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND // a resumed run continues its log
		}
		f, err := os.OpenFile(o.logPath, flags, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--log: %w", err)
		}
		logFile, logW = f, bufio.NewWriter(f)
		defer logFile.Close()
	}
	writeLog := func(rec map[string]any) error {
		if logW == nil {
			return nil
		}
		b, err := json.Marshal(jsonSafe(rec))
		if err != nil {
			return err
		}
		logW.Write(append(b, '\n'))
		if err := logW.Flush(); err != nil {
			return fmt.Errorf("--log %s: %w", o.logPath, err)
		}
		return nil
	}

	saveCheckpoint := func(step int) error {
		if ckpt == nil {
			return nil
		}
		extra, _ := json.Marshal(hist)
		path, err := ckpt.Save(model, opt, train.Meta{Step: step, Seed: o.seed, Identity: identity, Extra: extra,
			DataPosition: map[string]any{"step": step, "note": "batches are drawn from generators keyed by (seed, step)"}})
		if err != nil {
			return err
		}
		sum.Checkpoint = path
		return nil
	}

	best := map[string]float64{}
	evaluate := func(step int) (map[string]float64, error) {
		task.setTraining(false)
		defer task.setTraining(true)
		m, err := task.evaluate()
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			b, seen := best[k]
			higher := strings.Contains(k, "accuracy")
			if !seen || (higher && v > b) || (!higher && v < b) {
				best[k] = v
			}
		}
		if v, ok := m["val_loss"]; ok {
			hist.Val = append(hist.Val, train.Point{Step: step, Value: v})
		}
		if v, ok := m["test_loss"]; ok {
			hist.Val = append(hist.Val, train.Point{Step: step, Value: v})
		}
		if v, ok := m["test_accuracy"]; ok && o.evalEvery > 0 {
			hist.Accuracy = append(hist.Accuracy, train.Point{Step: step / o.evalEvery, Value: v})
		}
		return m, nil
	}

	alloc := dev.Allocator()
	alloc.ResetPeak()
	var rec *trace.Recorder
	recordStep := -1
	if o.plotDir != "" {
		recordStep = min(first+1, o.steps) // a warm step, not the first
	}
	start := time.Now()
	var stepTimes []float64
	var items int64
	smoothed := math.NaN()
	var metrics map[string]float64
	if first == 1 {
		m, err := evaluate(0)
		if err != nil {
			return nil, err
		}
		metrics = m
		p.line("step %d: %s", 0, formatMetrics(m))
		if err := writeLog(map[string]any{"step": 0, "eval": m}); err != nil {
			return nil, err
		}
	}
	p.phase("train", o.steps, first-1)
	step := first
	for ; step <= o.steps; step++ {
		select {
		case <-stop:
			sum.Interrupted = true
		default:
		}
		if sum.Interrupted {
			break
		}
		if o.stopAfter > 0 && step >= first+o.stopAfter {
			sum.Stopped = true
			break
		}
		lr := sched.At(step)
		switch a := opt.(type) {
		case *optim.SGD:
			a.LR = float32(lr)
		case *optim.AdamW:
			a.LR = float32(lr)
		}
		var stopRec func()
		if step == recordStep {
			rec = trace.New(nil)
			stopRec = rec.Allocator(dev.Name(), alloc)
		}
		t0 := time.Now()
		var loss float64
		for micro := 0; micro < o.accum; micro++ {
			task.setStep(uint64((step-1)*o.accum + micro + 1))
			x, y, n := task.batch(step, micro)
			items += int64(n)
			err := ferry.Step(func(tape *ferry.Tape) error {
				if segments != nil {
					tape.SetSegmentHooks(segments)
				}
				xin := tape.Input(x)
				var out *ferry.Tensor
				fwd := func() { out = task.forward(tape, xin, recompute) }
				if hooks != nil {
					tape.WithHooks(hooks, fwd)
				} else {
					fwd()
				}
				l := task.loss(out, tape.Input(y))
				out.Release()
				loss += float64(l.Item()) / float64(o.accum)
				if o.accum > 1 {
					l = ferry.Scale(l, 1/float32(o.accum))
				}
				if inBackward {
					opts, e := optim.InBackward(opt.(optim.Stepper))
					if err := l.BackwardWith(opts); err != nil {
						return err
					}
					return e.Err()
				}
				return l.Backward()
			})
			x.Release()
			y.Release()
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return nil, fmt.Errorf("step %d: the loss is %v; lower --lr or set --clip", step, loss)
		}
		if o.clip > 0 {
			if _, err := optim.ClipGradNorm(model.Parameters(), o.clip); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
		}
		if !inBackward {
			if err := opt.Step(); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
			opt.ZeroGrad()
		}
		if stopRec != nil {
			stopRec()
		}
		stepTimes = append(stepTimes, time.Since(t0).Seconds())
		sum.Steps = step
		sum.FinalTrainLoss = loss
		if math.IsNaN(smoothed) {
			smoothed = loss
		} else {
			smoothed = 0.9*smoothed + 0.1*loss
		}
		hist.Train = append(hist.Train, train.Point{Step: step, Value: loss})
		elapsed := time.Since(start).Seconds()
		rate := float64(items) / elapsed
		p.update(step, fmt.Sprintf("loss %.4f | %s %s/s | %s", smoothed, siCount(rate), o.unit, device.FormatBytes(alloc.Allocated())))
		var evalNow map[string]float64
		if step%evalEvery == 0 || step == o.steps {
			m, err := evaluate(step)
			if err != nil {
				return nil, err
			}
			metrics, evalNow = m, m
			p.line("step %d: train loss %.4f, %s", step, smoothed, formatMetrics(m))
		}
		if step%logEvery == 0 || evalNow != nil || step == o.steps {
			p.plain("step %d/%d  loss %.4f  lr %.3g  %s %s/s  %s", step, o.steps, smoothed, lr, siCount(rate), o.unit, device.FormatBytes(alloc.Allocated()))
			rec := map[string]any{"step": step, "loss": loss, "smoothed_loss": smoothed, "lr": lr,
				o.unit + "_per_second": rate, "elapsed_seconds": elapsed, "device_bytes": alloc.Allocated()}
			if evalNow != nil {
				rec["eval"] = evalNow
			}
			if err := writeLog(rec); err != nil {
				return nil, err
			}
		}
		every := o.checkpointEvery
		if every == 0 {
			every = evalEvery
		}
		if ckpt != nil && (step%every == 0 || step == o.steps) {
			if err := saveCheckpoint(step); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
		}
	}
	p.done()
	if (sum.Interrupted || sum.Stopped) && ckpt != nil && sum.Steps >= first && sum.Checkpoint != ckpt.PathFor(sum.Steps) {
		if err := saveCheckpoint(sum.Steps); err != nil {
			return nil, fmt.Errorf("writing the final checkpoint: %w", err)
		}
	}
	sum.WallSeconds = time.Since(start).Seconds()
	sum.StepSeconds = demo.Median(stepTimes)
	if sum.WallSeconds > 0 {
		sum.ItemsPerSecond = float64(items) / sum.WallSeconds
	}
	sum.Metrics = map[string]float64{}
	for k, v := range metrics {
		sum.Metrics[k] = v
	}
	for k, v := range best {
		sum.Metrics["best_"+k] = v
	}
	sum.history = hist
	st := alloc.Stats()
	sum.PeakBytes = map[string]int64{}
	for c := device.Category(0); c < device.NumCategories; c++ {
		sum.PeakBytes[c.String()] = st.ByCategory[c].Peak
	}
	sum.PeakTotalBytes = st.AllocatedBytes.Peak
	if off != nil {
		s := off.Stats()
		sum.Offload = &s
	}
	if o.plotDir != "" {
		files, err := writePlots(o.plotDir, task.title(), hist, rec, dev.Name())
		if err != nil {
			return nil, err
		}
		sum.Plots = files
	}
	return sum, nil
}

// loadTrainPolicy reads a policy file and checks it against the task's
// model, recorded on the meta device: every name, slot and shape must be
// the model's, and disk placements need --disk-dir.
func loadTrainPolicy(task trainTask, o *trainOptions) (*offload.Policy, error) {
	pm, ok := task.(interface{ planModel() plan.Model })
	if !ok {
		return nil, fmt.Errorf("--policy: ferry plan writes policies for the GPT (train text); this model has none")
	}
	pol, err := offload.LoadPolicy(o.policy)
	if err != nil {
		return nil, err
	}
	info, err := plan.Record(pm.planModel())
	if err != nil {
		return nil, fmt.Errorf("--policy %s: recording the model on meta: %w", o.policy, err)
	}
	if err := pol.Validate(info, o.diskDir != "" || o.mode == demo.OffloadDisk); err != nil {
		return nil, fmt.Errorf("--policy %s: %w", o.policy, err)
	}
	if pol.OptimizerInBackward && (o.clip > 0 || o.accum > 1) {
		return nil, fmt.Errorf("--policy %s updates each parameter inside backward, which leaves no moment for --clip or --accum; "+
			"drop those flags, or plan for a larger budget", o.policy)
	}
	return pol, nil
}

func formatMetrics(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v := m[k]
		if strings.Contains(k, "accuracy") {
			parts = append(parts, fmt.Sprintf("%s %.2f%%", strings.ReplaceAll(k, "_", " "), 100*v))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.4f", strings.ReplaceAll(k, "_", " "), v))
		}
	}
	return strings.Join(parts, ", ")
}

// siCount writes a rate as 12.3k or 4.56M.
func siCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// summaryJSON flattens the summary and the task's metrics into one object.
func summaryJSON(s *trainSummary, unit string) map[string]any {
	b, _ := json.Marshal(s)
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, v := range s.Metrics {
		m[k] = v
	}
	m[unit+"_per_second"] = s.ItemsPerSecond
	return m
}

// printSummary writes the human summary.
func printSummary(w io.Writer, s *trainSummary, unit string) {
	state := "done"
	if s.Interrupted {
		state = "interrupted"
	} else if s.Stopped {
		state = "stopped (--stop-after)"
	}
	fmt.Fprintf(w, "\n%s: %d steps in %.1f s (median step %.1f ms, %s %s/s) on %s, mode %s\n",
		state, s.Steps, s.WallSeconds, 1e3*s.StepSeconds, siCount(s.ItemsPerSecond), unit, s.Device, s.Mode)
	if len(s.Metrics) > 0 {
		fmt.Fprintf(w, "  last step's train loss %.4f; %s\n", s.FinalTrainLoss, formatMetrics(s.Metrics))
	}
	fmt.Fprintf(w, "  peak device memory %s", device.FormatBytes(s.PeakTotalBytes))
	sep := ":"
	keys := make([]string, 0, len(s.PeakBytes))
	for k := range s.PeakBytes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s.PeakBytes[k] > 0 {
			fmt.Fprintf(w, "%s %s %s", sep, k, device.FormatBytes(s.PeakBytes[k]))
			sep = ","
		}
	}
	fmt.Fprintln(w)
	if s.Offload != nil {
		fmt.Fprintf(w, "  offloaded %s to host, %s to disk; stalled %.3f s\n",
			device.FormatBytes(s.Offload.BytesToHost), device.FormatBytes(s.Offload.BytesToDisk), s.Offload.StallSeconds)
	}
	if s.Checkpoint != "" {
		fmt.Fprintf(w, "  checkpoint: %s\n", s.Checkpoint)
	}
	for _, f := range s.Plots {
		fmt.Fprintf(w, "  plot: %s\n", f)
	}
}

// finishTraining prints the summary and turns an interruption into the
// one-line error that makes ferry exit 130.
func finishTraining(out io.Writer, asJSON bool, s *trainSummary, unit string) error {
	if asJSON {
		if err := writeJSON(out, summaryJSON(s, unit)); err != nil {
			return err
		}
	} else {
		printSummary(out, s, unit)
	}
	if s.Interrupted {
		msg := fmt.Sprintf("stopped after step %d", s.Steps)
		if s.Checkpoint != "" {
			msg += fmt.Sprintf("; resume with --resume (checkpoint %s)", s.Checkpoint)
		}
		err := fmt.Errorf("%w: %s", demo.ErrInterrupted, msg) // run() exits 130 on it
		if asJSON {
			return quietError{err}
		}
		return err
	}
	return nil
}

// initialVal is the validation loss before the first step, when this run
// (or the one it resumed) measured it.
func (s *trainSummary) initialVal() (float64, bool) {
	if s.history != nil && len(s.history.Val) > 0 && s.history.Val[0].Step == 0 {
		return s.history.Val[0].Value, true
	}
	return 0, false
}

// preflight refuses a run whose least memory cannot fit, before anything
// large is allocated: parameters with their gradients and optimizer state
// (stateCopies per parameter: 1 for SGD with momentum, 2 for AdamW) plus
// minStepBytes of activations on the device, and hostBytes of batch data on
// the Go heap. The estimates are lower bounds, so a refused run could not
// have run; the device's own limit still catches the rest, with an error.
func preflight(dev device.Device, params int64, stateCopies int, minStepBytes, hostBytes int64, advice string) error {
	need := params*4*int64(2+stateCopies) + minStepBytes
	if c := dev.Allocator().Stats().Capacity; c > 0 && need > c {
		return fmt.Errorf("this run needs at least %s on %s (%d parameters with gradients and optimizer state: %s; activations: %s), "+
			"and the device holds %s: %s",
			device.FormatBytes(need), dev.Name(), params, device.FormatBytes(params*4*int64(2+stateCopies)),
			device.FormatBytes(minStepBytes), device.FormatBytes(c), advice)
	}
	if avail := cpu.AvailableMemory(); avail > 0 && hostBytes > avail/4 {
		return fmt.Errorf("one batch needs %s of host memory, and the machine has %s free: %s",
			device.FormatBytes(hostBytes), device.FormatBytes(avail), advice)
	}
	return nil
}

func stateCopies(optimizer string) int {
	if optimizer == "sgd" {
		return 1
	}
	return 2
}
