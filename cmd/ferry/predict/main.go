// Command predict compares the planner's predicted step times with
// measured ones on this machine: it calibrates the CPU device (or loads a
// profile), predicts each demo mode on the meta device, then measures each
// mode on the CPU device in alternating rounds and prints both side by side
// with the error. With -model gpt it does the same for a small GPT in
// modes none, recompute, recompute-offload and a plan's policy, with the
// peaks beside the times.
//
//	go run ./cmd/ferry/predict                    # 40 × 1024, batch 256, 3 rounds
//	go run ./cmd/ferry/predict -profile cpu -rounds 5
//	go run ./cmd/ferry/predict -profile cpu -model gpt
//	go run ./cmd/ferry/predict -profile cpu-gpt -model gpt   # fitted on this GPT (ferry calibrate --model gpt)
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"text/tabwriter"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/device/meta"
	"ferry/models"
	"ferry/nn"
	"ferry/plan"
)

func main() {
	layers := flag.Int("layers", 40, "layers")
	width := flag.Int("width", 1024, "width")
	batch := flag.Int("batch", 256, "batch")
	rounds := flag.Int("rounds", 3, "measurement rounds (each runs every mode)")
	steps := flag.Int("steps", 5, "timed steps per mode and round")
	profile := flag.String("profile", "", "profile to predict with (default: calibrate now)")
	model := flag.String("model", "mlp", "mlp: the origin model; gpt: a small GPT")
	g := nn.GPTConfig{Bias: true, Seed: 1}
	flag.IntVar(&g.Layers, "gpt-layers", 4, "gpt: blocks")
	flag.IntVar(&g.Heads, "heads", 4, "gpt: attention heads")
	flag.IntVar(&g.Embd, "embd", 128, "gpt: embedding width")
	flag.IntVar(&g.Seq, "seq", 64, "gpt: sequence length")
	flag.IntVar(&g.Vocab, "vocab", 256, "gpt: vocabulary")
	gptBatch := flag.Int("gpt-batch", 16, "gpt: batch")
	frac := flag.Float64("budget-frac", 0.3, "gpt: plan at this fraction of the way from the smaller of all-recompute and all-offload's peaks to the unlimited peak")
	flag.Parse()
	if *model != "mlp" && *model != "gpt" {
		log.Fatalf("-model %q: mlp or gpt", *model)
	}
	if *model == "gpt" {
		if err := g.Validate(); err != nil {
			log.Fatal(err)
		}
	}

	var p *meta.Profile
	var err error
	if *profile != "" {
		p, err = plan.LoadProfile(*profile)
	} else {
		var dev device.Device
		if dev, err = device.Open("cpu", device.Options{}); err == nil {
			p, err = plan.Calibrate(dev, plan.CalibrateOptions{Width: *width, Batch: *batch, Seconds: 1, HostIsDevice: true}) // the CPU device
			dev.Close()
		}
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("profile: %s: matmul %.1f GFLOP/s, elementwise %.1f GB/s, link %.1f/%.1f GB/s, disk %.1f/%.1f GB/s\n",
		p.Name, p.MatmulFLOPS/1e9, p.MemoryBytesPerSec/1e9, p.D2HBytesPerSec/1e9, p.H2DBytesPerSec/1e9,
		p.DiskWriteBytesPerSec/1e9, p.DiskReadBytesPerSec/1e9)
	if *model == "gpt" {
		runGPT(p, g, *gptBatch, *rounds, *steps, *frac)
		return
	}

	cfg := demo.DefaultConfig("meta")
	mlpSizes := models.Sizes{"layers": float64(*layers), "width": float64(*width), "batch": float64(*batch)}
	cfg.Sizes, cfg.Steps = mlpSizes, 1
	cfg.DiskDir = os.TempDir()
	cfg.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, p), nil }
	predicted, err := demo.Execute(cfg)
	if err != nil {
		log.Fatal(err)
	}

	measured := map[string][]float64{}
	for r := 0; r < *rounds; r++ {
		c := demo.DefaultConfig("cpu")
		c.Sizes, c.Steps = mlpSizes, *steps
		res, err := demo.Execute(c)
		if err != nil {
			log.Fatal(err)
		}
		for _, run := range res.Runs {
			measured[run.Mode] = append(measured[run.Mode], run.StepSecondsAll...)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tpredicted s\tmeasured s (median)\tmeasured range\terror\t")
	for _, run := range predicted.Runs {
		m := measured[run.Mode]
		slices.Sort(m)
		med := m[len(m)/2]
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.3f–%.3f\t%+.1f%%\t\n", run.Mode, run.StepSeconds, med, m[0], m[len(m)-1],
			100*(run.StepSeconds-med)/med)
	}
	tw.Flush()
}
