// Package plan answers, before any GPU is rented, whether a model fits a
// device at a batch size, how, and at what cost in step time. It records
// one training step of any model on the meta device — every tensor saved
// for backward, with its size, where it was saved and when backward uses
// it; the memory and compute time of every block — and chooses, under a
// device memory budget (and optionally a host budget), for each saved
// tensor whether it stays on the device, goes to host memory or to disk,
// and for each checkpointable block whether it is recomputed, with the
// optimizer updating after or inside backward: the choice with the least
// predicted step time, exactly, for the cost model described in
// docs/plan.md. The plan's figures are those of replaying it on the meta
// device, so a replay gives them to the byte.
//
// plan depends on the tensor layer, the devices and the offloader only;
// the models it plans for come from above (Model).
package plan

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/offload"
)

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
	// MinBytes: smaller saved storages always stay on the device; 0 means
	// the larger of 1 KiB and 1/1024 of the largest saved storage.
	MinBytes int64
	// Offload is the offloader's configuration the plan assumes (its
	// Policy is what the plan chooses). Nil means offload.DefaultConfig,
	// with the copies in flight chosen per plan among copiesInFlight and
	// recorded in the policy (offload.Policy.CopiesInFlight); a config
	// given pins its MaxInFlight.
	Offload *offload.Config
	// Lookahead, if positive, is the offloader's lookahead the plan
	// assumes (offload.Config.Lookahead, and the streamed parameters'
	// prefetch), in place of Offload's: recorded in the policy
	// (offload.Policy.Lookahead). MakeJoint chooses it.
	Lookahead int
	// Ranks, above 1, plans one rank of data-parallel training over
	// Ranks ranks (the rank with the largest share of sharded state),
	// with Shard's ZeRO stage (train.Config.Shard): 0 every rank holds
	// the whole optimizer state and gradients; 1 its share of the
	// optimizer state; 2 of the gradients as well; 3 of the parameters
	// too (with the state on the host, its shards may be in host memory:
	// ParamsOnHost "*"). The Model must be a RankModel. The optimizer
	// never runs inside backward then (a rank must average gradients
	// first), except at ZeRO-3 with the state on the host, where each
	// shard steps beside the device once its mean gradient has landed.
	Ranks int
	Shard int
	// OptimizerState says where the Model's optimizer keeps its state,
	// "device" ("" too) or "host" (optim.OnHost), as the Model builds it:
	// the planner records it in the plan and its policy, so that a run
	// applies it too.
	OptimizerState string
	// Gradients ("device", "" too, or "host") and ParamsOnHost (parameter
	// names, "*": all) say where the Model's step keeps the gradients and
	// which parameters it streams from host memory (offload.Streamer), as
	// the Model builds it: recorded in the plan and its policy. MakeJoint
	// chooses them.
	Gradients    string
	ParamsOnHost []string
	// StateOnDevice names parameters that keep their optimizer state on
	// the device with the rest's on the host (optim.KeepOnDevice), as the
	// Model builds it: recorded in the plan and its policy.
	StateOnDevice []string
	// StateVisiting names parameters whose optimizer state is on the host
	// with the rest's but steps on the device (optim.StateVisits), as the
	// Model builds it: recorded in the plan and its policy.
	StateVisiting []string
	// StateAhead: optim.StateVisitsAhead, as the Model builds it; recorded
	// in the plan and its policy.
	StateAhead int
	// SerialGradCopies: the step waits for each gradient's copy to the
	// host when the next gradient completes (offload.StreamConfig), as the
	// Model builds it; recorded in the plan and its policy.
	SerialGradCopies bool
	// Precision says the precision the Model's step runs in, "fp32" (""
	// too) or "bf16", as the Model builds it: recorded in the plan and its
	// policy, which a run must then match.
	Precision string

	// deferDescent: where nothing fits, name the smallest plans' peak
	// and leave the descent to the least budget (planner.leastBudget) to
	// Plan.descend; MakeJoint descends only when no candidate fits.
	deferDescent bool
	// deferKeepLast: leave keepLast to Plan.keepLast. MakeJoint's
	// candidates defer it, and it runs on the settled plan alone (a
	// candidate made faster by it can lead the joint search elsewhere,
	// to a slower plan).
	deferKeepLast bool
}

// Outcome is a step replayed on the meta device.
type Outcome struct {
	PeakBytes     int64   `json:"peak_bytes"`      // device, whole step
	HostPeakBytes int64   `json:"host_peak_bytes"` // host allocator
	StepSeconds   float64 `json:"step_seconds"`    // predicted
	StallSeconds  float64 `json:"stall_seconds"`   // predicted
	ToHostBytes   int64   `json:"to_host_bytes"`
	ToDiskBytes   int64   `json:"to_disk_bytes"`
	// Busy is the time the step's work keeps each resource busy (compute,
	// the link each way, the host's cores): a step that overlaps them
	// perfectly takes the largest, Bound, and OverlapRatio is StepSeconds
	// over it.
	Busy         meta.Busy `json:"busy_seconds"`
	Bound        float64   `json:"bound_seconds"`
	OverlapRatio float64   `json:"step_over_bound"`
}

// Counts are a plan's saved storages by placement; Recompute counts those
// dropped by recomputed segments, Segments the segments recomputed.
type Counts struct {
	Keep      int `json:"keep"`
	Host      int `json:"host"`
	Disk      int `json:"disk"`
	Recompute int `json:"recompute"`
	Segments  int `json:"recomputed_segments"`
}

// Baseline is a fixed policy the plan is compared with.
type Baseline struct {
	Outcome
	Fits                bool   `json:"fits"`
	OptimizerInBackward bool   `json:"optimizer_in_backward"`
	Counts              Counts `json:"placements"`

	choice []option
}

