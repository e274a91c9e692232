package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/internal/fsx"
	"ferry/offload"
	"ferry/plan"
)

func init() {
	register(command{name: "demo", summary: "train the origin model once per offload mode; show memory and time", setup: setupDemo})
}

func setupDemo(fs *flag.FlagSet) func(io.Writer, bool) error {
	dev := fs.String("device", "cpu", "device to train on: cpu, cuda, cuda:N, meta")
	sizes := defineSizeFlags(fs, demo.Origin, nil, nil)
	modes := fs.String("modes", "", "comma-separated modes: "+strings.Join(demo.AllModes, ", ")+" (default: all the model can run; naive only for mlp's hand-written loop)")
	steps := fs.Int("steps", 5, "timed steps per mode, after one warm-up step; the median is reported")
	seed := fs.Uint64("seed", 1, "seed for parameters and data")
	diskDir := fs.String("disk-dir", "", "directory for offload-disk's files (default: the system's temporary directory)")
	var capacity byteSize
	fs.Var(&capacity, "capacity", "cap the device's memory (e.g. 3GiB) to see out-of-memory behaviour")
	poison := fs.Bool("poison", false, "fill freed device memory with NaN (catches use after free)")
	keepLast := fs.Int("keep-last", -1, "offloader: saved storages kept on the device at the end of forward (default 1)")
	inFlight := fs.Int("max-in-flight", -1, "offloader: copies off the device in flight at once (default: the policy's copies_in_flight, else 2)")
	lookahead := fs.Int("lookahead", -1, "offloader: tensors prefetched ahead during backward, and streamed parameters' uses (default: the policy's lookahead, else 2)")
	var minBytes byteSize = -1
	fs.Var(&minBytes, "min-bytes", "offloader: tensors smaller than this stay on the device (default 1KiB)")
	params := fs.String("device-param", "", "driver parameters, key=value[,key=value] (cpu: copy_delay=1ms)")
	policy := fs.String("policy", "", "policy file written by `ferry plan`: runs mode policy (with none unless --modes says otherwise), which applies its placements, recompute included")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	traceDir := fs.String("trace", "", "write each mode's last step as a Chrome trace and an SVG memory chart into this directory")
	inBackward := fs.Bool("optimizer-in-backward", false, "update each parameter inside backward and free its gradient at once")
	optState := fs.String("optimizer-state", "device", "where the optimizer keeps its state and steps, in every mode: device, or host (default: the policy's, else device)")
	optimizer := defineOptimizerFlag(fs, "")
	state := defineStateFlags(fs)
	precision := fs.String("precision", "fp32", precisionUsage)
	profile := fs.String("profile", "", "meta device only: hardware profile for predicted times ("+strings.Join(plan.Profiles(), ", ")+" or a JSON file)")
	return func(out io.Writer, asJSON bool) (err error) {
		set := setFlags(fs)
		if *cpuProfile != "" {
			if err := checkOutputFile("--cpuprofile", *cpuProfile, false); err != nil {
				return err
			}
		}
		if *traceDir != "" {
			if err := checkOutputDir("--trace", *traceDir, false); err != nil {
				return err
			}
		}
		if *diskDir != "" {
			if err := checkOutputDir("--disk-dir", *diskDir, true); err != nil {
				return err
			}
		}
		// A run that fails leaves no empty trace directory.
		var left leftovers
		left.note(*traceDir)
		defer left.clean(&err)
		if err := positive(set, map[string]int{"steps": *steps, "max-in-flight": *inFlight, "lookahead": *lookahead}); err != nil {
			return err
		}
		if set["keep-last"] && *keepLast < 0 {
			return fmt.Errorf("--keep-last must be 0 or more, got %d", *keepLast)
		}
		if *steps > maxDemoSteps {
			return fmt.Errorf("--steps %d: at most %d timed steps per mode (their median is reported; a few suffice)", *steps, maxDemoSteps)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"keep-last", *keepLast}, {"max-in-flight", *inFlight}, {"lookahead", *lookahead}} {
			if f.v > maxOffloadCount {
				return fmt.Errorf("--%s %d: at most %d", f.name, f.v, maxOffloadCount)
			}
		}
		if set["capacity"] && capacity == 0 {
			return fmt.Errorf("--capacity 0 would be no cap at all: give a positive size (3GiB), or leave the flag out")
		}
		if *poison {
			if kind, _, _ := device.ParseName(*dev); kind == "meta" {
				return fmt.Errorf("--poison fills freed memory with NaN, and the meta device holds none: drop --poison, or use --device cpu")
			}
		}
		cfg := demo.DefaultConfig(*dev)
		prec, err := parsePrecision(*precision)
		if err != nil {
			return err
		}
		cfg.Precision = prec
		f, err := sizes.family()
		if err != nil {
			return err
		}
		if cfg.Sizes, err = sizes.sizes(f, *dev); err != nil {
			return err
		}
		var pol *offload.Policy
		if *policy != "" {
			if pol, err = offload.LoadPolicy(*policy); err != nil {
				return err
			}
			if pol.Ranks > 1 {
				// The demo runs one process's step; a rank's differs (its
				// share of the state, its collectives).
				return fmt.Errorf("--policy %s plans one rank of %d at ZeRO-%d (ferry plan --ranks %d): ferry demo runs one process, "+
					"whose step is another; ferry plan's prediction is the rank's replay on the meta device, and "+
					"mpirun -np %d ferry train … --zero %d --policy %s runs it", *policy, pol.Ranks, pol.Zero, pol.Ranks, pol.Ranks, pol.Zero, *policy)
			}
			sizes.modelSet = set["model"]
			if f, cfg.Sizes, err = sizes.fromPolicy(pol, *policy, f, cfg.Sizes); err != nil {
				return err
			}
		}
		cfg.Family, cfg.Steps, cfg.Seed, cfg.DiskDir = f, *steps, *seed, *diskDir
		if *optimizer != "" {
			if err := checkOptimizer(*optimizer); err != nil {
				return err
			}
		}
		cfg.Optimizer = *optimizer
		if pol != nil && pol.Optimizer != "" {
			if set["optimizer"] && *optimizer != pol.Optimizer {
				return fmt.Errorf("--policy %s was planned with --optimizer %s; drop --optimizer %s, or plan again with it", *policy, pol.Optimizer, *optimizer)
			}
			if err := checkOptimizer(pol.Optimizer); err != nil {
				return fmt.Errorf("--policy %s: %w", *policy, err)
			}
			cfg.Optimizer = pol.Optimizer
		}
		if set["modes"] {
			cfg.Modes = strings.Split(*modes, ",")
		}
		cfg.DeviceOptions = device.Options{Capacity: int64(capacity), PoisonFreed: *poison, Params: map[string]string{}}
		if *params != "" {
			for _, kv := range strings.Split(*params, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--device-param %q: want key=value", kv)
				}
				if k == "copy_delay" {
					// A test's slow copy: a delay past a minute holds a
					// step (and so a signal) that long for each copy.
					if d, err := time.ParseDuration(v); err == nil && (d < 0 || d > time.Minute) {
						return fmt.Errorf("--device-param copy_delay=%s: want a delay in [0, 1m]", v)
					}
				}
				cfg.DeviceOptions.Params[k] = v
			}
		}
		var chosen []string // nil: the default modes, each mode the model can run
		if set["modes"] {
			chosen = cfg.Modes
		}
		if err := demoFlagsApply(set, chosen, *policy != ""); err != nil {
			return err
		}
		if set["keep-last"] {
			cfg.Offload.KeepLast = *keepLast
		}
		if set["max-in-flight"] {
			cfg.Offload.MaxInFlight = *inFlight
		} else if pol != nil {
			cfg.Offload.MaxInFlight = pol.InFlight(cfg.Offload.MaxInFlight) // what the plan assumed
		}
		if set["lookahead"] {
			cfg.Offload.Lookahead = *lookahead
		} else if pol != nil {
			cfg.Offload.Lookahead = pol.Ahead(cfg.Offload.Lookahead) // what the plan assumed
		}
		if set["min-bytes"] {
			cfg.Offload.MinBytes = int64(minBytes)
		}
		cfg.OptimizerInBackward = *inBackward
		if *optState != "device" && *optState != "host" {
			return fmt.Errorf("--optimizer-state %q: want device or host", *optState)
		}
		cfg.OptimizerState = *optState
		if cfg.GradsOnHost, cfg.ParamsOnHost, err = state.resolve(set, nil, "", *optState); err != nil && pol == nil {
			return err
		}
		cfg.TraceDir = *traceDir
		if p := pol; p != nil {
			if !set["modes"] {
				cfg.Modes = []string{demo.None, demo.Policy}
			} else if !slices.Contains(cfg.Modes, demo.Policy) {
				return fmt.Errorf("--policy is applied by mode policy, and --modes %s has none: add policy to --modes, or drop --policy", *modes)
			}
			if cfg.Precision, err = policyPrecision(*policy, p, set["precision"], *precision, cfg.Precision); err != nil {
				return err
			}
			// The policy is checked against the model's saves, recorded on
			// the meta device; disk placements need a disk tier.
			info, err := plan.Record(demo.PlanModel(cfg))
			if err != nil {
				return err
			}
			haveDisk := *diskDir != "" || slices.Contains(cfg.Modes, demo.OffloadDisk) && !slices.Contains(cfg.Modes, demo.Policy)
			if err := p.Validate(info, haveDisk); err != nil {
				return fmt.Errorf("--policy %s: %w", *policy, err)
			}
			cfg.Policy = p.Place
			cfg.Segments = p.SegmentHooks()
			cfg.OptimizerInBackward = cfg.OptimizerInBackward || p.OptimizerInBackward
			s := policyStateOn(p) // none recorded: the device, which a flag of host contradicts too
			if set["optimizer-state"] && *optState != s {
				return fmt.Errorf("--policy %s was planned with the optimizer state on the %s; drop --optimizer-state %s, or plan again with it", *policy, s, *optState)
			}
			cfg.OptimizerState = s
			if cfg.GradsOnHost, cfg.ParamsOnHost, err = state.resolve(set, p, *policy, cfg.OptimizerState); err != nil {
				return err
			}
			cfg.SerialGradCopies, cfg.StateOnDevice, cfg.StateVisiting = p.SerialGradCopies, p.OptimizerStateOnDevice, p.OptimizerStateVisiting
			cfg.StateAhead = p.OptimizerStateAhead
			if err := checkHostPeak(p, *policy, *dev); err != nil {
				return err
			}
		}
		if *profile != "" {
			if kind, _, _ := device.ParseName(*dev); kind != "meta" {
				return fmt.Errorf("--profile predicts times on the meta device; use --device meta")
			}
			prof, err := plan.LoadProfile(*profile)
			if err != nil {
				return err
			}
			cfg.Open = func(string, device.Options) (device.Device, error) { return meta.New(cfg.DeviceOptions, prof), nil }
		}
		if *cpuProfile != "" {
			// Profiled into memory and written whole at the end of a run
			// that succeeded, so that a write that fails is an error
			// (pprof drops its writer's errors), and neither a failed
			// write nor a failed run leaves a file.
			var prof bytes.Buffer
			if err := pprof.StartCPUProfile(&prof); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer func() {
				pprof.StopCPUProfile()
				if err != nil {
					return
				}
				werr := fsx.WriteAtomic(*cpuProfile, func(w io.Writer) error { _, err := w.Write(prof.Bytes()); return err })
				if werr != nil {
					err = fmt.Errorf("--cpuprofile: %w", werr)
				}
			}()
		}
		if err := fitsThisMachine(cfg); err != nil {
			return err
		}
		// Ctrl-C or SIGTERM: finish at the next step boundary, report the
		// modes that finished, and let every deferred cleanup run; a step
		// held up (--device-param copy_delay) does not hold the signal
		// past demoGrace: the demo saves nothing, and the offloader's
		// files are unlinked as they are made.
		stop, release := interruptions(demoGrace)
		defer release()
		cfg.Stop = stop
		res, err := demo.Execute(cfg)
		if res != nil && strings.HasPrefix(*dev, "cpu") {
			res.MatmulBackend = cpu.MatmulBackend()
		}
		if res != nil && len(res.Runs) > 0 {
			// What finished is printed even when a later mode failed or the
			// run was interrupted; the error then follows on stderr.
			if asJSON {
				if werr := writeJSON(out, struct {
					*demo.Result
					Error string `json:"error,omitempty"`
				}{res, errString(err)}); werr != nil && err == nil {
					err = werr
				}
				if err != nil {
					return quietError{err}
				}
			} else {
				printDemo(out, res)
			}
		}
		return err
	}
}

