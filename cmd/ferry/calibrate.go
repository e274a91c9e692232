package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"ferry/internal/fsx"

	"ferry/device"
	"ferry/internal/demo"
	"ferry/plan"
)

func init() {
	register(command{name: "calibrate", summary: "measure this machine for the planner's cost model", setup: setupCalibrate})
}

func setupCalibrate(fs *flag.FlagSet) func(io.Writer, bool) error {
	dev := fs.String("device", "cpu", "device to measure")
	width := fs.Int("width", 1024, "Linear layer width whose matrix products are timed")
	batch := fs.Int("batch", 256, "batch size for those products")
	diskDir := fs.String("disk-dir", "", "directory for the disk test (default: the system's temporary directory)")
	seconds := fs.Float64("seconds", 0.5, "time spent on each figure")
	save := fs.String("save", "", "also write the profile as JSON to this file (for ferry plan --profile)")
	return func(out io.Writer, asJSON bool) error {
		if err := positive(setFlags(fs), map[string]int{"width": *width, "batch": *batch}); err != nil {
			return err
		}
		if !(*seconds > 0 && *seconds <= 600) {
			return fmt.Errorf("--seconds must be a number in (0, 600], got %v", *seconds)
		}
		d, err := device.Open(*dev, device.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		p, err := plan.Calibrate(d, plan.CalibrateOptions{Width: *width, Batch: *batch, DiskDir: *diskDir, Seconds: *seconds, Fit: demo.FitProfile})
		if err != nil {
			return err
		}
		if *save != "" {
			b, err := json.MarshalIndent(jsonSafe(p), "", "  ")
			if err != nil {
				return err
			}
			if err := fsx.WriteAtomic(*save, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
				return err
			}
		}
		if asJSON {
			return writeJSON(out, p)
		}
		fmt.Fprintf(out, "%s\n", p.Name)
		fmt.Fprintf(out, "  matrix products   %8.1f GFLOP/s\n", p.MatmulFLOPS/1e9)
		fmt.Fprintf(out, "  elementwise       %8.1f GB/s\n", p.MemoryBytesPerSec/1e9)
		fmt.Fprintf(out, "  per kernel        %8.2f µs\n", p.KernelSeconds*1e6)
		fmt.Fprintf(out, "  to host           %8.1f GB/s\n", p.D2HBytesPerSec/1e9)
		fmt.Fprintf(out, "  from host         %8.1f GB/s\n", p.H2DBytesPerSec/1e9)
		fmt.Fprintf(out, "  disk write / read %8.1f / %.1f GB/s\n", p.DiskWriteBytesPerSec/1e9, p.DiskReadBytesPerSec/1e9)
		fmt.Fprintf(out, "(%s)\n", p.Source)
		if *save != "" {
			fmt.Fprintf(out, "written to %s\n", *save)
		}
		return nil
	}
}
