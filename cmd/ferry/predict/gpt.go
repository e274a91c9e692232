package main

import (
	"fmt"
	"log"
	"os"
	"slices"
	"text/tabwriter"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/nn"
	"ferry/plan"
	"ferry/train"
)

// gptModes are the modes the GPT comparison runs: every block kept,
// every block recomputed, recomputed with the blocks' inputs offloaded,
// and a plan's mix.
var gptModes = []string{demo.None, demo.Recompute, demo.RecomputeOffload, demo.Policy}

// runGPT plans a small GPT at a budget between the smaller of
// all-recompute and all-offload and the unlimited peak (frac of the way
// up), predicts every mode on the meta device with profile p, then
// measures every mode on the CPU in rounds, one mode after the other, and
// prints both.
func runGPT(p *meta.Profile, g nn.GPTConfig, batch, rounds, steps int, frac float64) {
	cfg := demo.DefaultConfig("cpu")
	cfg.Family, _ = models.Lookup("gpt")
	cfg.Sizes = models.Sizes{"layers": float64(g.Layers), "heads": float64(g.Heads), "embd": float64(g.Embd), "seq": float64(g.Seq),
		"vocab": float64(g.Vocab), "dropout": float64(g.Dropout), "batch": float64(batch)}
	cfg.LR = 3e-4
	cfg.DiskDir = os.TempDir()
	model := demo.PlanModel(cfg)
	full, err := plan.Make(plan.Options{Model: model, Profile: p, Budget: 1 << 50})
	if err != nil {
		log.Fatal(err)
	}
	lo := min(full.AllRecompute.PeakBytes, full.AllOffload.PeakBytes)
	budget := lo + int64(frac*float64(full.Unlimited.PeakBytes-lo))
	pl, err := plan.Make(plan.Options{Model: model, Profile: p, Budget: budget})
	if err != nil {
		log.Fatal(err)
	}
	if !pl.Fits {
		log.Fatalf("nothing fits in %s: %s", device.FormatBytes(budget), pl.Why)
	}
	c := pl.Counts
	fmt.Printf("model: %s\n", model)
	fmt.Printf("plan at %s (%.2f of the way from %s to the unlimited %s): keep %d, host %d, disk %d, recompute %d in %d of %d blocks, optimizer in backward %v\n",
		device.FormatBytes(budget), frac, device.FormatBytes(lo), device.FormatBytes(full.Unlimited.PeakBytes),
		c.Keep, c.Host, c.Disk, c.Recompute, c.Segments, g.Layers, pl.OptimizerInBackward)

	// One mode, on a device: the policy's settings apply to mode policy
	// only (the optimizer's place applies to the whole run).
	modeCfg := func(base demo.Config, mode string) demo.Config {
		m := base
		m.Modes = []string{mode}
		if mode == demo.Policy {
			pol := pl.Policy()
			m.Policy, m.Segments, m.OptimizerInBackward = pol.Place, pol.SegmentHooks(), pol.OptimizerInBackward
			m.Offload.MaxInFlight = pol.InFlight(m.Offload.MaxInFlight)
			m.Offload.Lookahead = pol.Ahead(m.Offload.Lookahead)
		}
		return m
	}
	predicted := map[string]demo.Run{}
	for _, mode := range gptModes {
		m := modeCfg(cfg, mode)
		m.Device, m.Steps = "meta", 1
		m.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, p), nil }
		res, err := demo.Execute(m)
		if err != nil {
			log.Fatal(err)
		}
		predicted[mode] = res.Runs[0]
	}
	measured := map[string][]float64{}
	peaks := map[string]int64{}
	for r := 0; r < rounds; r++ {
		for _, mode := range gptModes {
			m := modeCfg(cfg, mode)
			m.Steps = steps
			res, err := demo.Execute(m)
			if err != nil {
				log.Fatal(err)
			}
			measured[mode] = append(measured[mode], res.Runs[0].StepSecondsAll...)
			peaks[mode] = res.Runs[0].PeakStepBytes
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tpredicted s\tmeasured s (median)\tmeasured range\terror\t× none predicted\t× none measured\tpredicted peak\tmeasured peak\t")
	noneP, noneM := predicted[demo.None].StepSeconds, train.Median(measured[demo.None])
	for _, mode := range gptModes {
		m := slices.Sorted(slices.Values(measured[mode]))
		med := train.Median(m)
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.3f–%.3f\t%+.1f%%\t%.2f\t%.2f\t%s\t%s\t\n", mode, predicted[mode].StepSeconds, med, m[0], m[len(m)-1],
			100*(predicted[mode].StepSeconds-med)/med, predicted[mode].StepSeconds/noneP, med/noneM, device.FormatBytes(predicted[mode].PeakStepBytes), device.FormatBytes(peaks[mode]))
	}
	tw.Flush()
	fmt.Printf("(the plan's own prediction for mode policy: step %.4f s, peak %s)\n", pl.Predicted.StepSeconds, device.FormatBytes(pl.Predicted.PeakBytes))
}