// maxDemoSteps bounds demo --steps, and maxOffloadCount the offloader's
// counts (--keep-last, --max-in-flight, --lookahead): past them a value
// means nothing more, only a run that does not end.
const (
	demoGrace       = 3 * time.Second
	maxDemoSteps    = 1000
	maxOffloadCount = 1 << 16
)

// offloaderModes are the demo's modes that run the offloader, which the
// offloader's flags tune.
var offloaderModes = []string{demo.Offload, demo.OffloadDisk, demo.RecomputeOffload, demo.Policy}

// demoFlagsApply refuses a flag that none of the chosen modes uses (set:
// the flags given; modes: --modes, nil for the default, which runs every
// mode the model can): the offloader's flags without an offloading mode,
// --disk-dir without offload-disk or a policy.
func demoFlagsApply(set map[string]bool, modes []string, policy bool) error {
	if modes == nil {
		return nil
	}
	has := func(ms ...string) bool {
		for _, m := range ms {
			if slices.Contains(modes, m) {
				return true
			}
		}
		return false
	}
	if !has(offloaderModes...) {
		for _, f := range []string{"keep-last", "max-in-flight", "lookahead", "min-bytes"} {
			if set[f] {
				return fmt.Errorf("--%s tunes the offloader, and --modes %s runs none: add %s to --modes, or drop --%s",
					f, strings.Join(modes, ","), strings.Join(offloaderModes, ", "), f)
			}
		}
	}
	if set["disk-dir"] && !has(demo.OffloadDisk) && !(policy && has(demo.Policy)) {
		return fmt.Errorf("--disk-dir is for offload-disk (or a policy's disk placements), and --modes %s runs neither: drop --disk-dir, or add offload-disk", strings.Join(modes, ","))
	}
	return nil
}