// Plan is the planner's answer.
type Plan struct {
	Model               string `json:"model"`
	Ranks               int    `json:"ranks,omitempty"`
	Shard               int    `json:"zero_stage,omitempty"`
	Profile             string `json:"profile"`
	Budget              int64  `json:"budget_bytes"`
	HostBudget          int64  `json:"host_budget_bytes,omitempty"`
	Fits                bool   `json:"fits"`
	KeepsEverything     bool   `json:"keeps_everything"`
	OptimizerInBackward bool   `json:"optimizer_in_backward"`
	OptimizerState      string `json:"optimizer_state"` // device or host
	Gradients           string `json:"gradients"`       // device or host
	// ParamsOnHost names the parameters in host memory ("*": all);
	// ParamsOnHostBytes is their size.
	ParamsOnHost      []string `json:"parameters_on_host,omitempty"`
	ParamsOnHostBytes int64    `json:"parameters_on_host_bytes,omitempty"`
	// StateOnDevice names the parameters whose optimizer state stays on
	// the device with the rest's on the host.
	StateOnDevice []string `json:"optimizer_state_on_device,omitempty"`
	// StateVisiting names the parameters whose optimizer state is on the
	// host but visits the device for each update.
	StateVisiting []string `json:"optimizer_state_visiting,omitempty"`
	// StateAhead: how many gradients before its parameter's a visiting
	// state starts up.
	StateAhead int `json:"optimizer_state_ahead,omitempty"`
	// SerialGradCopies: each gradient's copy to the host is waited for
	// when the next gradient completes (the fewest on the device).
	SerialGradCopies bool `json:"serial_gradient_copies,omitempty"`
	// CopiesInFlight is how many copies off the device the plan lets be
	// in flight at once (offload.Config.MaxInFlight), as its policy
	// records; CopiesChosen says the planner chose it (Options.Offload
	// nil) among copiesInFlight.
	CopiesInFlight int  `json:"copies_in_flight,omitempty"`
	CopiesChosen   bool `json:"copies_in_flight_chosen,omitempty"`
	// Lookahead is how many offloaded tensors backward brings back ahead
	// of its need, and streamed parameters' uploads start ahead
	// (offload.Config.Lookahead), as its policy records; LookaheadChosen
	// says MakeJoint chose it among lookaheads.
	Lookahead       int  `json:"lookahead,omitempty"`
	LookaheadChosen bool `json:"lookahead_chosen,omitempty"`
	// KeptLast is how many of the last saved tensors of forward the
	// placements chosen moved off the device and keepLast kept on it.
	KeptLast  int     `json:"kept_last,omitempty"`
	Precision string  `json:"precision"` // fp32 or bf16
	Counts    Counts  `json:"placements"`
	Predicted Outcome `json:"predicted"`
	// ModelPeakBytes and ModelStepSeconds are the cost model's figures
	// for the plan; Predicted is its replay on the meta device.
	ModelPeakBytes   int64   `json:"model_peak_bytes"`
	ModelStepSeconds float64 `json:"model_step_seconds"`
	// Unlimited is the step with nothing moved or recomputed.
	Unlimited    Outcome  `json:"unlimited"`
	AllRecompute Baseline `json:"all_recompute"`
	AllOffload   Baseline `json:"all_offload"`
	Slowdown     float64  `json:"slowdown"` // Predicted.StepSeconds / Unlimited.StepSeconds
	// ShortBy is, when nothing fits, how far the smallest plan is over the
	// budget; Why and Suggestions say why and what would fit.
	ShortBy     int64    `json:"short_by_bytes,omitempty"`
	Why         string   `json:"why,omitempty"`
	Suggestions []string `json:"suggestions,omitempty"`
	Segments    []string `json:"recomputed,omitempty"`
	Replays     int      `json:"replays"` // steps run on the meta device
	// Granularity is, where the search bounded its work (see
	// docs/plan.md, "Exact up to a bound"), how coarse its choice was: a
	// plan it did not consider holds at most this many bytes less on the
	// device than one it did. 0: the cost model's choice is exact.
	Granularity int64 `json:"granularity_bytes,omitempty"`

	policy *offload.Policy
	info   offload.ModelInfo
	// settle, set where the plan fits, replays its policy for steps
	// steps and, where that still fits the budgets, makes the plan's
	// predicted peaks that replay's (the most any step but the first
	// used) and says so; MakeJoint settles the plan it chooses.
	settle func(steps int) (Outcome, bool, error)
	// keepLast, set where the plan fits and Options.deferKeepLast,
	// returns the plan with planner.keepLast's placements (settled
	// anew), or the plan itself where that kept nothing.
	keepLast func() (*Plan, error)
	// planner, where nothing fits and the descent was deferred, is kept
	// for Plan.descend.
	planner *planner
}

// descend, for a plan that does not fit and whose descent to the least
// budget was deferred (Options.deferDescent), explains the refusal again
// with it.
func (p *Plan) descend() error {
	pl := p.planner
	if pl == nil || p.Fits {
		return nil
	}
	p.Why, p.Suggestions = "", nil
	before := pl.replays
	_, err := pl.explainNoFit(p, true)
	p.Replays += pl.replays - before
	return err
}

// suggestSmaller is planner.suggestSmaller for a refusal whose descent
// was deferred.
func (p *Plan) suggestSmaller() error {
	pl := p.planner
	if pl == nil {
		return nil
	}
	before := pl.replays
	err := pl.suggestSmaller(p)
	p.Replays += pl.replays - before
	return err
}

// Policy is the plan as a policy file's contents (nil when nothing fits).
func (p *Plan) Policy() *offload.Policy { return p.policy }

// ModelInfo is what the planner recorded of the model's saves, to
// validate a policy against (offload.Policy.Validate).
func (p *Plan) ModelInfo() offload.ModelInfo { return p.info }

// Record runs one step of m on the meta device and returns what a policy
// for it is validated against.
func Record(m Model) (offload.ModelInfo, error) {
	rec, err := record(m, nil, false, false, 1)
	if err != nil {
		return offload.ModelInfo{}, err
	}
	return rec.modelInfo(), nil
}

// gradientsAt is where the plan's gradients end up: opts.Gradients, but
// in host memory for a rank at ZeRO-3 with the state on the host, where
// each rank's share lands (dist.FullShard).
func gradientsAt(opts Options) string {
	if opts.Ranks > 1 && opts.Shard == 3 && opts.OptimizerState == "host" {
		return "host"
	}
	return opts.Gradients
}

// inBackward lists whether the optimizer may run inside backward: not
// for a rank of several, which must average its gradients first, except
// under ZeRO-3 with the state on the host, where each shard steps beside
// the device once its mean gradient has landed (dist.FullShard's
// SetStepBeside).
func (pl *planner) inBackward() []bool {
	if pl.opts.Ranks > 1 && !(pl.opts.Shard == 3 && pl.opts.OptimizerState == "host") {
		return []bool{false}
	}
	return []bool{false, true}
}

// planner holds the recordings of one Make.
type planner struct {
	opts    Options
	plain   [2]*recording // by optimizer in backward
	rec     [2]*recording
	replays int
	// slack is how much the cost model overestimates the fixed plans'
	// (all-recompute, all-offload) peaks at most, against their replays.
	slack int64
	// options memoises each unit's options (problem.options), which do
	// not depend on the budget: by optimizer in backward and whether the
	// host budget is limited (the disk tier).
	options map[[2]bool][]unitOptions
	// replayed memoises replays by choice (replay).
	replayed map[string]Outcome
	// grain is the coarsest granularity a solve of the search needed
	// (problem.grain, problem.optionGrain): 1 while every solve was exact.
	grain int64
	// chooseInFlight: the plan's copies in flight are chosen
	// (withCopiesInFlight); inFlight is the count its replays and policy
	// use, 0 for opts.Offload's.
	chooseInFlight bool
	inFlight       int
}

// Make chooses the fastest plan that fits opts.Budget.
func Make(opts Options) (*Plan, error) {
	p, err := makePlan(opts)
	if err != nil {
		return nil, err
	}
	// Validate bounds every rate, so this does not happen; if a sum ever
	// overflows anyway, say so rather than print "step NaN s".
	for _, v := range []struct {
		what string
		s    float64
	}{{"unlimited step", p.Unlimited.StepSeconds}, {"all-recompute step", p.AllRecompute.StepSeconds},
		{"all-offload step", p.AllOffload.StepSeconds}, {"planned step", p.Predicted.StepSeconds},
		{"stall", p.Predicted.StallSeconds}, {"cost model's step", p.ModelStepSeconds}, {"slowdown", p.Slowdown}} {
		if math.IsNaN(v.s) || math.IsInf(v.s, 0) {
			return nil, fmt.Errorf("plan: profile %q predicts a %s of %v seconds; its figures are out of the cost model's range (check its rates)",
				opts.Profile.Name, v.what, v.s)
		}
	}
	return p, nil
}

