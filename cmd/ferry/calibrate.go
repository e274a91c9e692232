package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"ferry/internal/fsx"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/nn"
	"ferry/plan"
)

func init() {
	register(command{name: "calibrate", summary: "measure this machine for the planner's cost model", setup: setupCalibrate})
}

func setupCalibrate(fs *flag.FlagSet) func(io.Writer, bool) error {
	dev := fs.String("device", "cpu", "device to measure")
	model := fs.String("model", "mlp", "what the elementwise rate and copy share are fitted to: mlp, training steps of 8 Linear+ReLU layers; "+
		"gpt, training steps of a GPT (as cmd/ferry/predict -model gpt runs it)")
	width := fs.Int("width", 1024, "mlp: Linear layer width whose matrix products are timed")
	batch := fs.Int("batch", 0, "mlp: batch size for those products (default 256); gpt: the GPT's batch (default 16)")
	layers := fs.Int("layers", 4, "gpt: blocks")
	heads := fs.Int("heads", 4, "gpt: attention heads")
	embd := fs.Int("embd", 128, "gpt: embedding width (the products are timed as Linear(embd) at batch × seq rows)")
	seq := fs.Int("seq", 64, "gpt: sequence length")
	vocab := fs.Int("vocab", 256, "gpt: vocabulary size")
	diskDir := fs.String("disk-dir", "", "directory for the disk test (default: the system's temporary directory)")
	seconds := fs.Float64("seconds", 0.5, "time spent on each figure")
	save := fs.String("save", "", "also write the profile as JSON to this file (for ferry plan --profile)")
	return func(out io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if err := positive(set, map[string]int{"width": *width, "batch": *batch, "layers": *layers, "heads": *heads,
			"embd": *embd, "seq": *seq, "vocab": *vocab}); err != nil {
			return err
		}
		if !(*seconds > 0 && *seconds <= 600) {
			return fmt.Errorf("--seconds must be a number in (0, 600], got %v", *seconds)
		}
		opts := plan.CalibrateOptions{Width: *width, Batch: 256, DiskDir: *diskDir, Seconds: *seconds, Fit: demo.FitProfile}
		if set["batch"] {
			opts.Batch = *batch
		}
		switch *model {
		case "mlp":
			for _, f := range []string{"layers", "heads", "embd", "seq", "vocab"} {
				if set[f] {
					return fmt.Errorf("--%s sizes a GPT; add --model gpt", f)
				}
			}
		case "gpt":
			if set["width"] {
				return fmt.Errorf("--width sizes the MLP; a GPT's is --embd")
			}
			g := nn.GPTConfig{Vocab: *vocab, Seq: *seq, Layers: *layers, Heads: *heads, Embd: *embd, Bias: true, Seed: 1}
			b := 16
			if set["batch"] {
				b = *batch
			}
			if err := g.Validate(); err != nil {
				return err
			}
			if err := gptSizes(g, b); err != nil {
				return err
			}
			opts.Width, opts.Batch, opts.Fit = g.Embd, b*g.Seq, demo.FitGPTProfile(g, b)
			opts.FitOn = fmt.Sprintf("training steps of a GPT (%d layers, %d heads, embedding %d, sequence %d, vocabulary %d), batch %d, AdamW, "+
				"in modes none and offload (recompute, recompute-offload and planned policies not fitted)", g.Layers, g.Heads, g.Embd, g.Seq, g.Vocab, b)
		default:
			return fmt.Errorf("--model %q: choose mlp or gpt", *model)
		}
		d, err := device.Open(*dev, device.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		p, err := plan.Calibrate(d, opts)
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
