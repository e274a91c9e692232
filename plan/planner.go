// Package plan answers, before any GPU is rented, whether a model fits a
// device at a batch size, with which offload policy, and at what cost in
// step time. It replays training steps on the meta device — exact memory,
// predicted time from a hardware profile — and searches placements of the
// saved activations (keep on the device, host memory, disk) and whether the
// optimizer updates inside backward, for the fastest plan within a memory
// budget.
package plan

import (
	"fmt"
	"math"
	"os"
	"strings"

	"ferry/device"
	"ferry/device/meta"
	"ferry/internal/demo"
	"ferry/offload"
)

// Model is the model planned for: the origin model's shape (L layers of
// Linear(Width)+ReLU at batch Batch, MSE loss, SGD).
type Model struct {
	Layers, Width, Batch int
}

func (m Model) String() string {
	return fmt.Sprintf("%d × (Linear(%d, %d) + ReLU), batch %d", m.Layers, m.Width, m.Width, m.Batch)
}

// Options is what to plan.
type Options struct {
	Model   Model
	Budget  int64 // device memory the step may use at its peak
	Profile *meta.Profile
	// HostBudget bounds host memory for offloaded tensors; 0 means
	// unlimited.
	HostBudget int64
	// NoDisk forbids the disk tier.
	NoDisk bool
	// Offload is the offloader's configuration the plan assumes (its
	// Policy is what the plan chooses); zero means offload.DefaultConfig.
	Offload *offload.Config
}

// Placement is one layer's choice in a plan.
type Placement struct {
	Layer string            `json:"layer"`
	Where offload.Placement `json:"placement"`
}

// Outcome is a step replayed on the meta device.
type Outcome struct {
	PeakBytes     int64   `json:"peak_bytes"`      // device, whole step
	HostPeakBytes int64   `json:"host_peak_bytes"` // host allocator
	StepSeconds   float64 `json:"step_seconds"`    // predicted
	StallSeconds  float64 `json:"stall_seconds"`   // predicted
	ToHostBytes   int64   `json:"to_host_bytes"`
	ToDiskBytes   int64   `json:"to_disk_bytes"`
}

// Plan is the planner's answer.
type Plan struct {
	Model               Model       `json:"model"`
	Profile             string      `json:"profile"`
	Budget              int64       `json:"budget_bytes"`
	Fits                bool        `json:"fits"`
	OptimizerInBackward bool        `json:"optimizer_in_backward"`
	Layers              []Placement `json:"layers"`
	Predicted           Outcome     `json:"predicted"`
	// Unlimited is the step with no offloading and memory to spare.
	Unlimited Outcome `json:"unlimited"`
	// Slowdown is Predicted.StepSeconds / Unlimited.StepSeconds.
	Slowdown float64 `json:"slowdown"`
	// ShortBy is, when nothing fits, how far the smallest plan is over the
	// budget; Why and Suggestions say why and what would fit.
	ShortBy     int64    `json:"short_by_bytes,omitempty"`
	Why         string   `json:"why,omitempty"`
	Suggestions []string `json:"suggestions,omitempty"`
	Evaluated   int      `json:"plans_evaluated"`
}

// Policy returns the plan as an offload policy (with the optimizer
// setting), to save with Save and replay with `ferry demo --policy`.
func (p *Plan) Policy() *offload.Policy {
	pol := &offload.Policy{Version: 1, Default: offload.Keep, Layers: map[string]offload.Placement{},
		OptimizerInBackward: p.OptimizerInBackward}
	for _, l := range p.Layers {
		pol.Layers[l.Layer] = l.Where
	}
	pol.Comment = fmt.Sprintf("ferry plan: %s, budget %s on %s: predicted peak %s, step %.4g s (%.2f × unlimited)",
		p.Model, device.FormatBytes(p.Budget), p.Profile, device.FormatBytes(p.Predicted.PeakBytes), p.Predicted.StepSeconds, p.Slowdown)
	return pol
}

// candidate is a point of the search: where each layer's output goes and
// when the optimizer runs.
type candidate struct {
	where       []offload.Placement // per layer
	inBackward  bool
	outcome     Outcome
	evaluated   bool
	feasible    bool
	description string
}