func makePlan(opts Options) (*Plan, error) {
	if opts.Profile == nil {
		return nil, fmt.Errorf("plan: a hardware profile is needed (built in: %s)", strings.Join(Profiles(), ", "))
	}
	if err := opts.Profile.Validate(); err != nil {
		return nil, err
	}
	if opts.Model == nil {
		return nil, fmt.Errorf("plan: no model")
	}
	chooseInFlight := opts.Offload == nil
	if opts.Offload == nil {
		oc := offload.DefaultConfig()
		opts.Offload = &oc
	}
	if opts.Lookahead < 0 || opts.Lookahead > offload.MaxLookahead {
		return nil, fmt.Errorf("plan: lookahead %d: want 0 (the offloader's) to %d", opts.Lookahead, offload.MaxLookahead)
	}
	if opts.Lookahead > 0 {
		oc := *opts.Offload
		oc.Lookahead = opts.Lookahead
		opts.Offload = &oc
	}
	if pm, ok := opts.Model.(PrefetchModel); ok {
		// Recorded as replayed: streamed parameters prefetch as far
		// ahead as the offloader brings tensors back.
		opts.Model = pm.WithPrefetch(opts.Offload.Lookahead)
	}
	switch opts.OptimizerState {
	case "":
		opts.OptimizerState = "device"
	case "device", "host":
	default:
		return nil, fmt.Errorf("plan: optimizer state %q: want device or host", opts.OptimizerState)
	}
	switch opts.Gradients {
	case "":
		opts.Gradients = "device"
	case "device":
	case "host":
		if opts.OptimizerState != "host" {
			return nil, fmt.Errorf("plan: gradients on the host need the optimizer's state there too")
		}
	default:
		return nil, fmt.Errorf("plan: gradients %q: want device or host", opts.Gradients)
	}
	if opts.SerialGradCopies && opts.Gradients != "host" {
		return nil, fmt.Errorf("plan: serial gradient copies are for gradients on the host")
	}
	if opts.Ranks > 1 && (opts.Gradients == "host" ||
		len(opts.ParamsOnHost) > 0 && (opts.Shard != 3 || opts.OptimizerState != "host" || len(opts.ParamsOnHost) != 1 || opts.ParamsOnHost[0] != "*")) {
		return nil, fmt.Errorf("plan: across ranks, parameters in host memory are ZeRO-3's shards, all of them, with the optimizer's state on the host; gradients stay on the device (landing in host memory under ZeRO-3 with the state there)")
	}
	switch opts.Precision {
	case "":
		opts.Precision = "fp32"
	case "fp32", "bf16":
	default:
		return nil, fmt.Errorf("plan: precision %q: want fp32 or bf16", opts.Precision)
	}
	if opts.Ranks < 0 || opts.Shard < 0 || opts.Shard > 3 || (opts.Shard > 0 && opts.Ranks < 2) {
		return nil, fmt.Errorf("plan: %d ranks at ZeRO stage %d: stages 1 to 3 need 2 ranks or more, and there are only stages 0, 1, 2, 3", opts.Ranks, opts.Shard)
	}
	if opts.Ranks > 1 {
		rm, ok := opts.Model.(RankModel)
		if !ok {
			return nil, fmt.Errorf("plan: %s cannot plan one rank of several (it is not a plan.RankModel)", opts.Model)
		}
		m, err := rm.ForRanks(opts.Ranks, opts.Shard)
		if err != nil {
			return nil, err
		}
		opts.Model = m
	}
	pl := &planner{opts: opts, chooseInFlight: chooseInFlight}
	if err := pl.recordAll(); err != nil {
		return nil, err
	}
	p := &Plan{Model: opts.Model.String(), Profile: opts.Profile.Name, Budget: opts.Budget, HostBudget: opts.HostBudget,
		OptimizerState: opts.OptimizerState, Gradients: gradientsAt(opts), ParamsOnHost: opts.ParamsOnHost, StateOnDevice: opts.StateOnDevice,
		StateVisiting: opts.StateVisiting, StateAhead: opts.StateAhead, SerialGradCopies: opts.SerialGradCopies,
		Precision: opts.Precision, info: pl.plain[0].modelInfo()}
	if opts.Ranks > 1 {
		p.Ranks, p.Shard = opts.Ranks, opts.Shard
	}
	defer func() {
		p.Replays = pl.replays
		if pl.grain > 1 {
			p.Granularity = pl.grain
		}
	}()
	keepAll := pl.problem(false, opts.Budget, opts.HostBudget).allKeep()
	unl, err := pl.replay(keepAll, false)
	if err != nil {
		return nil, err
	}
	p.Unlimited = unl
	if err := pl.baselines(p); err != nil {
		return nil, err
	}
	if unl.PeakBytes <= opts.Budget {
		p.Fits, p.KeepsEverything = true, true
		p.Predicted, p.Slowdown = unl, 1
		ib := false
		if len(pl.inBackward()) > 1 && (opts.OptimizerState == "host" || opts.Gradients == "host") {
			// With the state on the host, updating inside backward runs
			// the host's steps beside the device's backward: often
			// faster, even where everything fits.
			out, err := pl.replay(keepAll, true)
			if err != nil {
				return nil, err
			}
			if pl.fits(out) && out.StepSeconds < unl.StepSeconds {
				ib, p.Predicted, p.OptimizerInBackward = true, out, true
				p.Slowdown = out.StepSeconds / unl.StepSeconds
			}
		}
		p.ModelPeakBytes, p.ModelStepSeconds = pl.plain[index(ib)].peak, pl.plain[index(ib)].seconds
		p.Counts = pl.problem(ib, opts.Budget, 0).counts(keepAll)
		p.policy = pl.policy(pl.problem(ib, opts.Budget, 0), keepAll, ib, p)
		p.CopiesInFlight, p.Lookahead = p.policy.CopiesInFlight, p.policy.Lookahead // nothing moves: not chosen
		p.settle = pl.settleFor(p)
		return p, nil
	}
	best, err := pl.choose(p)
	if err != nil {
		return nil, err
	}
	if best == nil {
		if opts.deferDescent {
			p.planner = pl
			return pl.explainNoFit(p, false)
		}
		if _, err := pl.explainNoFit(p, true); err != nil {
			return nil, err
		}
		return p, pl.suggestSmaller(p)
	}
	if pl.chooseInFlight {
		if best, err = pl.withCopiesInFlight(best); err != nil {
			return nil, err
		}
	}
	if more, err := pl.recomputeFirst(best); err != nil {
		return nil, err
	} else if more != best {
		// The copies in flight were chosen for the placements before.
		best = more
		if pl.chooseInFlight {
			if best, err = pl.withCopiesInFlight(best); err != nil {
				return nil, err
			}
		}
	}
	if opts.deferKeepLast {
		from := best
		p.keepLast = func() (*Plan, error) {
			before := pl.replays
			more, kept, err := pl.keepLast(from)
			if err != nil || kept == 0 {
				return p, err
			}
			q := *p
			q.Replays += pl.replays - before
			q.keepLast = nil
			pl.finish(&q, more, kept, unl)
			return &q, nil
		}
		pl.finish(p, best, 0, unl)
		return p, nil
	}
	best, kept, err := pl.keepLast(best)
	if err != nil {
		return nil, err
	}
	pl.finish(p, best, kept, unl)
	return p, nil
}

