package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"ferry/device"
	"ferry/internal/demo"
	"ferry/nn"
	"ferry/plan"
)

func init() {
	register(command{name: "plan", summary: "choose keep / host / disk / recompute for every saved tensor under a memory budget, at the least predicted step time", setup: setupPlan})
}

func setupPlan(fs *flag.FlagSet) func(io.Writer, bool) error {
	model := fs.String("model", "mlp", "mlp: the origin model (Linear+ReLU layers); gpt: a GPT-2-style transformer")
	layers := fs.Int("layers", 0, "mlp: Linear+ReLU layers (default 40); gpt: blocks (default 12)")
	width := fs.Int("width", 4096, "mlp: layer width")
	heads := fs.Int("heads", 12, "gpt: attention heads")
	embd := fs.Int("embd", 768, "gpt: embedding width")
	seq := fs.Int("seq", 1024, "gpt: sequence length")
	vocab := fs.Int("vocab", 50257, "gpt: vocabulary size")
	dropout := fs.Float64("dropout", 0, "gpt: dropout probability")
	batch := fs.Int("batch", 0, "batch size (default 1024 for mlp, 8 for gpt)")
	var budget, hostBudget byteSize
	fs.Var(&budget, "budget", "device memory the step may use at its peak (e.g. 20GiB); required")
	fs.Var(&hostBudget, "host-budget", "host memory for offloaded tensors (default: unlimited)")
	profile := fs.String("profile", "h200-pcie5", "hardware profile: "+strings.Join(plan.Profiles(), ", ")+", or a JSON file from ferry calibrate --save")
	noDisk := fs.Bool("no-disk", false, "do not use the disk tier")
	out := fs.String("out", "", "write the policy file (for ferry demo --policy, ferry train --policy) to this path; none is written without it")
	return func(w io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if budget <= 0 {
			return fmt.Errorf("--budget is required (for example --budget 20GiB)")
		}
		if err := positive(set, map[string]int{"layers": *layers, "width": *width, "batch": *batch, "heads": *heads,
			"embd": *embd, "seq": *seq, "vocab": *vocab}); err != nil {
			return err
		}
		cfg := demo.DefaultConfig("meta")
		switch *model {
		case "mlp":
			for _, f := range []string{"heads", "embd", "seq", "vocab", "dropout"} {
				if set[f] {
					return fmt.Errorf("--%s sizes a GPT; add --model gpt", f)
				}
			}
			cfg.Width = *width
			if set["layers"] {
				cfg.Layers = *layers
			}
			if set["batch"] {
				cfg.Batch = *batch
			}
			if cfg.Layers > plan.MaxLayers {
				return fmt.Errorf("plan: %d layers is more than the %d the planner takes", cfg.Layers, plan.MaxLayers)
			}
		case "gpt":
			if set["width"] {
				return fmt.Errorf("--width sizes the MLP; a GPT's is --embd")
			}
			cfg.Model, cfg.Batch, cfg.LR = "gpt", 8, 3e-4
			cfg.GPT = nn.GPTConfig{Vocab: *vocab, Seq: *seq, Layers: 12, Heads: *heads, Embd: *embd, Bias: true, Dropout: float32(*dropout), Seed: cfg.Seed}
			if set["layers"] {
				cfg.GPT.Layers = *layers
			}
			if set["batch"] {
				cfg.Batch = *batch
			}
			if err := cfg.GPT.Validate(); err != nil {
				return err
			}
			if cfg.GPT.Layers > plan.MaxLayers {
				return fmt.Errorf("plan: %d layers is more than the %d the planner takes", cfg.GPT.Layers, plan.MaxLayers)
			}
			if err := gptSizes(cfg.GPT, cfg.Batch); err != nil {
				return err
			}
		default:
			return fmt.Errorf("--model %q: choose mlp or gpt", *model)
		}
		if _, _, err := device.ShapeBytes([]int{cfg.Layers, cfg.Width, cfg.Width + 1}, 4); err != nil && cfg.Model != "gpt" {
			return fmt.Errorf("plan: parameters of %d × Linear(%d, %d): %w", cfg.Layers, cfg.Width, cfg.Width, err)
		}
		if _, _, err := device.ShapeBytes([]int{cfg.Layers + 1, cfg.Batch, cfg.Width}, 4); err != nil && cfg.Model != "gpt" {
			return fmt.Errorf("plan: activations of %d layers at batch %d, width %d: %w", cfg.Layers, cfg.Batch, cfg.Width, err)
		}
		prof, err := plan.LoadProfile(*profile)
		if err != nil {
			return err
		}
		p, err := plan.Make(plan.Options{Model: demo.PlanModel(cfg), Budget: int64(budget), HostBudget: int64(hostBudget), Profile: prof, NoDisk: *noDisk})
		if err != nil {
			return err
		}
		written := ""
		if p.Fits && *out != "" {
			if err := p.Policy().Save(*out); err != nil {
				return err
			}
			written = *out
		}
		replay := ""
		if written != "" {
			replay = replayCommand(cfg, *profile, written, p.Counts.Disk > 0)
		}
		if asJSON {
			if err := writeJSON(w, planJSON(p, written, replay)); err != nil {
				return err
			}
		} else {
			printPlan(w, p, replay)
			if written != "" {
				fmt.Fprintf(w, "policy written to %s\n", written)
			} else if p.Fits {
				fmt.Fprintln(w, "(no policy file written; give --out FILE to write one)")
			}
		}
		if !p.Fits {
			// The figures are out; the exit status says the budget failed.
			return quietError{fmt.Errorf("nothing fits in %s", device.FormatBytes(p.Budget))}
		}
		return nil
	}
}