func (c *candidate) key() string {
	var b strings.Builder
	for _, w := range c.where {
		b.WriteByte("akhd"[w])
	}
	if c.inBackward {
		b.WriteString("+ib")
	}
	return b.String()
}

// planner evaluates candidates, remembering what it has seen.
type planner struct {
	opts    Options
	seen    map[string]*candidate
	diskDir string
}

// MaxLayers bounds Model.Layers: a deeper model is refused up front rather
// than planned for many minutes.
const MaxLayers = 400

// Make searches for the fastest plan that fits opts.Budget.
func Make(opts Options) (*Plan, error) {
	if opts.Profile == nil {
		return nil, fmt.Errorf("plan: a hardware profile is needed (built in: %s)", strings.Join(Profiles(), ", "))
	}
	if err := opts.Profile.Validate(); err != nil {
		return nil, err
	}
	m := opts.Model
	if m.Layers > MaxLayers {
		return nil, fmt.Errorf("plan: %d layers is more than the %d the planner takes: it replays a step on the meta device for each candidate, "+
			"so its time grows faster than the square of the depth (300 layers take about 15 s on 2 cores)", m.Layers, MaxLayers)
	}
	if m.Layers < 1 || m.Width < 1 || m.Batch < 1 {
		return nil, fmt.Errorf("plan: layers, width and batch must be positive")
	}
	// The meta device simulates the disk tier: no file is written, so the
	// system's temporary directory serves without making one of our own
	// that a killed run could leave behind.
	pl := &planner{opts: opts, seen: map[string]*candidate{}, diskDir: os.TempDir()}

	unlimited, err := pl.eval(pl.uniform(offload.Keep), false)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Model: m, Profile: opts.Profile.Name, Budget: opts.Budget, Unlimited: unlimited.outcome}

	best, err := pl.search()
	if err != nil {
		return nil, err
	}
	plan.Evaluated = len(pl.seen)
	if best == nil {
		return pl.explainNoFit(plan)
	}
	plan.Fits = true
	plan.OptimizerInBackward = best.inBackward
	plan.Predicted = best.outcome
	plan.Slowdown = best.outcome.StepSeconds / unlimited.outcome.StepSeconds
	for i, w := range best.where {
		plan.Layers = append(plan.Layers, Placement{Layer: layerName(i), Where: w})
	}
	return plan, nil
}

func layerName(i int) string { return fmt.Sprintf("layers.%d", i) }

func (pl *planner) uniform(w offload.Placement) []offload.Placement {
	ws := make([]offload.Placement, pl.opts.Model.Layers)
	for i := range ws {
		ws[i] = w
	}
	return ws
}