// finish fills in p, a plan that fits, from best, its placements and
// their replay, after keepLast kept kept of them on the device; unl is
// the step with nothing moved.
func (pl *planner) finish(p *Plan, best *replayed, kept int, unl Outcome) {
	pr := pl.problem(best.ib, pl.opts.Budget, pl.opts.HostBudget)
	model, _ := pr.evaluate(best.choice)
	p.Fits, p.OptimizerInBackward, p.Predicted = true, best.ib, best.out
	p.ModelPeakBytes, p.ModelStepSeconds = model.peak, model.seconds
	p.Slowdown = best.out.StepSeconds / unl.StepSeconds
	p.Counts = pr.counts(best.choice)
	p.policy = pl.policy(pr, best.choice, best.ib, p)
	p.CopiesInFlight, p.CopiesChosen = p.policy.CopiesInFlight, pl.chooseInFlight
	p.Lookahead = p.policy.Lookahead
	p.KeptLast = kept
	p.settle = pl.settleFor(p)
}

// choose returns the plan for p's budget: the search's, or else one of
// the smallest plans (the last resort: one may fit where the cost model
// found nothing), or nil.
func (pl *planner) choose(p *Plan) (*replayed, error) {
	best, err := pl.search(p)
	if err != nil || best != nil {
		return best, err
	}
	sm, err := pl.smallest()
	if err != nil || !pl.fits(sm.out) {
		return nil, err
	}
	return sm, nil
}

// chooseAt is choose at another device budget: the recordings, options
// and replays are shared, the fixed plans' fits are the budget's.
func (pl *planner) chooseAt(p *Plan, budget int64) (*replayed, error) {
	sub := *pl
	sub.opts.Budget = budget
	q := *p
	q.Budget = budget
	if err := sub.baselines(&q); err != nil {
		return nil, err
	}
	best, err := sub.choose(&q)
	pl.replays, pl.grain, pl.slack = sub.replays, sub.grain, sub.slack
	return best, err
}

// leastBudget is, where nothing fits, the least device budget at which
// the planner finds a plan, and that plan: below the smallest plans'
// peak a plan that moves or recomputes less of some unit can peak lower
// (its working set falls where another's rises). It descends from the
// smallest plans' peak n: a plan found at n − 1 lowers n to its peak
// (where that budget finds a plan too; else a bisection between the two
// finds where plans start to fit), until n − 1 finds none — so the budget
// it names fits and one byte less is refused, each as ferry plan would
// answer. It gives up descending after maxDescent plans, still naming a
// budget that fits.
func (pl *planner) leastBudget(p *Plan, sm *replayed) (int64, *replayed, error) {
	n, at := sm.out.PeakBytes, sm
	for range maxDescent {
		if n-1 <= pl.opts.Budget {
			return n, at, nil // the budget asked for found nothing
		}
		q, err := pl.chooseAt(p, n-1)
		if err != nil || q == nil {
			return n, at, err
		}
		// Not below the budget asked for, which found nothing: the
		// search need not be monotone in its budget.
		peak := max(q.out.PeakBytes, pl.opts.Budget)
		var r *replayed
		if peak > pl.opts.Budget {
			if r, err = pl.chooseAt(p, peak); err != nil {
				return 0, nil, err
			}
		}
		if r != nil {
			n, at = peak, r
			continue
		}
		lo, hi, hiAt := peak, n-1, q // lo finds nothing, hi finds hiAt
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			r, err := pl.chooseAt(p, mid)
			if err != nil {
				return 0, nil, err
			}
			if r != nil {
				hi, hiAt = mid, r
			} else {
				lo = mid
			}
		}
		return hi, hiAt, nil
	}
	return n, at, nil
}

// copiesInFlight are the counts of copies off the device in flight that
// a plan chooses among (offload.Config.MaxInFlight): more let a
// link-bound forward overlap its copies better, and each holds its
// tensor on the device until it lands, so a small model's plan may fit
// more on the device with fewer.
var copiesInFlight = []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32}

// withCopiesInFlight replays the chosen plan best with each count of
// copiesInFlight and returns the fastest that fits (the lower peak
// between equals; best itself where none is better), setting pl.inFlight
// to its count, which the policy then records (a plan that moves no
// saved tensor off the device keeps the default without replaying). best
// was replayed with pl.inFlight (the default where 0). The placements
// stay best's: the count is chosen for them, not jointly with them.
func (pl *planner) withCopiesInFlight(best *replayed) (*replayed, error) {
	n := pl.opts.Offload.MaxInFlight
	if pl.inFlight > 0 {
		n = pl.inFlight // best was replayed with the count chosen before
	}
	chosen, at := best, n
	if c := pl.problem(best.ib, 0, 0).counts(best.choice); c.Host+c.Disk == 0 {
		pl.inFlight = n // nothing leaves the device: every count replays alike
		return best, nil
	}
	// The counts are climbed from at: up while each is no worse than
	// the one below it, then, where none above was better, down while
	// each is better. A step does not slow with more copies in flight,
	// and a peak does not fall (GPT-2 124M at batch 1, 35 % of
	// h100-pcie5: 47.01, 44.82, 44.42, 44.3, 44.12, 43.93, 43.38 ms
	// and 43.07 ms from 1 to 16, 876 and 915 MiB at 24 and 32 where
	// the rest peak at 852), so the climb finds what replaying every
	// count found, with two or three replays rather than nine: a third
	// less time to plan Llama-2-7B on 60 % of h200-pcie5.
	i := slices.Index(copiesInFlight, at) // at is one of them: the default's 2, or a count chosen before
	climb := func(dir int) error {
		last := chosen
		for j := i + dir; j >= 0 && j < len(copiesInFlight); j += dir {
			k := copiesInFlight[j]
			pl.inFlight = k
			out, err := pl.replay(best.choice, best.ib)
			if err != nil {
				return err
			}
			c := &replayed{choice: best.choice, ib: best.ib, out: out}
			if !pl.fits(out) {
				return nil
			}
			if better(c, chosen) {
				chosen, n = c, k
			} else if dir < 0 || better(last, c) {
				return nil
			}
			last = c
		}
		return nil
	}
	if err := climb(1); err != nil {
		return nil, err
	}
	if chosen == best {
		if err := climb(-1); err != nil {
			return nil, err
		}
	}
	pl.inFlight = n
	return chosen, nil
}

// recomputeFirst tries recomputing the first segments best moves off the
// device as well, their inputs to the host, where its forward is bound by
// the link. The cost model charges a unit's copies out against that
// unit's forward alone (problem.cost), as if compute waited for each
// unit's copies before the next unit; where the copies out of forward
// together take longer than its compute, the link is the bound throughout
// and compute runs ahead of it by the copies in flight, so recomputing a
// segment instead saves its whole copy time there, not only the part its
// own forward left unhidden, and the model undervalues it. The first
// segments are tried (their recomputation runs at backward's end, when
// the link has brought everything else back), k = 1, 2, 4, … of them while
// each replay is faster and fits. (GPT-2 355M at batch 4 on 15 % of
// h100-pcie5: copies out 24 × 5.6 ms against forwards of 3.9 ms; the
// first three recomputed step in 0.3846 s rather than 0.3876 s.)
func (pl *planner) recomputeFirst(best *replayed) (*replayed, error) {
	pr := pl.problem(best.ib, pl.opts.Budget, pl.opts.HostBudget)
	var out, fwd float64
	var first []int
	for u, o := range best.choice {
		pu := &pr.units[u]
		fwd += pu.fwdSeconds
		out += float64(o.moved) / pr.p.D2HBytesPerSec
		if pu.segment && !o.recompute && o.moved > 0 {
			first = append(first, u)
		}
	}
	if out <= fwd || !recomputeFirstOn {
		return best, nil
	}
	from := best
	for k := 1; k <= len(first); k *= 2 {
		choice := slices.Clone(from.choice)
		for _, u := range first[:k] {
			o := choice[u]
			o.recompute, o.place = true, slices.Clone(o.place)
			for i, s := range pr.units[u].storages {
				if s.candidate && s.retained {
					o.place[i] = offload.Host
				}
			}
			pr.fill(u, &o)
			choice[u] = o
		}
		res, err := pl.replay(choice, best.ib)
		if err != nil {
			return nil, err
		}
		c := &replayed{choice: choice, ib: best.ib, out: res}
		if !pl.fits(res) || !better(c, best) {
			break
		}
		best = c
	}
	return best, nil
}