func printDemo(w io.Writer, r *demo.Result) {
	prec := ""
	if r.Precision == "bf16" {
		prec = ", bf16 mixed precision"
	}
	fmt.Fprintf(w, "ferry demo: %s%s, on %s\n", r.Description, prec, r.Device)
	if r.MatmulBackend != "" {
		fmt.Fprintf(w, "matrix products: %s\n", r.MatmulBackend)
	}
	fmt.Fprintf(w, "one activation = %s, parameters = %s; %d timed step(s) after a warm-up, median shown\n",
		mib(r.ActivationBytes), mib(r.ParameterBytes), r.Steps)
	var noneTime float64
	clock := ""
	for _, run := range r.Runs {
		if run.Mode == demo.None && run.Clock != "none" {
			noneTime = run.StepSeconds
		}
		clock = run.Clock
	}
	// seconds prints a time, or "-" where the device keeps none.
	seconds := func(run demo.Run, format string, v float64) string {
		if run.Clock == "none" {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	switch clock {
	case "none":
		fmt.Fprintf(w, "(%s keeps no time and computes no values: times and losses are not shown; give it a profile with --profile to predict times)\n", r.Device)
	case "predicted":
		fmt.Fprintf(w, "(times are the %s device's predictions from its profile, not measurements)\n", r.Device)
	}
	for _, run := range r.Runs {
		fmt.Fprintf(w, "\nTesting with %s:\n", run.Mode)
		fmt.Fprintf(w, "Memory allocated before forward pass: %s\n", mib(run.BeforeForwardBytes))
		fmt.Fprintf(w, "Memory allocated after forward pass: %s\n", mib(run.AfterForwardBytes))
		fmt.Fprintf(w, "Max memory allocated during forward pass: %s\n", mib(run.PeakForwardBytes))
		eq := "n/a (no values on this device)"
		if run.GradsEqualNone != nil {
			eq = map[bool]string{true: "yes (bitwise)", false: "NO"}[*run.GradsEqualNone]
		}
		loss := fmt.Sprintf("%.6g", run.Loss)
		if run.GradsEqualNone == nil {
			loss = "n/a"
		}
		fmt.Fprintf(w, "  max during the whole step %s · step %s s · loss %s · gradients equal none's: %s\n",
			mib(run.PeakStepBytes), seconds(run, "%.3f", run.StepSeconds), loss, eq)
		fmt.Fprintf(w, "  moved %s to host, %s to disk per step · compute waited %s s · prefetched in time %s",
			mib(run.ToHostBytes), mib(run.ToDiskBytes), seconds(run, "%.4f", run.StallSeconds), seconds(run, "%.0f%%", 100*run.OverlapRatio))
		if run.PeakRSSBytes > 0 {
			fmt.Fprintf(w, " · peak RSS %s", mib(run.PeakRSSBytes))
		}
		fmt.Fprintln(w)
		if run.Mode == demo.Naive {
			fmt.Fprintf(w, "  %s\n", demo.NaiveExplanation)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tkept by forward\tforward peak\tstep peak\tstep s\t× none\tmoved/step\tstall s\tpeak RSS\t")
	act := float64(r.ActivationBytes)
	for _, run := range r.Runs {
		ratio := "-"
		if noneTime > 0 {
			ratio = fmt.Sprintf("%.2f", run.StepSeconds/noneTime)
		}
		rssStr := "-"
		if run.PeakRSSBytes > 0 {
			rssStr = mib(run.PeakRSSBytes)
		}
		fmt.Fprintf(tw, "%s\t%.1f act\t+%.1f act\t%s\t%s\t%s\t%s\t%s\t%s\t\n", run.Mode,
			float64(run.AfterForwardBytes-run.BeforeForwardBytes)/act,
			float64(run.PeakForwardBytes-run.BeforeForwardBytes)/act,
			mib(run.PeakStepBytes), seconds(run, "%.3f", run.StepSeconds), ratio, mib(run.OffloadedBytes), seconds(run, "%.4f", run.StallSeconds), rssStr)
	}
	tw.Flush()
	fmt.Fprintln(w, "(act = one activation; kept by forward = after − before; forward peak = peak − before)")
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// fitsThisMachine runs one step of cfg on the meta device, which allocates
// exactly as the CPU does, and refuses a CPU run whose peak (device and
// host memory together) exceeds what the machine has free: better a clear
// error now than the kernel's out-of-memory killer minutes later.
func fitsThisMachine(cfg demo.Config) error {
	kind, _, _ := device.ParseName(cfg.Device)
	if kind != "cpu" || cfg.DeviceOptions.Capacity > 0 {
		return nil
	}
	avail := cpu.AvailableMemory()
	if avail == 0 {
		return nil
	}
	probe := cfg
	probe.Steps, probe.TraceDir, probe.Stop = 1, "", nil
	probe.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, nil), nil }
	res, err := demo.Execute(probe)
	if err != nil {
		return nil // the real run reports it
	}
	var worst demo.Run
	for _, r := range res.Runs {
		if r.PeakStepBytes+r.HostPeakBytes > worst.PeakStepBytes+worst.HostPeakBytes {
			worst = r
		}
	}
	if need := worst.PeakStepBytes + worst.HostPeakBytes; need > avail/10*9 {
		return fmt.Errorf("this configuration needs %s at its peak (mode %s: %s on the device, %s on the host) but the machine has %s free; "+
			"lower the model's sizes (%s), or see its memory without computing with --device meta",
			device.FormatBytes(need), worst.Mode, device.FormatBytes(worst.PeakStepBytes), device.FormatBytes(worst.HostPeakBytes), device.FormatBytes(avail),
			sizeList(cfg.Family))
	}
	return nil
}