// search returns the fastest feasible candidate, or nil.
func (pl *planner) search() (*candidate, error) {
	L := pl.opts.Model.Layers
	var best *candidate
	consider := func(c *candidate) {
		if c.feasible && (best == nil || better(c, best)) {
			best = c
		}
	}
	// Family: keep the last k layers (backward needs them first), move the
	// others; fill the host tier from the latest moved layer backwards and
	// send the earliest (which backward needs last) to disk.
	tiers := []offload.Placement{offload.Host}
	if !pl.opts.NoDisk {
		tiers = append(tiers, offload.Disk)
	}
	for _, ib := range []bool{false, true} {
		for k := L; k >= 0; k-- {
			for _, onDisk := range pl.diskSplits(L - k) {
				ws := pl.uniform(offload.Keep)
				for i := 0; i < L-k; i++ {
					if i < onDisk {
						ws[i] = offload.Disk
					} else {
						ws[i] = offload.Host
					}
				}
				c, err := pl.eval(ws, ib)
				if err != nil {
					return nil, err
				}
				consider(c)
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	// Local search: change one layer at a time, or the optimizer setting,
	// while that gives a faster plan that fits.
	for improved := true; improved; {
		improved = false
		for i := 0; i < L; i++ {
			for _, w := range append([]offload.Placement{offload.Keep}, tiers...) {
				if w == best.where[i] {
					continue
				}
				ws := append([]offload.Placement(nil), best.where...)
				ws[i] = w
				c, err := pl.eval(ws, best.inBackward)
				if err != nil {
					return nil, err
				}
				if c.feasible && better(c, best) {
					best, improved = c, true
				}
			}
		}
		c, err := pl.eval(best.where, !best.inBackward)
		if err != nil {
			return nil, err
		}
		if c.feasible && better(c, best) {
			best, improved = c, true
		}
	}
	return best, nil
}

// diskSplits lists how many of n moved layers to try on disk: none when
// the host tier has no limit (host memory is faster), else the fewest that
// keep the host tier within its budget, give or take one.
func (pl *planner) diskSplits(n int) []int {
	if pl.opts.NoDisk || pl.opts.HostBudget == 0 || n == 0 {
		return []int{0}
	}
	act := int64(pl.opts.Model.Batch) * int64(pl.opts.Model.Width) * 4
	onHost := int(pl.opts.HostBudget / act)
	need := max(0, n-onHost)
	var s []int
	for _, d := range []int{need - 1, need, need + 1, need + 2, n} {
		if d >= 0 && d <= n && !contains(s, d) {
			s = append(s, d)
		}
	}
	return s
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// better orders candidates: faster first; at equal time, less disk
// traffic, less traffic in all, then the optimizer after backward (the
// ordinary loop).
func better(a, b *candidate) bool {
	const eps = 1e-12
	if math.Abs(a.outcome.StepSeconds-b.outcome.StepSeconds) > eps*math.Max(1, b.outcome.StepSeconds) {
		return a.outcome.StepSeconds < b.outcome.StepSeconds
	}
	if a.outcome.ToDiskBytes != b.outcome.ToDiskBytes { // disk is the slower, wearing tier
		return a.outcome.ToDiskBytes < b.outcome.ToDiskBytes
	}
	ta := a.outcome.ToHostBytes + a.outcome.ToDiskBytes
	tb := b.outcome.ToHostBytes + b.outcome.ToDiskBytes
	if ta != tb {
		return ta < tb
	}
	if a.inBackward != b.inBackward {
		return !a.inBackward
	}
	return a.key() < b.key()
}

// eval replays one step of the candidate on the meta device.
func (pl *planner) eval(where []offload.Placement, inBackward bool) (*candidate, error) {
	c := &candidate{where: where, inBackward: inBackward}
	if old, ok := pl.seen[c.key()]; ok {
		return old, nil
	}
	out, err := Replay(pl.opts.Model, pl.opts.Profile, c.policy(), pl.offloadConfig(), pl.diskDir)
	if err != nil {
		return nil, err
	}
	c.outcome, c.evaluated = out, true
	c.feasible = out.PeakBytes <= pl.opts.Budget &&
		(pl.opts.HostBudget == 0 || out.HostPeakBytes <= pl.opts.HostBudget)
	pl.seen[c.key()] = c
	return c, nil
}

func (pl *planner) offloadConfig() offload.Config {
	if pl.opts.Offload != nil {
		return *pl.opts.Offload
	}
	return offload.DefaultConfig()
}

func (c *candidate) policy() *offload.Policy {
	p := &offload.Policy{Version: 1, Default: offload.Keep, Layers: map[string]offload.Placement{}, OptimizerInBackward: c.inBackward}
	for i, w := range c.where {
		p.Layers[layerName(i)] = w
	}
	return p
}

// Replay runs one training step of model under policy on a meta device with
// profile and returns what it used and took.
func Replay(m Model, profile *meta.Profile, policy *offload.Policy, oc offload.Config, diskDir string) (Outcome, error) {
	cfg := demo.DefaultConfig("meta")
	cfg.Layers, cfg.Width, cfg.Batch, cfg.Steps = m.Layers, m.Width, m.Batch, 1
	cfg.SkipWarmup = true // the meta device's figures do not change from step to step
	cfg.Offload = oc
	cfg.DiskDir = diskDir
	cfg.Policy = policy.Place
	cfg.OptimizerInBackward = policy.OptimizerInBackward
	cfg.Modes = []string{demo.None}
	if policy.Default != offload.Keep || len(policy.Rules) > 0 {
		cfg.Modes = []string{demo.Offload}
	}
	for _, w := range policy.Layers {
		if w != offload.Keep {
			cfg.Modes = []string{demo.Offload}
		}
	}
	cfg.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, profile), nil }
	res, err := demo.Execute(cfg)
	if err != nil {
		return Outcome{}, err
	}
	r := res.Runs[0]
	return Outcome{PeakBytes: r.PeakStepBytes, HostPeakBytes: r.HostPeakBytes, StepSeconds: r.StepSeconds,
		StallSeconds: r.StallSeconds, ToHostBytes: r.ToHostBytes, ToDiskBytes: r.ToDiskBytes}, nil
}

// explainNoFit fills in why nothing fits and what would.
func (pl *planner) explainNoFit(p *Plan) (*Plan, error) {
	// The smallest plan: everything moved, optimizer in backward.
	tier := offload.Host
	if !pl.opts.NoDisk && pl.opts.HostBudget != 0 {
		tier = offload.Disk
	}
	min, err := pl.eval(pl.uniform(tier), true)
	if err != nil {
		return nil, err
	}
	p.Predicted = min.outcome
	p.ShortBy = min.outcome.PeakBytes - pl.opts.Budget
	m := pl.opts.Model
	params := int64(m.Layers) * (int64(m.Width)*int64(m.Width) + int64(m.Width)) * 4
	layer := int64(m.Batch) * int64(m.Width) * 4
	switch {
	case p.ShortBy <= 0 && pl.opts.HostBudget != 0:
		p.ShortBy = 0
		p.Why = fmt.Sprintf("the device budget could be met, but not with host memory under %s", device.FormatBytes(pl.opts.HostBudget))
		if pl.opts.NoDisk {
			p.Suggestions = append(p.Suggestions, "allow the disk tier")
		}
		p.Suggestions = append(p.Suggestions, "raise the host budget")
	case params >= pl.opts.Budget:
		p.Why = fmt.Sprintf("the parameters alone take %s, more than the budget of %s; no offload policy moves parameters",
			device.FormatBytes(params), device.FormatBytes(pl.opts.Budget))
	default:
		p.Why = fmt.Sprintf("even with every activation moved and the optimizer updating inside backward, the step peaks at %s: "+
			"the parameters (%s) plus what one layer needs at once (its input, output and gradients, %s per activation) exceed %s by %s",
			device.FormatBytes(min.outcome.PeakBytes), device.FormatBytes(params), device.FormatBytes(layer),
			device.FormatBytes(pl.opts.Budget), device.FormatBytes(p.ShortBy))
	}
	if p.ShortBy > 0 && params < pl.opts.Budget {
		if b, ok, err := pl.largestBatch(tier); err != nil {
			return nil, err
		} else if ok {
			p.Suggestions = append(p.Suggestions, fmt.Sprintf("batch %d fits (with every activation moved and the optimizer in backward)", b))
		}
	}
	if p.ShortBy > 0 {
		p.Suggestions = append(p.Suggestions, fmt.Sprintf("a device with at least %s", device.FormatBytes(min.outcome.PeakBytes)))
	}
	p.Evaluated = len(pl.seen)
	return p, nil
}

// largestBatch finds, by bisection, the largest batch whose smallest plan
// fits the budget.
func (pl *planner) largestBatch(tier offload.Placement) (int, bool, error) {
	fits := func(b int) (bool, error) {
		m := pl.opts.Model
		m.Batch = b
		sub := &planner{opts: pl.opts, seen: map[string]*candidate{}, diskDir: pl.diskDir}
		sub.opts.Model = m
		c, err := sub.eval(sub.uniform(tier), true)
		if err != nil {
			return false, err
		}
		return c.feasible, nil
	}
	lo, hi := 0, pl.opts.Model.Batch // fits(lo) (vacuously for 0), !fits(hi)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := fits(mid)
		if err != nil {
			return 0, false, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, lo > 0, nil
}

// Summary describes the plan's layers compactly: runs of equal placement.
func (p *Plan) Summary() []string {
	var out []string
	for i := 0; i < len(p.Layers); {
		j := i
		for j+1 < len(p.Layers) && p.Layers[j+1].Where == p.Layers[i].Where {
			j++
		}
		what := map[offload.Placement]string{offload.Keep: "kept on the device", offload.Host: "moved to host memory",
			offload.Disk: "moved to disk", offload.Auto: "offloader's choice"}[p.Layers[i].Where]
		if i == j {
			out = append(out, fmt.Sprintf("layer %d: %s", i, what))
		} else {
			out = append(out, fmt.Sprintf("layers %d–%d: %s", i, j, what))
		}
		i = j + 1
	}
	return out
}