// keepLast tries keeping on the device what best moves off it from the
// end of forward, one saved tensor at a time, the last saved first, while
// each replay is faster and fits (keepLastMost at most), and returns the
// plan and how many it kept. Their copies out have no forward left to
// hide under, and backward wants them back first, so each is a copy out
// and back on the step's critical path; the solver keeps them only where
// the cost model finds room at its estimated peak, which can lie above
// the replay's (GPT-2 124M at batch 1 on 35 % of h100-pcie5: the
// cross-entropy's 196 MiB of probabilities went to the host; kept, the
// step fell from 0.04716 s to 0.04340 s at the same replayed peak, where
// keeping the final layer norm's and the head's inputs too overshot the
// budget). MakeJoint runs it on the plan it settles on alone
// (Options.deferKeepLast).
func (pl *planner) keepLast(best *replayed) (*replayed, int, error) {
	pr := pl.problem(best.ib, pl.opts.Budget, pl.opts.HostBudget)
	kept := 0
	for u := len(best.choice) - 1; u >= 0 && kept < keepLastMost; u-- {
		for i := len(best.choice[u].place) - 1; i >= 0 && kept < keepLastMost; i-- {
			if at := best.choice[u].place[i]; at != offload.Host && at != offload.Disk {
				continue
			}
			o := best.choice[u]
			o.place = slices.Clone(o.place)
			o.place[i] = offload.Keep
			pr.fill(u, &o)
			choice := slices.Clone(best.choice)
			choice[u] = o
			res, err := pl.replay(choice, best.ib)
			if err != nil {
				return nil, 0, err
			}
			c := &replayed{choice: choice, ib: best.ib, out: res}
			if !pl.fits(res) || !better(c, best) {
				return best, kept, nil
			}
			best = c
			kept++
		}
	}
	return best, kept, nil
}

// keepLastMost bounds how many saved tensors keepLast keeps.
const keepLastMost = 4

// recomputeFirstOn is false in a test that plans without recomputeFirst.
var recomputeFirstOn = true

// maxDescent bounds leastBudget's descent.
const maxDescent = 8

// replayed is a choice and its replay on the meta device.
type replayed struct {
	choice []option
	ib     bool
	out    Outcome
}

// fits says whether a replay meets the budgets.
func (pl *planner) fits(out Outcome) bool { return pl.opts.fits(out) }

// fits says whether a replay meets o's budgets.
func (o *Options) fits(out Outcome) bool {
	return out.PeakBytes <= o.Budget && (o.HostBudget == 0 || out.HostPeakBytes <= o.HostBudget)
}

// better says whether a replay that fits is preferable to best: faster,
// or as fast with a lower peak.
func better(c, best *replayed) bool {
	return best == nil || c.out.StepSeconds < best.out.StepSeconds ||
		c.out.StepSeconds == best.out.StepSeconds && c.out.PeakBytes < best.out.PeakBytes
}

// search returns the fastest replayed choice that fits, or nil.
//
// The cost model's memory is an estimate — conservative where the
// offloader brings fewer tensors back ahead of time than the model
// assumes, optimistic where allocation order differs — and the replay is
// the truth. So the model's budget is searched for: solve, replay; a
// replay over the budget lowers the model's budget by the overshoot, a
// replay with room to spare raises it by the room (a model that found
// nothing starts from the budget plus how far it overestimated the fixed
// plans), between the highest budget known to fit and the lowest known
// to overshoot. Every replay that fits is a candidate, and so are the
// all-recompute and all-offload plans: the plan is never slower than
// either where it fits.
func (pl *planner) search(p *Plan) (*replayed, error) {
	var best *replayed
	for _, b := range []Baseline{p.AllRecompute, p.AllOffload} {
		if b.Fits {
			c := &replayed{choice: b.choice, ib: b.OptimizerInBackward, out: b.Outcome}
			if better(c, best) {
				best = c
			}
		}
	}
	budget, host := pl.opts.Budget, pl.opts.HostBudget
	lo, hi := int64(-1), int64(-1) // model budgets known to fit, to overshoot
	// The last overshoot's cut and the model's peak then: a cut that left
	// the model's solution as it was is doubled, so that a small
	// overshoot the model cannot see does not use up the tries.
	var lastCut, lastPeak int64 = 0, -1
	for try := 0; try < 8; try++ {
		if lo >= 0 && hi >= 0 && hi-lo <= 1<<10 {
			break
		}
		var sol *solution
		solIB := false
		// The two placements of the optimizer (inside backward or
		// after it) are solved side by side: their problems share
		// nothing (each its own options' memo), and the faster is
		// taken as in order.
		ibs := pl.inBackward()
		prs := make([]*problem, len(ibs))
		for i, ib := range ibs {
			prs[i] = pl.problem(ib, budget, host)
		}
		sols, oks := make([]solution, len(ibs)), make([]bool, len(ibs))
		var wg sync.WaitGroup
		for i := range ibs {
			wg.Go(func() { sols[i], oks[i] = prs[i].solve() })
		}
		wg.Wait()
		for i, ib := range ibs {
			pl.grain = max(pl.grain, prs[i].grain, prs[i].optionGrain)
			if oks[i] && (sol == nil || sols[i].seconds < sol.seconds) {
				sol, solIB = &sols[i], ib
			}
		}
		if sol == nil {
			if try > 0 || pl.slack <= 0 {
				break
			}
			// The model found nothing; it overestimates the fixed plans'
			// peaks by up to pl.slack, so look as far above the budget.
			budget += pl.slack
			continue
		}
		out, err := pl.replay(sol.choice, solIB)
		if err != nil {
			return nil, err
		}
		over := out.PeakBytes - pl.opts.Budget
		if pl.fits(out) {
			if c := (&replayed{choice: sol.choice, ib: solIB, out: out}); better(c, best) {
				best = c
			}
			lo = max(lo, budget)
			next := budget - over // room to spare: let the model use it
			if hi >= 0 && next >= hi {
				next = lo + (hi-lo)/2
			}
			if next <= budget {
				break
			}
			budget = next
			continue
		}
		if pl.opts.HostBudget > 0 && out.HostPeakBytes > pl.opts.HostBudget {
			host -= out.HostPeakBytes - pl.opts.HostBudget
		}
		if over > 0 {
			if hi < 0 || budget < hi {
				hi = budget
			}
			cut := over
			if sol.peak == lastPeak {
				cut = max(cut, 2*lastCut)
			}
			lastCut, lastPeak = cut, sol.peak
			next := budget - cut
			if lo >= 0 && next <= lo {
				if next = lo + (hi-lo)/2; next <= lo {
					break
				}
			}
			budget = next
		}
	}
	return best, nil
}

