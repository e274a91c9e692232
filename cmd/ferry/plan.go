package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"ferry/device"
	"ferry/plan"
)

func init() {
	register(command{name: "plan", summary: "choose an offload policy that fits a memory budget at the least predicted cost", setup: setupPlan})
}

func setupPlan(fs *flag.FlagSet) func(io.Writer, bool) error {
	layers := fs.Int("layers", 40, "number of Linear+ReLU layers")
	width := fs.Int("width", 4096, "layer width")
	batch := fs.Int("batch", 1024, "batch size")
	var budget, hostBudget byteSize
	fs.Var(&budget, "budget", "device memory the step may use at its peak (e.g. 3GiB); required")
	fs.Var(&hostBudget, "host-budget", "host memory for offloaded tensors (default: unlimited)")
	profile := fs.String("profile", "h200-pcie5", "hardware profile: "+strings.Join(plan.Profiles(), ", ")+", or a JSON file from ferry calibrate --save")
	noDisk := fs.Bool("no-disk", false, "do not use the disk tier")
	out := fs.String("out", "ferry-plan.json", "where to write the policy file (\"\" to skip)")
	return func(w io.Writer, asJSON bool) error {
		if budget <= 0 {
			return fmt.Errorf("--budget is required (for example --budget 3GiB)")
		}
		if err := positive(setFlags(fs), map[string]int{"layers": *layers, "width": *width, "batch": *batch}); err != nil {
			return err
		}
		prof, err := plan.LoadProfile(*profile)
		if err != nil {
			return err
		}
		p, err := plan.Make(plan.Options{Model: plan.Model{Layers: *layers, Width: *width, Batch: *batch},
			Budget: int64(budget), HostBudget: int64(hostBudget), Profile: prof, NoDisk: *noDisk})
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
		if asJSON {
			if err := writeJSON(w, struct {
				*plan.Plan
				PolicyFile string `json:"policy_file,omitempty"`
			}{p, written}); err != nil {
				return err
			}
		} else {
			printPlan(w, p, written, *profile)
		}
		if !p.Fits {
			// The figures are out; the exit status says the budget failed.
			return quietError{fmt.Errorf("nothing fits in %s", device.FormatBytes(p.Budget))}
		}
		return nil
	}
}

func printPlan(w io.Writer, p *plan.Plan, written, profileArg string) {
	fmt.Fprintf(w, "ferry plan: %s on %s, budget %s\n", p.Model, p.Profile, device.FormatBytes(p.Budget))
	fmt.Fprintf(w, "unlimited memory: peak %s, step %.4g s (predicted)\n", device.FormatBytes(p.Unlimited.PeakBytes), p.Unlimited.StepSeconds)
	if !p.Fits {
		fmt.Fprintf(w, "\nNothing fits: %s.\n", p.Why)
		if p.ShortBy > 0 {
			fmt.Fprintf(w, "The smallest plan needs %s, %s over the budget.\n", device.FormatBytes(p.Predicted.PeakBytes), device.FormatBytes(p.ShortBy))
		}
		for _, s := range p.Suggestions {
			fmt.Fprintf(w, "  would fit: %s\n", s)
		}
		fmt.Fprintf(w, "(%d plans evaluated on the meta device)\n", p.Evaluated)
		return
	}
	fmt.Fprintln(w, "\nplan:")
	if p.OptimizerInBackward {
		fmt.Fprintln(w, "  the optimizer updates each parameter inside backward and frees its gradient (optim.InBackward)")
	} else {
		fmt.Fprintln(w, "  the optimizer steps after backward, as usual")
	}
	for _, s := range p.Summary() {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "predicted: peak %s of %s · step %.4g s, %.3f × unlimited · stall %.4g s · %s to host, %s to disk per step\n",
		device.FormatBytes(p.Predicted.PeakBytes), device.FormatBytes(p.Budget), p.Predicted.StepSeconds, p.Slowdown,
		p.Predicted.StallSeconds, device.FormatBytes(p.Predicted.ToHostBytes), device.FormatBytes(p.Predicted.ToDiskBytes))
	fmt.Fprintf(w, "(%d plans evaluated on the meta device)\n", p.Evaluated)
	if written != "" {
		fmt.Fprintf(w, "policy written to %s; replay it: ferry demo --device meta --profile %s --layers %d --width %d --batch %d --modes offload --policy %s\n",
			written, profileArg, p.Model.Layers, p.Model.Width, p.Model.Batch, written)
	}
}