// maxTokens bounds batch × sequence: the planner's step makes its token
// ids on the host, 4 bytes each, whatever the device.
const maxTokens = 1 << 28

// gptSizes refuses, before anything is built, a GPT whose tensors no
// device could hold or whose tokens would not fit this machine.
func gptSizes(g nn.GPTConfig, batch int) error {
	for _, t := range []struct {
		what  string
		shape []int
	}{
		{"tokens", []int{batch, g.Seq}},
		{"logits", []int{batch, g.Seq, g.Vocab}},
		{"attention scores", []int{batch, g.Heads, g.Seq, g.Seq}},
		{"MLP hidden layer", []int{batch, g.Seq, g.Embd, 4}},
		{"token embeddings", []int{g.Vocab, g.Embd}},
		{"position embeddings", []int{g.Seq, g.Embd}},
		{"block weights", []int{g.Embd, g.Embd, 12}},
	} {
		if _, _, err := device.ShapeBytes(t.shape, 4); err != nil {
			return fmt.Errorf("plan: the GPT's %s (shape %v): %w", t.what, t.shape, err)
		}
	}
	if n, _, _ := device.ShapeBytes([]int{batch, g.Seq}, 1); n > maxTokens {
		return fmt.Errorf("plan: batch %d × sequence %d is %d tokens, more than the %d the planner takes", batch, g.Seq, n, maxTokens)
	}
	return nil
}

// replayCommand is the ferry demo command that replays the plan on meta.
func replayCommand(cfg demo.Config, profile, file string, disk bool) string {
	c := "ferry demo --device meta --profile " + profile
	if cfg.Model == "gpt" {
		g := cfg.GPT
		c += fmt.Sprintf(" --model gpt --layers %d --heads %d --embd %d --seq %d --vocab %d --batch %d", g.Layers, g.Heads, g.Embd, g.Seq, g.Vocab, cfg.Batch)
		if g.Dropout > 0 {
			c += fmt.Sprintf(" --dropout %g", g.Dropout)
		}
	} else {
		c += fmt.Sprintf(" --layers %d --width %d --batch %d", cfg.Layers, cfg.Width, cfg.Batch)
	}
	if disk {
		c += " --disk-dir DIR"
	}
	return c + " --policy " + file
}

type figures struct {
	Fits                 bool        `json:"fits"`
	PredictedPeakBytes   int64       `json:"predicted_peak_bytes"`
	PredictedStepSeconds float64     `json:"predicted_step_seconds"`
	OptimizerInBackward  bool        `json:"optimizer_in_backward"`
	Placements           plan.Counts `json:"placements"`
}