func (pl *planner) recordAll() error {
	minBytes := pl.opts.MinBytes
	for _, ib := range pl.inBackward() {
		i := index(ib)
		var err error
		if pl.plain[i], err = record(pl.opts.Model, pl.opts.Profile, ib, false, max(minBytes, 1)); err != nil {
			return err
		}
		if minBytes == 0 {
			var largest int64
			for _, s := range pl.plain[i].storages {
				largest = max(largest, s.bytes)
			}
			minBytes = max(1<<10, largest/1024)
			if pl.plain[i], err = record(pl.opts.Model, pl.opts.Profile, ib, false, minBytes); err != nil {
				return err
			}
		}
		if pl.rec[i], err = record(pl.opts.Model, pl.opts.Profile, ib, true, minBytes); err != nil {
			return err
		}
		pl.replays += 4
		if len(pl.plain[i].units) != len(pl.rec[i].units) {
			return fmt.Errorf("plan: the model's step has %d segments when it keeps everything and %d when it recomputes them; "+
				"a step must run the same segments each time", len(pl.plain[i].units)/2, len(pl.rec[i].units)/2)
		}
	}
	return nil
}

func index(b bool) int {
	if b {
		return 1
	}
	return 0
}

// problem builds the cost model from the recordings.
func (pl *planner) problem(ib bool, budget, hostBudget int64) *problem {
	plain, rec := pl.plain[index(ib)], pl.rec[index(ib)]
	pr := &problem{base: plain.seconds, budget: budget, hostBudget: hostBudget, noDisk: pl.opts.NoDisk, p: pl.opts.Profile}
	if pl.options == nil {
		pl.options = map[[2]bool][]unitOptions{}
	}
	key := [2]bool{ib, hostBudget > 0}
	if pl.options[key] == nil {
		pl.options[key] = make([]unitOptions, len(plain.units))
	}
	pr.memo = pl.options[key]
	// Bytes resident before each unit, in each recording, to turn the
	// recompute recording's peaks into changes of the plain one's.
	var resPlain, resRec int64
	la := pl.opts.Offload.Lookahead
	var cands []*storage
	for _, s := range plain.storages {
		if s.candidate {
			cands = append(cands, s)
		}
	}
	for u, pu := range plain.units {
		ru := rec.units[u]
		x := punit{segment: pu.segment, fwdPeak: pu.fwdPeak, bwdPeak: pu.bwdPeak, hasBwd: pu.hasBwd,
			recSeconds: pu.fwdSec, fwdSeconds: pu.fwdSec, hasStorages: len(pu.storages) > 0}
		if pu.segment {
			x.recFwdChange = (ru.fwdPeak - resRec) - (pu.fwdPeak - resPlain)
			if ru.hasBwd && pu.hasBwd {
				x.recBwdChange = (ru.bwdPeak - resRec) - (pu.bwdPeak - resPlain)
			}
		}
		// The window of the copies back: from the first use of the storage
		// Lookahead candidates after the unit's last (when the offloader
		// starts bringing the unit's storages back) to the last first use
		// of one of the unit's.
		last, first, end := -1, 0.0, 0.0
		for _, s := range pu.storages {
			x.storages = append(x.storages, pstorage{bytes: s.bytes, candidate: s.candidate, retained: s.retained})
			resPlain += s.bytes
			if s.candidate && s.unpacked {
				if last < 0 || s.unpackAt < first {
					first = s.unpackAt
				}
				end = max(end, s.unpackAt)
				last = max(last, s.order)
			}
		}
		if last >= 0 {
			start := first
			if q := last + la; q < len(cands) && cands[q].unpacked {
				start = min(start, cands[q].unpackAt)
			}
			x.window = end - start
		}
		for _, s := range ru.storages {
			resRec += s.bytes
		}
		pr.units = append(pr.units, x)
	}
	return pr
}

func (pr *problem) allKeep() []option {
	c := make([]option, len(pr.units))
	for u := range c {
		c[u].place = make([]offload.Placement, len(pr.units[u].storages))
		for i := range c[u].place {
			c[u].place[i] = offload.Keep
		}
		pr.fill(u, &c[u])
	}
	return c
}

func (pr *problem) allRecompute() []option {
	c := pr.allKeep()
	for u := range c {
		if pr.units[u].segment {
			c[u].recompute = true
			pr.fill(u, &c[u])
		}
	}
	return c
}

func (pr *problem) allOffload() []option {
	c := pr.allKeep()
	for u := range c {
		for i, s := range pr.units[u].storages {
			if s.candidate {
				c[u].place[i] = offload.Host
			}
		}
		pr.fill(u, &c[u])
	}
	return c
}

func (pr *problem) counts(choice []option) Counts {
	var c Counts
	for u, o := range choice {
		if o.recompute {
			c.Segments++
		}
		for i, s := range pr.units[u].storages {
			switch {
			case o.recompute && !s.retained:
				c.Recompute++
			case o.place[i] == offload.Host:
				c.Host++
			case o.place[i] == offload.Disk:
				c.Disk++
			default:
				c.Keep++
			}
		}
	}
	return c
}

// baseline replays a fixed policy with the optimizer after and inside
// backward and returns the better: the one that fits, else the smaller.
// baselines sets p's all-recompute and all-offload plans, and whether
// they fit the planner's budget.
func (pl *planner) baselines(p *Plan) error {
	var err error
	if p.AllRecompute, err = pl.baseline((*problem).allRecompute); err != nil {
		return err
	}
	p.AllOffload, err = pl.baseline((*problem).allOffload)
	return err
}

func (pl *planner) baseline(build func(pr *problem) []option) (Baseline, error) {
	var best Baseline
	for _, ib := range pl.inBackward() {
		pr := pl.problem(ib, pl.opts.Budget, pl.opts.HostBudget)
		choice := build(pr)
		out, err := pl.replay(choice, ib)
		if err != nil {
			return Baseline{}, err
		}
		b := Baseline{Outcome: out, OptimizerInBackward: ib, Counts: pr.counts(choice), Fits: pl.fits(out), choice: choice}
		if model, _ := pr.evaluate(choice); model.peak > out.PeakBytes {
			pl.slack = max(pl.slack, model.peak-out.PeakBytes)
		}
		if !ib || b.Fits && (!best.Fits || b.StepSeconds < best.StepSeconds) || !b.Fits && !best.Fits && b.PeakBytes < best.PeakBytes {
			best = b
		}
	}
	return best, nil
}

