package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/internal/demo"
	"ferry/offload"
	"ferry/plan"
)

func init() {
	register(command{name: "demo", summary: "train the origin model once per offload mode; show memory and time", setup: setupDemo})
}

func setupDemo(fs *flag.FlagSet) func(io.Writer, bool) error {
	dev := fs.String("device", "cpu", "device to train on: cpu, cuda, cuda:N, meta")
	layers := fs.Int("layers", 40, "number of Linear+ReLU layers")
	width := fs.Int("width", 0, "layer width (default 1024 on cpu, 4096 elsewhere)")
	batch := fs.Int("batch", 0, "batch size (default 256 on cpu, 1024 elsewhere)")
	modes := fs.String("modes", strings.Join(demo.AllModes, ","), "comma-separated modes: "+strings.Join(demo.AllModes, ", "))
	steps := fs.Int("steps", 5, "timed steps per mode, after one warm-up step; the median is reported")
	seed := fs.Uint64("seed", 1, "seed for parameters and data")
	diskDir := fs.String("disk-dir", "", "directory for offload-disk's files (default: the system's temporary directory)")
	var capacity byteSize
	fs.Var(&capacity, "capacity", "cap the device's memory (e.g. 3GiB) to see out-of-memory behaviour")
	poison := fs.Bool("poison", false, "fill freed device memory with NaN (catches use after free)")
	keepLast := fs.Int("keep-last", -1, "offloader: saved storages kept on the device at the end of forward (default 1)")
	inFlight := fs.Int("max-in-flight", -1, "offloader: copies off the device in flight at once (default 2)")
	lookahead := fs.Int("lookahead", -1, "offloader: tensors prefetched ahead during backward (default 2)")
	var minBytes byteSize = -1
	fs.Var(&minBytes, "min-bytes", "offloader: tensors smaller than this stay on the device (default 1KiB)")
	params := fs.String("device-param", "", "driver parameters, key=value[,key=value] (cpu: copy_delay=1ms)")
	policy := fs.String("policy", "", "offload policy file written by `ferry plan` (used by offload and offload-disk)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	traceDir := fs.String("trace", "", "write each mode's last step as a Chrome trace and an SVG memory chart into this directory")
	inBackward := fs.Bool("optimizer-in-backward", false, "update each parameter inside backward and free its gradient at once")
	profile := fs.String("profile", "", "meta device only: hardware profile for predicted times ("+strings.Join(plan.Profiles(), ", ")+" or a JSON file)")
	return func(out io.Writer, asJSON bool) error {
		cfg := demo.DefaultConfig(*dev)
		cfg.Layers, cfg.Steps, cfg.Seed, cfg.DiskDir = *layers, *steps, *seed, *diskDir
		if *width > 0 {
			cfg.Width = *width
		}
		if *batch > 0 {
			cfg.Batch = *batch
		}
		cfg.Modes = strings.Split(*modes, ",")
		cfg.DeviceOptions = device.Options{Capacity: int64(capacity), PoisonFreed: *poison, Params: map[string]string{}}
		if *params != "" {
			for _, kv := range strings.Split(*params, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--device-param %q: want key=value", kv)
				}
				cfg.DeviceOptions.Params[k] = v
			}
		}
		if *keepLast >= 0 {
			cfg.Offload.KeepLast = *keepLast
		}
		if *inFlight >= 0 {
			cfg.Offload.MaxInFlight = *inFlight
		}
		if *lookahead >= 0 {
			cfg.Offload.Lookahead = *lookahead
		}
		if minBytes >= 0 {
			cfg.Offload.MinBytes = int64(minBytes)
		}
		cfg.OptimizerInBackward = *inBackward
		cfg.TraceDir = *traceDir
		if *policy != "" {
			p, err := offload.LoadPolicy(*policy)
			if err != nil {
				return err
			}
			cfg.Policy = p.Place
			cfg.OptimizerInBackward = cfg.OptimizerInBackward || p.OptimizerInBackward
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
		// Ctrl-C: let the deferred cleanup run (the offloader's files are
		// unlinked already; this ends the process without a stack trace).
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		go func() {
			<-sig
			fmt.Fprintln(os.Stderr, "ferry demo: interrupted")
			os.Exit(130)
		}()
		defer signal.Stop(sig)

		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		res, err := demo.Execute(cfg)
		if res != nil && strings.HasPrefix(*dev, "cpu") {
			res.MatmulBackend = cpu.MatmulBackend()
		}
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(out, res)
		}
		printDemo(out, res)
		return nil
	}
}

func printDemo(w io.Writer, r *demo.Result) {
	fmt.Fprintf(w, "ferry demo: %d × (Linear(%d, %d) + ReLU), batch %d, MSE loss, SGD, on %s\n",
		r.Layers, r.Width, r.Width, r.Batch, r.Device)
	if r.MatmulBackend != "" {
		fmt.Fprintf(w, "matrix products: %s\n", r.MatmulBackend)
	}
	fmt.Fprintf(w, "one activation = %s, parameters = %s; %d timed step(s) after a warm-up, median shown\n",
		mib(r.ActivationBytes), mib(r.ParameterBytes), r.Steps)
	var noneTime float64
	for _, run := range r.Runs {
		if run.Mode == demo.None {
			noneTime = run.StepSeconds
		}
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
		fmt.Fprintf(w, "  max during the whole step %s · step %.3f s · loss %.6g · gradients equal none's: %s\n",
			mib(run.PeakStepBytes), run.StepSeconds, run.Loss, eq)
		fmt.Fprintf(w, "  moved %s to host, %s to disk per step · compute waited %.4f s · prefetched in time %.0f%%",
			mib(run.ToHostBytes), mib(run.ToDiskBytes), run.StallSeconds, 100*run.OverlapRatio)
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
		fmt.Fprintf(tw, "%s\t%.1f act\t+%.1f act\t%s\t%.3f\t%s\t%s\t%.4f\t%s\t\n", run.Mode,
			float64(run.AfterForwardBytes-run.BeforeForwardBytes)/act,
			float64(run.PeakForwardBytes-run.BeforeForwardBytes)/act,
			mib(run.PeakStepBytes), run.StepSeconds, ratio, mib(run.OffloadedBytes), run.StallSeconds, rssStr)
	}
	tw.Flush()
	fmt.Fprintln(w, "(act = one activation; kept by forward = after − before; forward peak = peak − before)")
}