func planJSON(p *plan.Plan, written, replay string) any {
	return struct {
		*plan.Plan
		PredictedPeakBytes   int64   `json:"predicted_peak_bytes"`
		PredictedStepSeconds float64 `json:"predicted_step_seconds"`
		AllRecompute         figures `json:"all_recompute"`
		AllOffload           figures `json:"all_offload"`
		PolicyFile           string  `json:"policy_file,omitempty"`
		Replay               string  `json:"replay_command,omitempty"`
	}{p, p.Predicted.PeakBytes, p.Predicted.StepSeconds, baselineJSON(p.AllRecompute), baselineJSON(p.AllOffload), written, replay}
}

func baselineJSON(b plan.Baseline) figures {
	return figures{Fits: b.Fits, PredictedPeakBytes: b.PeakBytes, PredictedStepSeconds: b.StepSeconds,
		OptimizerInBackward: b.OptimizerInBackward, Placements: b.Counts}
}

func counts(c plan.Counts) string {
	return fmt.Sprintf("keep %d, host %d, disk %d, recompute %d (in %d segments)", c.Keep, c.Host, c.Disk, c.Recompute, c.Segments)
}

func printPlan(w io.Writer, p *plan.Plan, replay string) {
	fmt.Fprintf(w, "ferry plan: %s on %s, budget %s", p.Model, p.Profile, device.FormatBytes(p.Budget))
	if p.HostBudget > 0 {
		fmt.Fprintf(w, ", host budget %s", device.FormatBytes(p.HostBudget))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "unlimited memory: peak %s, step %.4g s (predicted)\n", device.FormatBytes(p.Unlimited.PeakBytes), p.Unlimited.StepSeconds)
	for _, b := range []struct {
		name string
		b    plan.Baseline
	}{{"all recompute", p.AllRecompute}, {"all offload", p.AllOffload}} {
		fits := "does not fit"
		if b.b.Fits {
			fits = "fits"
		}
		fmt.Fprintf(w, "%s: peak %s, step %.4g s, %s\n", b.name, device.FormatBytes(b.b.PeakBytes), b.b.StepSeconds, fits)
	}
	if !p.Fits {
		fmt.Fprintf(w, "\nNothing fits: %s.\n", p.Why)
		if p.ShortBy > 0 {
			fmt.Fprintf(w, "The smallest plan needs %s, %s over the budget.\n", device.FormatBytes(p.Predicted.PeakBytes), device.FormatBytes(p.ShortBy))
		}
		for _, s := range p.Suggestions {
			fmt.Fprintf(w, "  would fit: %s\n", s)
		}
		fmt.Fprintf(w, "(%d steps replayed on the meta device)\n", p.Replays)
		return
	}
	fmt.Fprintln(w, "\nplan:")
	if p.KeepsEverything {
		fmt.Fprintln(w, "  everything fits: every saved tensor stays on the device, nothing is recomputed")
	} else {
		fmt.Fprintf(w, "  saved tensors: %s\n", counts(p.Counts))
		if len(p.Segments) > 0 {
			fmt.Fprintf(w, "  recomputed: %s\n", summarize(p.Segments))
		}
	}
	if p.OptimizerInBackward {
		fmt.Fprintln(w, "  the optimizer updates each parameter inside backward and frees its gradient (optim.InBackward)")
	}
	fmt.Fprintf(w, "predicted: peak %s of %s · step %.4g s, %.3f × unlimited · stall %.4g s · %s to host, %s to disk per step\n",
		device.FormatBytes(p.Predicted.PeakBytes), device.FormatBytes(p.Budget), p.Predicted.StepSeconds, p.Slowdown,
		p.Predicted.StallSeconds, device.FormatBytes(p.Predicted.ToHostBytes), device.FormatBytes(p.Predicted.ToDiskBytes))
	fmt.Fprintf(w, "(cost model: peak %s, step %.4g s; %d steps replayed on the meta device)\n",
		device.FormatBytes(p.ModelPeakBytes), p.ModelStepSeconds, p.Replays)
	if replay != "" {
		fmt.Fprintf(w, "replay it: %s\n", replay)
	}
}

func summarize(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, %s, …, %s (%d)", names[0], names[1], names[len(names)-1], len(names))
}