// policy writes a choice as a policy: each candidate storage's placement
// under every name it is saved by (the first save decides, and which
// save is first changes when the unit that first saved it is recomputed),
// the recomputed segments, and their inputs' placements.
func (pl *planner) policy(pr *problem, choice []option, ib bool, p *Plan) *offload.Policy {
	rec := pl.plain[index(ib)]
	pol := &offload.Policy{Version: 2, Default: offload.Keep, OptimizerInBackward: ib}
	if pl.opts.Ranks > 1 {
		pol.Ranks, pol.Zero = pl.opts.Ranks, pl.opts.Shard
	}
	pol.CopiesInFlight = pl.inFlight
	if pol.CopiesInFlight == 0 {
		pol.CopiesInFlight = pl.opts.Offload.MaxInFlight // pinned, or not chosen yet
	}
	pol.Lookahead = pl.opts.Offload.Lookahead
	if pl.opts.OptimizerState == "host" {
		pol.OptimizerState = "host"
	}
	if gradientsAt(pl.opts) == "host" {
		pol.Gradients = "host"
		pol.SerialGradCopies = pl.opts.SerialGradCopies
	}
	pol.ParametersOnHost = pl.opts.ParamsOnHost
	pol.OptimizerStateOnDevice, pol.OptimizerStateVisiting = pl.opts.StateOnDevice, pl.opts.StateVisiting
	pol.OptimizerStateAhead = pl.opts.StateAhead
	if pl.opts.Precision == "bf16" {
		pol.Precision = "bf16"
	}
	where := map[*storage]offload.Placement{}
	for u, pu := range rec.units {
		o := choice[u]
		if o.recompute {
			pol.Recompute = append(pol.Recompute, pu.name)
			p.Segments = append(p.Segments, pu.name)
		}
		for i, s := range pu.storages {
			if !s.candidate || o.recompute && !s.retained {
				continue
			}
			where[s] = o.place[i]
			for _, k := range append([]saveKey{s.first}, s.also...) {
				pol.Tensors = append(pol.Tensors, offload.TensorPlacement{Module: k.Module, Slot: k.Slot, Op: k.Op,
					Shape: k.Shape, Bytes: s.bytes, Placement: o.place[i]})
			}
		}
	}
	for u, pu := range rec.units {
		if !choice[u].recompute {
			continue
		}
		for i, s := range pu.inputs {
			if s == nil {
				continue
			}
			if w, ok := where[s]; ok {
				slot := i
				pol.Rules = append(pol.Rules, offload.Rule{Module: pu.name, Op: "checkpoint", Slot: &slot, Placement: w})
			}
		}
	}
	pol.Comment = pl.opts.comment(p)
	return pol
}

// comment is the comment p's policy carries: what was planned, and the
// prediction.
func (o *Options) comment(p *Plan) string {
	return fmt.Sprintf("ferry plan: %s on %s, budget %s: predicted peak %s, step %.4g s (%.3f × unlimited)",
		o.Model, o.Profile.Name, device.FormatBytes(o.Budget), device.FormatBytes(p.Predicted.PeakBytes),
		p.Predicted.StepSeconds, p.Slowdown)
}

// settleFor returns Plan.settle for p, planned by pl. It holds pl's
// options, not pl: MakeJoint keeps every candidate plan to its end, and
// their planners' recordings with them took memory (TinyLlama on 2 GiB
// with a host budget planned in 256 MB resident, 170 MB without).
func (pl *planner) settleFor(p *Plan) func(steps int) (Outcome, bool, error) {
	o := pl.opts
	return func(steps int) (Outcome, bool, error) {
		p.Replays++
		out, err := replayFor(o.Model, o.Profile, p.policy, *o.Offload, steps)
		// (A plan that keeps every saved tensor fits by its device
		// peak alone, as Make decided: the host budget bounds offloaded
		// tensors.)
		if err != nil || !o.fits(out) && !(p.KeepsEverything && out.PeakBytes <= o.Budget) {
			return out, false, err
		}
		p.Predicted.PeakBytes, p.Predicted.HostPeakBytes = out.PeakBytes, out.HostPeakBytes
		p.policy.Comment = o.comment(p)
		return out, true, nil
	}
}

// replay writes choice as a policy and runs it on the meta device.
func (pl *planner) replay(choice []option, ib bool) (Outcome, error) {
	// A replay is deterministic: the same choice is replayed once.
	key := make([]byte, 0, 64)
	key = append(key, byte(pl.inFlight), byte(index(ib)))
	for _, o := range choice {
		key = append(key, byte(index(o.recompute)))
		for _, at := range o.place {
			key = append(key, byte(at))
		}
	}
	if out, ok := pl.replayed[string(key)]; ok {
		return out, nil
	}
	pol := pl.policy(pl.problem(ib, 0, 0), choice, ib, &Plan{})
	pl.replays++
	out, err := Replay(pl.opts.Model, pl.opts.Profile, pol, *pl.opts.Offload)
	if err == nil {
		if pl.replayed == nil {
			pl.replayed = map[string]Outcome{}
		}
		pl.replayed[string(key)] = out
	}
	return out, err
}

// Replay runs training steps of m under policy on a meta device with
// profile (the first allocates the optimizer's state; replaySteps says
// how many) and returns what the last took and the most any but the first
// used: the caching allocator may hand a step a whole cached block that
// the step before split, so that a step's peak can alternate by up to a
// block's rounding (a visiting optimizer state's copies up, made at the
// start of backward, did; every step must fit). `ferry demo --device
// meta --policy FILE` runs the same steps.
func Replay(m Model, profile *meta.Profile, policy *offload.Policy, oc offload.Config) (Outcome, error) {
	return replayFor(m, profile, policy, oc, replaySteps(policy))
}

// replayFor is Replay for steps steps (2 at least).
func replayFor(m Model, profile *meta.Profile, policy *offload.Policy, oc offload.Config, steps int) (Outcome, error) {
	dev := meta.New(device.Options{}, profile)
	defer dev.Close()
	oc.Lookahead = policy.Ahead(oc.Lookahead)
	if pm, ok := m.(PrefetchModel); ok {
		m = pm.WithPrefetch(oc.Lookahead) // as offload.Memory sets the streamer's
	}
	oc.Policy = policy.Place
	oc.MaxInFlight = policy.InFlight(oc.MaxInFlight)
	// The meta device simulates the disk tier: no file is written, so the
	// system's temporary directory serves without making one of our own.
	oc.DiskDir = os.TempDir()
	off, err := offload.New(dev, oc)
	if err != nil {
		return Outcome{}, err
	}
	defer off.Close()
	if sm, ok := m.(StreamsModel); ok {
		m = sm.WithStreams(off.Streams()) // as offload.Memory shares them
	}
	step, err := m.Build(dev, policy.OptimizerInBackward)
	if err != nil {
		return Outcome{}, err
	}
	defer step.Release()
	var out Outcome
	var peak, hostPeak int64
	for i := 0; i < max(2, steps); i++ {
		dev.Allocator().ResetPeak()
		dev.Host().Allocator().ResetPeak()
		before, t0, stall0, busy0 := off.Stats(), dev.Now(), dev.StallSeconds(), dev.Busy()
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.SetSegmentHooks(policy.SegmentHooks())
			tape.PushHooks(off.Hooks())
			return step.Run(tape)
		})
		if err != nil {
			return Outcome{}, fmt.Errorf("plan: replaying a policy on the meta device: %w", err)
		}
		s := off.Stats().Since(before)
		out = Outcome{PeakBytes: dev.Allocator().Stats().AllocatedBytes.Peak, HostPeakBytes: dev.Host().Allocator().Stats().AllocatedBytes.Peak,
			StepSeconds: dev.Now() - t0, StallSeconds: dev.StallSeconds() - stall0, ToHostBytes: s.BytesToHost, ToDiskBytes: s.BytesToDisk,
			Busy: dev.Busy().Sub(busy0)}
		if step.HostStateBytes != nil {
			out.HostPeakBytes += step.HostStateBytes()
		}
		if i > 0 {
			peak, hostPeak = max(peak, out.PeakBytes), max(hostPeak, out.HostPeakBytes)
			out.PeakBytes, out.HostPeakBytes = peak, hostPeak
		}
		if out.Bound = out.Busy.Max(); out.Bound > 0 {
			out.OverlapRatio = out.StepSeconds / out.Bound
		}
	}
	return out, nil
}

