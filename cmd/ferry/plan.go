package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/offload"
	"ferry/plan"
)

func init() {
	register(command{name: "plan", summary: "choose keep / host / disk / recompute for every saved tensor under a memory budget, at the least predicted step time", setup: setupPlan})
}

func setupPlan(fs *flag.FlagSet) func(io.Writer, bool) error {
	sizes := defineSizeFlags(fs, demo.Origin, nil, nil)
	var budget, hostBudget byteSize
	fs.Var(&budget, "budget", "device memory the step may use at its peak (e.g. 20GiB); required")
	fs.Var(&hostBudget, "host-budget", "host memory for offloaded tensors (default: unlimited)")
	profile := fs.String("profile", "h200-pcie5", "hardware profile: "+strings.Join(plan.Profiles(), ", ")+", or a JSON file from ferry calibrate --save")
	noDisk := fs.Bool("no-disk", false, "do not use the disk tier")
	out := fs.String("out", "", "write the policy file here (for ferry demo/train --policy); without it nothing is written")
	ranks := fs.Int("ranks", 1, "plan one rank of data-parallel training over this many ranks (the rank holding the most sharded state)")
	optState := fs.String("optimizer-state", "auto", "where the optimizer keeps its state and steps: device; host (its state then takes no device memory); or auto: the planner chooses (the policy records it)")
	grads := fs.String("gradients", "auto", "where gradients go as backward completes them: device; host (needs the optimizer's state on the host); or auto: the planner chooses")
	params := fs.String("parameters", "auto", "where parameters live between uses: device; host (all of them streamed to the device around their uses; with --ranks, ZeRO-3's shards); or auto: the planner chooses, streaming the fewest that fit")
	precision := fs.String("precision", "fp32", precisionUsage)
	optimizer := defineOptimizerFlag(fs, "")
	inFlight := fs.String("copies-in-flight", "auto", "copies off the device in flight at once that the plan assumes (1 to 64), or auto: the planner chooses per plan; the policy records it")
	lookahead := fs.String("lookahead", "auto", "offloaded tensors backward brings back ahead of their use, and parameter uses streamed ahead, that the plan assumes (1 to 64), or auto: the planner chooses where the step waits for the link; the policy records it")
	zero := fs.String("zero", "auto", "with --ranks above 1, the ZeRO stage: 0 every rank holds the whole optimizer state and gradients, 1 its share of the optimizer state, 2 of the gradients too, 3 of the parameters too (ZeRO-3); or auto: the planner plans each and takes the fastest that fits (the policy records it)")
	return func(w io.Writer, asJSON bool) error {
		if budget <= 0 {
			return fmt.Errorf("--budget is required (for example --budget 20GiB)")
		}
		if *ranks < 1 || *ranks > maxRanks {
			return fmt.Errorf("--ranks must be in [1, %d], got %d", maxRanks, *ranks)
		}
		set := setFlags(fs)
		if *ranks == 1 && set["zero"] && *zero != "auto" {
			return fmt.Errorf("--zero shares the state among --ranks, and --ranks 1 has nothing to share it with: drop --zero, or give --ranks N")
		}
		if set["host-budget"] && hostBudget == 0 {
			return fmt.Errorf("--host-budget 0 would be read as no limit at all: give a positive size, or leave the flag out for no limit")
		}
		if *out != "" {
			if err := checkOutputFile("--out", *out, false); err != nil {
				return err
			}
		}
		stages := []int{0} // the ZeRO stages planned: the fastest that fits wins
		switch *zero {
		case "auto":
			if *ranks > 1 {
				stages = []int{0, 1, 2, 3}
			}
		case "0", "1", "2", "3":
			stages = []int{int((*zero)[0] - '0')}
		default:
			return fmt.Errorf("--zero %q: want 0, 1, 2, 3 or auto", *zero)
		}
		for _, v := range []struct{ flag, val string }{{"optimizer-state", *optState}, {"gradients", *grads}, {"parameters", *params}} {
			if v.val != "device" && v.val != "host" && v.val != "auto" {
				return fmt.Errorf("--%s %q: want device, host or auto", v.flag, v.val)
			}
		}
		var offCfg *offload.Config // nil: the planner chooses the copies in flight
		if *inFlight != "auto" {
			n, err := strconv.Atoi(*inFlight)
			if err != nil || n < 1 || n > offload.MaxCopiesInFlight {
				return fmt.Errorf("--copies-in-flight %q: want auto or a count in [1, %d]", *inFlight, offload.MaxCopiesInFlight)
			}
			oc := offload.DefaultConfig()
			oc.MaxInFlight = n
			offCfg = &oc
		}
		ahead := 0 // chosen
		if *lookahead != "auto" {
			n, err := strconv.Atoi(*lookahead)
			if err != nil || n < 1 || n > offload.MaxLookahead {
				return fmt.Errorf("--lookahead %q: want auto or a count in [1, %d]", *lookahead, offload.MaxLookahead)
			}
			ahead = n
		}
		jo := plan.JointOptions{OptimizerState: *optState, Gradients: *grads, Params: *params}
		if *ranks > 1 {
			if err := rankStateError(*ranks, fmt.Sprintf("--ranks %d", *ranks), slices.Contains(stages, 3), *optState != "device",
				*grads == "host", *params == "host"); err != nil {
				return err // the rule train shares (ranks.go)
			}
			// Each rank's share of the optimizer's state may live on the
			// host (ZeRO-Offload's placement); gradients stay on the
			// device (landing in host memory under ZeRO-3 with the state
			// there), and so do parameters but ZeRO-3's shards (below).
			jo = plan.JointOptions{OptimizerState: *optState, Gradients: "device", Params: "device"}
		}
		if *optState == "device" && (*grads == "host" || *params == "host") {
			return fmt.Errorf("--gradients host and --parameters host need the optimizer's state on the host: drop --optimizer-state device")
		}
		cfg := demo.DefaultConfig("meta")
		var err error
		if cfg.Precision, err = parsePrecision(*precision); err != nil {
			return err
		}
		if *optimizer != "" {
			if err := checkOptimizer(*optimizer); err != nil {
				return err
			}
		}
		cfg.Optimizer = *optimizer
		f, err := sizes.family()
		if err != nil {
			return err
		}
		if cfg.Sizes, err = sizes.sizes(f, "meta"); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		cfg.Family = f
		if l, ok := cfg.Sizes["layers"]; ok && l > plan.MaxLayers {
			return fmt.Errorf("plan: %g layers is more than the %d the planner takes", l, plan.MaxLayers)
		}
		prof, err := plan.LoadProfile(*profile)
		if err != nil {
			return err
		}
		modelParams, err := demo.PlanParams(cfg)
		if err != nil {
			return err
		}
		var p *plan.Plan
		var tried []plan.Tried
		var zeroTried []*plan.Plan
		for _, shard := range stages {
			j := jo
			if *ranks > 1 && shard == 3 {
				j.Params = *params // the shards may live in host memory (ZeRO-3 offload)
			} else if *ranks > 1 && (*params == "host" || *grads == "host") {
				continue // only ZeRO-3's
			}
			q, t, err := plan.MakeJoint(plan.Options{Budget: int64(budget), HostBudget: int64(hostBudget), Profile: prof, NoDisk: *noDisk,
				Offload: offCfg, Lookahead: ahead, Ranks: *ranks, Shard: shard, Precision: offload.PrecisionName(cfg.Precision)}, modelParams, demo.StateModels(cfg), j)
			if err != nil {
				return err
			}
			zeroTried = append(zeroTried, q)
			if p == nil || betterStage(q, p) {
				p, tried = q, t
			}
		}
		if !p.Fits && *ranks == 1 && (*optState != "auto" || *grads != "auto" || *params != "auto") {
			// Would the planner's own choice of the state fit? Say so.
			ap, _, err := plan.MakeJoint(plan.Options{Budget: int64(budget), HostBudget: int64(hostBudget), Profile: prof, NoDisk: *noDisk,
				Offload: offCfg, Lookahead: ahead, Precision: offload.PrecisionName(cfg.Precision)}, modelParams, demo.StateModels(cfg), plan.JointOptions{})
			if err == nil && ap.Fits {
				flags := "--optimizer-state " + ap.OptimizerState + " --gradients " + ap.Gradients
				if len(ap.ParamsOnHost) > 0 {
					flags += " --parameters host"
				}
				p.Suggestions = append(p.Suggestions, fmt.Sprintf("%s (%s: peak %s, step %.4g s predicted)", flags,
					plan.State{OptimizerState: ap.OptimizerState, Gradients: ap.Gradients, ParamsOnHost: ap.ParamsOnHost},
					device.FormatBytes(ap.Predicted.PeakBytes), ap.Predicted.StepSeconds))
			}
		}
		cfg.OptimizerState, cfg.GradsOnHost, cfg.ParamsOnHost = p.OptimizerState, p.Gradients == "host", p.ParamsOnHost
		cfg.StateOnDevice, cfg.StateVisiting, cfg.StateAhead = p.StateOnDevice, p.StateVisiting, p.StateAhead
		cfg.SerialGradCopies = p.SerialGradCopies
		chose := ""
		if len(tried) > 1 {
			chose = "training state placements tried (the fastest that fits wins):\n" + plan.DescribeTried(tried)
		}
		if len(zeroTried) > 1 {
			chose += "ZeRO stages tried (the fastest that fits wins):\n" + describeStages(zeroTried)
		}
		written := ""
		if p.Fits && *out != "" {
			pol := p.Policy()
			pol.Model, pol.Sizes, pol.Optimizer = f.Name(), cfg.Sizes, demo.OptimizerName(cfg)
			pol.HostPeakBytes = p.Predicted.HostPeakBytes
			if err := pol.Save(*out); err != nil {
				return err
			}
			written = *out
		}
		replay := ""
		if written != "" && *ranks == 1 { // ferry demo replays one process
			replay = replayCommand(cfg, *profile, written, p.Counts.Disk > 0)
		}
		if asJSON {
			if err := writeJSON(w, planJSON(p, demo.OptimizerName(cfg), written, replay, tried, zeroTried)); err != nil {
				return err
			}
		} else {
			printPlan(w, p, replay)
			if chose != "" {
				fmt.Fprint(w, chose)
			}
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

// maxRanks bounds plan --ranks: more data-parallel ranks than any job runs.
const maxRanks = 1 << 16

// replayCommand is the ferry demo command that replays the plan on meta.
func replayCommand(cfg demo.Config, profile, file string, disk bool) string {
	c := "ferry demo --device meta --profile " + profile + " " + sizeArgs(cfg.Family, cfg.Sizes)
	if cfg.Optimizer != "" {
		c += " --optimizer " + cfg.Optimizer
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

// betterStage says whether plan q of one ZeRO stage is preferable to p
// of another: it fits where p does not, or both fit and it is faster, or
// as fast with a lower peak; where neither fits, it comes closer.
func betterStage(q, p *plan.Plan) bool {
	switch {
	case q.Fits != p.Fits:
		return q.Fits
	case !q.Fits:
		return q.Predicted.PeakBytes < p.Predicted.PeakBytes
	}
	return q.Predicted.StepSeconds < p.Predicted.StepSeconds ||
		q.Predicted.StepSeconds == p.Predicted.StepSeconds && q.Predicted.PeakBytes < p.Predicted.PeakBytes
}

// describeStages is a line per ZeRO stage planned.
func describeStages(ps []*plan.Plan) string {
	var b strings.Builder
	for _, q := range ps {
		fits := "does not fit"
		if q.Fits {
			fits = "fits"
		}
		fmt.Fprintf(&b, "  ZeRO-%d: peak %s, step %.4g s (interconnect %.4g s), %s\n", q.Shard, device.FormatBytes(q.Predicted.PeakBytes),
			q.Predicted.StepSeconds, q.Predicted.Busy.Interconnect, fits)
	}
	return b.String()
}

// stageJSON is one ZeRO stage's plan in plan --json's zero_stages_tried.
type stageJSON struct {
	Zero               int     `json:"zero_stage"`
	Fits               bool    `json:"fits"`
	PeakBytes          int64   `json:"predicted_peak_bytes"`
	StepSeconds        float64 `json:"predicted_step_seconds"`
	InterconnectSecond float64 `json:"interconnect_seconds"`
}

func planJSON(p *plan.Plan, optimizer, written, replay string, tried []plan.Tried, stages []*plan.Plan) any {
	var st []stageJSON
	if len(stages) > 1 {
		for _, q := range stages {
			st = append(st, stageJSON{q.Shard, q.Fits, q.Predicted.PeakBytes, q.Predicted.StepSeconds, q.Predicted.Busy.Interconnect})
		}
	}
	return struct {
		*plan.Plan
		PredictedPeakBytes   int64        `json:"predicted_peak_bytes"`
		PredictedStepSeconds float64      `json:"predicted_step_seconds"`
		AllRecompute         figures      `json:"all_recompute"`
		AllOffload           figures      `json:"all_offload"`
		Optimizer            string       `json:"optimizer"`
		PolicyFile           string       `json:"policy_file,omitempty"`
		Replay               string       `json:"replay_command,omitempty"`
		Tried                []plan.Tried `json:"state_placements_tried,omitempty"`
		Stages               []stageJSON  `json:"zero_stages_tried,omitempty"`
	}{p, p.Predicted.PeakBytes, p.Predicted.StepSeconds, baselineJSON(p.AllRecompute), baselineJSON(p.AllOffload), optimizer, written, replay, tried, st}
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
	if p.Ranks > 1 {
		fmt.Fprintf(w, " per rank")
	}
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
		if p.CopiesInFlight > 0 {
			how := "--copies-in-flight"
			if p.CopiesChosen {
				how = "chosen for this plan; --copies-in-flight N pins it"
			}
			fmt.Fprintf(w, "  at most %d copies off the device in flight at once (%s)\n", p.CopiesInFlight, how)
		}
		if p.KeptLast > 0 {
			fmt.Fprintf(w, "  the last %d saved tensors of forward kept on the device, where the placements tried below moved them off (faster, and still fits)\n", p.KeptLast)
		}
	}
	if p.Lookahead > 0 && (p.Counts.Host+p.Counts.Disk > 0 || len(p.ParamsOnHost) > 0) {
		how := "--lookahead N sets it"
		if p.LookaheadChosen {
			how = "chosen for this plan; --lookahead N pins it"
		}
		fmt.Fprintf(w, "  backward brings offloaded tensors back %d ahead of their use, and streamed parameters %d uses ahead (%s)\n", p.Lookahead, p.Lookahead, how)
	}
	switch {
	case p.OptimizerInBackward && p.Ranks > 1:
		fmt.Fprintln(w, "  each rank's shards step on the host beside the device as their mean gradients land, the first layers' first; each parameter's next gather waits for its shard's step")
	case p.OptimizerInBackward:
		fmt.Fprintln(w, "  the optimizer updates each parameter inside backward and frees its gradient (optim.InBackward)")
	}
	switch {
	case p.OptimizerState == "host" && len(p.StateOnDevice) > 0:
		fmt.Fprintf(w, "  the optimizer keeps its state on the host and steps there (--optimizer-state host), but for the first %d parameters (%s), which keep theirs, their values and gradients on the device and step there, in backward\n",
			len(p.StateOnDevice), shortList(p.StateOnDevice))
	case p.OptimizerState == "host" && len(p.StateVisiting) == 0:
		fmt.Fprintln(w, "  the optimizer keeps its state on the host and steps there (--optimizer-state host): no optimizer state on the device")
	}
	if p.OptimizerState == "host" && len(p.StateVisiting) > 0 {
		which := "the first"
		if len(p.StateOnDevice) > 0 {
			which = "the next"
		} else {
			fmt.Fprintln(w, "  the optimizer keeps its state on the host and steps there (--optimizer-state host)")
		}
		fmt.Fprintf(w, "  %s %d parameters (%s) step on the device, in backward, their state brought up from the host %s and sent back after (optimizer_state_visiting)\n",
			which, len(p.StateVisiting), shortList(p.StateVisiting), aheadWords(p.StateAhead))
	}
	if p.Gradients == "host" && p.Ranks > 1 {
		fmt.Fprintln(w, "  each rank's share of the gradients lands in host memory after its reduce-scatter (ZeRO-3 with the state on the host)")
	} else if p.Gradients == "host" {
		fmt.Fprintln(w, "  gradients go to host memory as backward completes them (--gradients host)")
		if p.SerialGradCopies {
			fmt.Fprintln(w, "  each gradient's copy to the host finishes before the next gradient is complete: the least device memory, but backward waits for the copies")
		}
	}
	if n := len(p.ParamsOnHost); n > 0 {
		what := fmt.Sprintf("%d parameters", n)
		if n == 1 && p.ParamsOnHost[0] == "*" {
			what = "every parameter"
		}
		if p.Ranks > 1 {
			fmt.Fprintf(w, "  each rank's shards of the parameters in host memory, gathered to the device around their uses (--parameters host: ZeRO-3 offload)\n")
		} else {
			fmt.Fprintf(w, "  %s (%s) in host memory, streamed to the device around their uses (--parameters host)\n", what, device.FormatBytes(p.ParamsOnHostBytes))
		}
	}
	fmt.Fprintf(w, "predicted: peak %s of %s · step %.4g s, %.3f × unlimited · stall %.4g s · %s to host, %s to disk per step\n",
		device.FormatBytes(p.Predicted.PeakBytes), device.FormatBytes(p.Budget), p.Predicted.StepSeconds, p.Slowdown,
		p.Predicted.StallSeconds, device.FormatBytes(p.Predicted.ToHostBytes), device.FormatBytes(p.Predicted.ToDiskBytes))
	if b := p.Predicted.Busy; p.Predicted.Bound > 0 {
		ic := ""
		if b.Interconnect > 0 {
			ic = fmt.Sprintf(", interconnect %.4g s", b.Interconnect)
		}
		fmt.Fprintf(w, "overlap: step %.3f × the busiest resource (compute %.4g s, to device %.4g s, to host %.4g s, host %.4g s%s)\n",
			p.Predicted.OverlapRatio, b.Compute, b.ToDevice, b.ToHost, b.Host, ic)
	}
	fmt.Fprintf(w, "(cost model: peak %s, step %.4g s; %d steps replayed on the meta device)\n",
		device.FormatBytes(p.ModelPeakBytes), p.ModelStepSeconds, p.Replays)
	if p.Granularity > 0 {
		fmt.Fprintf(w, "(the search was bounded: its choice is exact within %s; a plan it skipped holds at most that much less on the device)\n",
			device.FormatBytes(p.Granularity))
	}
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

// shortList is names for people: all of up to four, else the first three
// and the last.
func shortList(names []string) string {
	if len(names) > 4 {
		names = append(slices.Clip(names[:3]), "… "+names[len(names)-1])
	}
	return strings.Join(names, ", ")
}

// aheadWords says when a visiting optimizer state comes up to the device
// (optim.StateVisitsAhead), for people.
func aheadWords(ahead int) string {
	if ahead == 0 {
		return "for the update"
	}
	return fmt.Sprintf("%d gradients ahead of its update", ahead)
}
