package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/meta"
	"ferry/internal/fsx"
	"ferry/models"
	"ferry/plan"
)

func init() {
	register(command{name: "calibrate", summary: "measure this machine for the planner's cost model", setup: setupCalibrate})
}

func setupCalibrate(fs *flag.FlagSet) func(io.Writer, bool) error {
	dev := fs.String("device", "cpu", "device to measure")
	// Without --model the elementwise rate and the host optimizer's rate
	// are fitted to training steps of 8 Linear+ReLU layers; with --model
	// NAME, to training steps of that model at its sizes (the size
	// flags). The copy share is measured (plan.Calibrate).
	sizes := defineSizeFlags(fs, "", nil, nil)
	diskDir := fs.String("disk-dir", "", "directory for the disk test (default: the system's temporary directory)")
	seconds := fs.Float64("seconds", 0.5, "time spent on each figure")
	save := fs.String("save", "", "also write the profile as JSON to this file (for ferry plan --profile)")
	return func(out io.Writer, asJSON bool) error {
		if !(*seconds > 0 && *seconds <= 600) {
			return fmt.Errorf("--seconds must be a number in (0, 600], got %v", *seconds)
		}
		if *save != "" {
			if err := checkOutputFile("--save", *save, false); err != nil {
				return err
			}
		}
		if *diskDir != "" {
			if err := checkOutputDir("--disk-dir", *diskDir, true); err != nil {
				return err
			}
		}
		if *sizes.model == "" {
			// The default fit: products of --width at --batch rows, and
			// steps of 8 Linear+ReLU layers of that size.
			opts := plan.CalibrateOptions{Width: 1024, Batch: 256, DiskDir: *diskDir, Seconds: *seconds, Fit: demo.FitProfile}
			for k, dst := range map[string]*int{"width": &opts.Width, "batch": &opts.Batch} {
				if v, ok := sizes.values[k]; ok {
					if v != math.Trunc(v) || v < 1 || v > 1<<20 {
						return fmt.Errorf("--%s must be a whole number in [1, 1048576], got %v", k, v)
					}
					*dst = int(v)
				}
			}
			for k := range sizes.set {
				if k != "width" && k != "batch" {
					return fmt.Errorf("--%s sizes a model: add --model (%s)", k, strings.Join(models.Names(nil), ", "))
				}
			}
			// What is being measured goes to stderr as it starts: a
			// calibration takes from seconds to minutes.
			progress := fs.Output()
			opts.Progress = func(what string) { fmt.Fprintf(progress, "calibrate: timing %s…\n", what) }
			return calibrate(out, asJSON, *dev, *save, opts)
		}
		opts := plan.CalibrateOptions{DiskDir: *diskDir, Seconds: *seconds}
		{
			f, err := sizes.family()
			if err != nil {
				return err
			}
			s, err := sizes.sizes(f, *dev)
			if err != nil {
				return err
			}
			w, err := f.Workload(meta.New(device.Options{}, nil), s, 1)
			if err != nil {
				return err
			}
			rows, width := w.MatmulShape()
			name, _ := w.Optimizer()
			opts.FitOn = "training steps of " + w.Describe() + ", " + name + ", in mode none with everything on the device and with the optimizer's state and gradients on the host " +
				"(parameters on the host, activations moved to the host or disk, recomputed, the optimizer inside backward and planned policies not fitted)"
			w.Release()
			opts.Width, opts.Batch, opts.Fit = width, rows, demo.FitModelProfile(f, s)
			// The disk tier's files are about an activation's size.
			opts.DiskBytes = 4 * rows * width
		}
		// What is being measured goes to stderr as it starts: a
		// calibration takes from seconds to minutes.
		progress := fs.Output()
		opts.Progress = func(what string) { fmt.Fprintf(progress, "calibrate: timing %s…\n", what) }
		return calibrate(out, asJSON, *dev, *save, opts)
	}
}

// calibrate measures dev with opts, saves the profile if asked, and
// prints it.
func calibrate(out io.Writer, asJSON bool, dev, save string, opts plan.CalibrateOptions) error {
	{
		d, err := device.Open(dev, device.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		_, opts.HostIsDevice = d.(*cpu.Device)
		p, err := plan.Calibrate(d, opts)
		if err != nil {
			return err
		}
		if save != "" {
			b, err := json.MarshalIndent(jsonSafe(p), "", "  ")
			if err != nil {
				return err
			}
			if err := fsx.WriteAtomic(save, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
				return err
			}
		}
		if asJSON {
			return writeJSON(out, p)
		}
		fmt.Fprintf(out, "%s\n", p.Name)
		fmt.Fprintf(out, "  matrix products   %8.1f GFLOP/s\n", p.MatmulFLOPS/1e9)
		if p.MatmulBF16FLOPS > 0 {
			fmt.Fprintf(out, "  bfloat16 products %8.1f GFLOP/s\n", p.MatmulBF16FLOPS/1e9)
		} else {
			// The Source below says why; --json says it there too, and
			// leaves matmul_bf16_flops out (the planner then uses the
			// fp32 rate).
			fmt.Fprintf(out, "  bfloat16 products not measured: %s has no bfloat16 products (the fp32 rate applies)\n", dev)
		}
		fmt.Fprintf(out, "  elementwise       %8.1f GB/s\n", p.MemoryBytesPerSec/1e9)
		fmt.Fprintf(out, "  per kernel        %8.2f µs\n", p.KernelSeconds*1e6)
		fmt.Fprintf(out, "  to host           %8.1f GB/s\n", p.D2HBytesPerSec/1e9)
		fmt.Fprintf(out, "  from host         %8.1f GB/s\n", p.H2DBytesPerSec/1e9)
		fmt.Fprintf(out, "  disk write / read %8.1f / %.1f GB/s\n", p.DiskWriteBytesPerSec/1e9, p.DiskReadBytesPerSec/1e9)
		if p.HostOptimizerBytesPerSec > 0 {
			fmt.Fprintf(out, "  host optimizer    %8.1f GB/s\n", p.HostOptimizerBytesPerSec/1e9)
		}
		fmt.Fprintf(out, "  copy share        %8.2f s of compute per s of copying\n", p.CopyComputeShare)
		fmt.Fprintf(out, "  per disk transfer %8.2f µs\n", p.DiskSeconds*1e6)
		fmt.Fprintf(out, "(%s)\n", p.Source)
		if save != "" {
			fmt.Fprintf(out, "written to %s\n", save)
		}
		return nil
	}
}