// replaySteps is how many steps Replay runs: two (the first allocates the
// optimizer's state), and a third
//   - where host updates run beside the device (gradients on the host,
//     updated inside backward: streamed and mirrored parameters alike,
//     offload.StreamConfig.HostStepsBeside): the first step's updates,
//     after a forward with none to wait for, are not the steady state's,
//     and the second step runs them;
//   - where the policy keeps every saved tensor (keepsEverything): the
//     device's cached blocks settle only in the third step there. GPT-2
//     XL at batch 1 peaked 491,520 bytes higher from its third step on
//     than in its second, which the planner predicted; a 4-layer GPT of
//     the same width 491,520 bytes lower. Moved or recomputed tensors
//     free and reuse blocks each step, and their second step is steady
//     (every replay of docs/plan.md's quality table).
//   - where an optimizer state visits the device (its peak may alternate,
//     Replay's comment).
func replaySteps(policy *offload.Policy) int {
	if policy.OptimizerInBackward && policy.Gradients == "host" || keepsEverything(policy) || len(policy.OptimizerStateVisiting) > 0 {
		return 3
	}
	return 2
}

// keepsEverything says policy keeps every saved tensor on the device and
// recomputes nothing.
func keepsEverything(policy *offload.Policy) bool {
	if policy.Default != offload.Keep || len(policy.Layers) > 0 || len(policy.Rules) > 0 || len(policy.Recompute) > 0 {
		return false
	}
	for _, t := range policy.Tensors {
		if t.Placement != offload.Keep {
			return false
		}
	}
	return true
}

// explainNoFit fills in why nothing fits and what would: the least
// budget that does (leastBudget) or, without descend, the smallest plans'
// peak.
func (pl *planner) explainNoFit(p *Plan, descend bool) (*Plan, error) {
	sm, err := pl.smallest()
	if err != nil {
		return nil, err
	}
	least, at := sm.out.PeakBytes, sm
	if descend && (pl.opts.HostBudget == 0 || sm.out.HostPeakBytes <= pl.opts.HostBudget) {
		if least, at, err = pl.leastBudget(p, sm); err != nil {
			return nil, err
		}
	}
	smallest := at.out
	p.Predicted = smallest
	p.ShortBy = max(0, least-pl.opts.Budget)
	params := pl.parameterBytes()
	switch {
	case p.ShortBy == 0:
		p.Why = fmt.Sprintf("the device budget can be met only with more than %s of host memory", device.FormatBytes(pl.opts.HostBudget))
		if pl.opts.NoDisk {
			p.Suggestions = append(p.Suggestions, "a disk tier (drop --no-disk)")
		}
		p.Suggestions = append(p.Suggestions, "a larger host budget")
	case params >= pl.opts.Budget:
		p.Why = fmt.Sprintf("the parameters alone take %s, more than the budget of %s, with them on the device (ferry plan's --parameters auto streams them from host memory)",
			device.FormatBytes(params), device.FormatBytes(pl.opts.Budget))
	default:
		ib := ", and the optimizer updating inside backward"
		if pl.opts.Ranks > 1 {
			ib = "" // a rank of several cannot
		}
		p.Why = fmt.Sprintf("even with every saved tensor moved off the device, every segment recomputed, or both%s, "+
			"the step peaks at %s at least, %s over the budget (parameters on the device at once: %s)", ib, device.FormatBytes(least),
			device.FormatBytes(p.ShortBy), device.FormatBytes(params))
		if least < sm.out.PeakBytes {
			c := pl.problem(at.ib, 0, 0).counts(at.choice)
			p.Why = fmt.Sprintf("the smallest plan found needs a budget of %s, %s over this one (it moves %d saved tensors and recomputes %d segments; "+
				"moving everything off the device and recomputing every segment peaks higher, at %s) (parameters on the device at once: %s)",
				device.FormatBytes(least), device.FormatBytes(p.ShortBy), c.Host+c.Disk, c.Segments, device.FormatBytes(sm.out.PeakBytes), device.FormatBytes(params))
		}
	}
	if p.ShortBy > 0 {
		if pl.opts.NoDisk && pl.opts.HostBudget > 0 {
			p.Suggestions = append(p.Suggestions, "a disk tier (drop --no-disk)")
		}
		p.Suggestions = append(p.Suggestions, fmt.Sprintf("a device with at least %s (%d bytes)", formatBytesUp(least), least))
	}
	return p, nil
}

// suggestSmaller adds to a refusal the first smaller variant of the
// model (Shrinker) whose smallest plan fits, before its last suggestion
// (the device that would fit).
func (pl *planner) suggestSmaller(p *Plan) error {
	s, ok := pl.opts.Model.(Shrinker)
	if p.Fits || p.ShortBy <= 0 || !ok || pl.parameterBytes() >= pl.opts.Budget {
		return nil
	}
	for _, v := range s.Smaller() {
		sub := &planner{opts: pl.opts}
		sub.opts.Model = v.Model
		if err := sub.recordAll(); err != nil {
			return err
		}
		sm, err := sub.smallest()
		pl.replays += sub.replays
		if err != nil {
			return err
		}
		if out := sm.out; out.PeakBytes <= pl.opts.Budget {
			at := max(0, len(p.Suggestions)-1)
			p.Suggestions = slices.Insert(p.Suggestions, at, fmt.Sprintf("%s fits (smallest plan: peak %s)", v.Change, device.FormatBytes(out.PeakBytes)))
			return nil
		}
	}
	return nil
}

// formatBytesUp writes n as device.FormatBytes does, rounded up in its
// last digit, so that the figure given as a budget holds n.
func formatBytesUp(n int64) string {
	const unit = 1024
	if n < unit {
		return device.FormatBytes(n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.2f %s", math.Ceil(f*100)/100, u)
		}
	}
	return device.FormatBytes(n)
}

// smallest replays the plans that hold least on the device — every
// candidate moved (to disk when the host budget is limited and a disk
// tier is allowed), every segment recomputed, or both, the optimizer
// inside backward — and returns the least peak of them. Recomputing and
// moving everything is not always the smallest: a recomputed segment's
// working set in backward can outweigh the bytes its saves held.
func (pl *planner) smallest() (*replayed, error) {
	var best *replayed
	ib := pl.inBackward()[len(pl.inBackward())-1]
	pr := pl.problem(ib, pl.opts.Budget, pl.opts.HostBudget)
	for i, c := range pr.smallestChoices() {
		out, err := pl.replay(c, ib)
		if err != nil {
			return nil, err
		}
		if i == 0 || out.PeakBytes < best.out.PeakBytes {
			best = &replayed{choice: c, ib: ib, out: out}
		}
	}
	return best, nil
}

// smallestChoices are the plans that hold least on the device (see
// smallest): every candidate moved and every segment recomputed, every
// candidate moved, every segment recomputed. Moves go to disk when the
// host budget is limited and a disk tier is allowed.
func (pr *problem) smallestChoices() [][]option {
	tier := offload.Host
	if !pr.noDisk && pr.hostBudget > 0 {
		tier = offload.Disk
	}
	var out [][]option
	for _, how := range []struct{ recompute, move bool }{{true, true}, {false, true}, {true, false}} {
		c := pr.allKeep()
		for u := range c {
			c[u].recompute = how.recompute && pr.units[u].segment
			for j, s := range pr.units[u].storages {
				if how.move && s.candidate {
					c[u].place[j] = tier
				}
			}
			pr.fill(u, &c[u])
		}
		out = append(out, c)
	}
	return out
}

// parameterBytes is what the plain step held before its forward: the
// parameters and the optimizer's state.
func (pl *planner) parameterBytes() int64 {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	step, err := pl.opts.Model.Build(dev, false)
	if err != nil {
		return 0
	}
	defer step.Release()
	return dev.Allocator().Allocated()
}
