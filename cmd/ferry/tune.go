package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device/cpu"
	"ferry/train"
)

func init() {
	register(command{name: "tune", summary: "time each matrix product of a model's step on pure Go and on OpenBLAS, and remember the faster per shape on this machine", setup: setupTune})
}

// tuneReport is what ferry tune prints with --json.
type tuneReport struct {
	Machine string             `json:"machine"`
	Model   string             `json:"model"`
	Shapes  []cpu.MatmulChoice `json:"shapes"`
	// Seconds of one step's products (calls × median time), all on each
	// library and as the table now chooses.
	StepGoSeconds     float64 `json:"step_go_seconds"`
	StepBLASSeconds   float64 `json:"step_openblas_seconds"`
	StepChosenSeconds float64 `json:"step_chosen_seconds"`
	// StepCheck times whole training steps with each way of choosing,
	// alternating; Kept is the one saved.
	StepCheck   []stepCheck `json:"step_check,omitempty"`
	Kept        string      `json:"kept"`
	SavedTo     string      `json:"saved_to,omitempty"`
	TableShapes int         `json:"table_shapes"` // in the saved table, earlier runs' included
}

// stepCheck is one way of choosing, timed over whole steps.
type stepCheck struct {
	Choice  string    `json:"choice"`
	Seconds float64   `json:"median_step_seconds"`
	All     []float64 `json:"step_seconds"`
}

func setupTune(fs *flag.FlagSet) func(io.Writer, bool) error {
	sizes := defineSizeFlags(fs, demo.Origin, nil, nil)
	rounds := fs.Int("rounds", 7, "timed samples per shape and library (the median counts)")
	save := fs.String("save", "", "table file to update (default: this machine's, in the user cache directory, which every ferry process reads)")
	checkRounds := fs.Int("check-rounds", 3, "rounds of whole training steps timed with the per-shape choices, all on pure Go and all on OpenBLAS; the fastest is kept (0: no check)")
	dryRun := fs.Bool("dry-run", false, "measure and print, write nothing")
	return func(out io.Writer, asJSON bool) error {
		if *rounds < 1 || *rounds > 1000 {
			return fmt.Errorf("--rounds must be in [1, 1000], got %d", *rounds)
		}
		if *dryRun && *save != "" {
			return fmt.Errorf("--dry-run writes nothing, so --save would be ignored: give one of them")
		}
		if *checkRounds < 0 || *checkRounds > 100 {
			return fmt.Errorf("--check-rounds must be in [0, 100], got %d", *checkRounds)
		}
		// The flags first: bad input is named whatever the machine has.
		f, err := sizes.family()
		if err != nil {
			return err
		}
		s, err := sizes.sizes(f, "cpu")
		if err != nil {
			return err
		}
		if lib := cpu.MatmulForced(); lib != "" {
			return fmt.Errorf("FERRY_MATMUL=%s (or SetMatmulBackend) forces one library, and the table is only read in auto mode: unset it to tune", lib)
		}
		if err := cpu.CanTuneMatmul(); err != nil {
			return err
		}
		// The default file is the one ferry reads (FERRY_MATMUL_TABLE's,
		// else this machine's in the cache directory), and this machine's
		// with FERRY_MATMUL_TABLE=off.
		path := *save
		if path == "" && !*dryRun {
			if path, _, err = cpu.MatmulTableFile(); err == nil && path == "" {
				path, err = cpu.MatmulTablePath()
			}
			if err != nil {
				return fmt.Errorf("%w, or name the table's file with --save", err)
			}
		}
		// Fail before measuring if the table there cannot be updated.
		table := &cpu.MatmulTable{Machine: cpu.MatmulMachine()}
		if path != "" && !*dryRun {
			if err := checkOutputFile("--save", path, true); err != nil {
				return err
			}
			if _, err := os.Stat(path); err == nil {
				old, err := cpu.LoadMatmulTable(path)
				switch {
				case err == nil:
					table = old
				case *save != "":
					// A file the user named that is not this machine's
					// table is not overwritten.
					return fmt.Errorf("--save: %w (remove it, or name another file)", err)
				}
			}
		}

		// No table while measuring: the step check installs its own,
		// and a file FERRY_MATMUL_TABLE names may not exist yet.
		cpu.SetMatmulTable(nil)

		// The shapes: one training step of the model, recorded. The
		// library does not change the shapes, so the step runs as auto
		// would.
		cfg := demo.DefaultConfig("cpu")
		cfg.Family, cfg.Sizes = f, s
		cfg.Modes, cfg.Steps, cfg.SkipWarmup = []string{demo.None}, 1, true
		// What is being timed goes to stderr as it starts: tuning takes
		// from seconds to minutes.
		say := func(format string, args ...any) { fmt.Fprintf(fs.Output(), "tune: "+format+"\n", args...) }
		say("recording one training step of %s", f.Name())
		stop := cpu.RecordMatmulShapes()
		_, err = demo.Execute(cfg)
		shapes, calls := stop()
		if err != nil {
			return fmt.Errorf("running a step of %s: %w", f.Name(), err)
		}
		if len(shapes) == 0 {
			return fmt.Errorf("a step of %s ran no float32 matrix product on the CPU", f.Name())
		}
		say("timing %d product shapes on pure Go and on OpenBLAS", len(shapes))
		tick := time.Now()
		choices, err := cpu.TuneMatmul(shapes, calls, cpu.TuneOptions{Rounds: *rounds, Progress: func(done, total int) {
			if time.Since(tick) > 2*time.Second || done == total {
				tick = time.Now()
				say("%d of %d shapes timed", done, total)
			}
		}})
		if err != nil {
			return err
		}
		table.Merge(choices)
		r := tuneReport{Machine: table.Machine, Model: sizeArgs(f, s), TableShapes: len(table.Shapes), Kept: "as chosen per shape (not checked)"}
		if *checkRounds > 0 {
			say("timing whole steps three ways, %d alternating rounds", *checkRounds)
			table, err = checkSteps(cfg, table, choices, *checkRounds, &r)
			if err != nil {
				return err
			}
		}
		// The table kept decided each class; report this run's shapes
		// with those decisions.
		for _, c := range choices {
			c.Library = "go"
			if onBLAS, _ := table.Lookup(c.MatmulShape); onBLAS {
				c.Library = "openblas"
			}
			r.Shapes = append(r.Shapes, c)
			w := float64(max(c.Calls, 1))
			r.StepGoSeconds += w * c.GoSeconds
			r.StepBLASSeconds += w * c.BLASSeconds
			if c.Library == "go" {
				r.StepChosenSeconds += w * c.GoSeconds
			} else {
				r.StepChosenSeconds += w * c.BLASSeconds
			}
		}
		if !*dryRun {
			if err := cpu.SaveMatmulTable(table, path); err != nil {
				return err
			}
			r.SavedTo = path
		}
		if asJSON {
			return writeJSON(out, r)
		}
		fmt.Fprintf(out, "matrix products of one step of %s\non %s\n\n", r.Model, r.Machine)
		fmt.Fprintf(out, "%-48s %6s %12s %12s  %s\n", "shape", "calls", "pure Go", "OpenBLAS", "chosen")
		for _, c := range r.Shapes {
			fmt.Fprintf(out, "%-48s %6d %12s %12s  %s\n", c.MatmulShape.String(), c.Calls, seconds(c.GoSeconds), seconds(c.BLASSeconds), c.Library)
		}
		fmt.Fprintf(out, "\na step's products, timed one shape at a time: %s all on pure Go, %s all on OpenBLAS, %s as chosen\n",
			seconds(r.StepGoSeconds), seconds(r.StepBLASSeconds), seconds(r.StepChosenSeconds))
		if len(r.StepCheck) > 0 {
			fmt.Fprintf(out, "whole steps, median of %d alternating rounds:", *checkRounds)
			for i, c := range r.StepCheck {
				sep := ","
				if i == 0 {
					sep = ""
				}
				fmt.Fprintf(out, "%s %s %s", sep, c.Choice, seconds(c.Seconds))
			}
			fmt.Fprintf(out, "\nkept: %s\n", r.Kept)
		}
		if r.SavedTo != "" {
			fmt.Fprintf(out, "saved to %s (%d shapes in all); ferry reads it at start unless FERRY_MATMUL or FERRY_MATMUL_TABLE say otherwise\n", r.SavedTo, r.TableShapes)
		} else {
			fmt.Fprintln(out, "not saved (--dry-run)")
		}
		return nil
	}
}

// checkSteps times whole training steps of cfg's model with table as
// chosen per shape and with this run's classes (those of choices) all on
// one library, alternating the order each round, and returns the table
// of the fastest, if it beats the fixed rule's library (all on it) by more
// than 2%, else the rule's. Products timed one at a time miss what they
// do to each other in a step (caches, the cores they share), and a
// choice that is not clearly faster would change bits for nothing.
func checkSteps(cfg demo.Config, table *cpu.MatmulTable, choices []cpu.MatmulChoice, rounds int, r *tuneReport) (*cpu.MatmulTable, error) {
	variants := []struct {
		name string
		t    *cpu.MatmulTable
	}{
		{"as chosen per shape", table.WithStepLibrary(choices, "")},
		{"all pure Go", table.WithStepLibrary(choices, "go")},
		{"all OpenBLAS", table.WithStepLibrary(choices, "openblas")},
	}
	prev, _, _ := cpu.MatmulTableInUse()
	defer cpu.SetMatmulTable(prev)
	times := make([][]float64, len(variants))
	cfg.Steps, cfg.SkipWarmup = 1, false
	for round := range rounds {
		for j := range variants {
			i := j
			if round%2 == 1 {
				i = len(variants) - 1 - j
			}
			cpu.SetMatmulTable(variants[i].t)
			res, err := demo.Execute(cfg)
			if err != nil {
				return nil, fmt.Errorf("timing steps %s: %w", variants[i].name, err)
			}
			times[i] = append(times[i], res.Runs[0].StepSeconds)
		}
	}
	best, rule := 0, 1
	if cpu.RuleLibrary() == "openblas" {
		rule = 2
	}
	for i := range variants {
		med := train.Median(times[i])
		r.StepCheck = append(r.StepCheck, stepCheck{Choice: variants[i].name, Seconds: med, All: times[i]})
		if med < r.StepCheck[best].Seconds {
			best = i
		}
	}
	if r.StepCheck[best].Seconds >= r.StepCheck[rule].Seconds*(1-0.02) {
		best = rule
	}
	r.Kept = variants[best].name
	if best == rule {
		r.Kept += " (the fixed rule's library here; another way must be over 2% faster to replace it)"
	}
	return variants[best].t, nil
}

// seconds is t in µs, ms or s, three or four significant digits.
func seconds(t float64) string {
	switch {
	case t < 1e-3:
		return fmt.Sprintf("%.1f µs", t*1e6)
	case t < 1:
		return fmt.Sprintf("%.3f ms", t*1e3)
	}
	return fmt.Sprintf("%.4f s", t)
}
