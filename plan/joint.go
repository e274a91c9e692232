package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"ferry/device"
	"ferry/offload"
)

// The whole of training memory: where the parameters, the gradients and
// the optimizer's state live is chosen with the saved tensors' placements.
//
// A State is built into the Model (the caller's StateModels makes one per
// State), so every candidate is recorded and replayed on the meta device
// like any step: its figures stay exact. The candidates go from the least
// moved to the most:
//
//	optimizer state   gradients   parameters in host memory
//	device            device      none
//	host              device      none
//	host              host        none
//	host              host        all
//	host              host        the first k (model order), k searched
//	host but the      host        as the fastest above
//	first j                       (but the first j)
//
// (parameters in host memory only when the state on the device does not
// fit; the first k only when nothing above fits; gradients' copies to the
// host one after the other, State.SerialGradCopies, where streaming every
// parameter still left saved tensors to move or recompute, or nothing
// fits at all), and for each the planner chooses the saved tensors'
// placements as Make does. The fastest that fits wins; of those that do
// not, the smallest says what nothing fitting means. Moving a parameter
// costs its bytes over the link twice a step or more (forward, backward;
// a tied weight per use), a gradient once, so fewer streamed parameters
// are faster: k is the fewest that fit, to within 1/32 of the
// parameters, found by bisection (the peak falls as k grows); where
// streaming every parameter is bound by the host's optimizer, neither
// the bisection nor the serial copies can make it faster, and neither is
// tried. With the gradients on the host and the optimizer inside
// backward, the host's updates run beside the device for every
// parameter, streamed or not (a parameter not streamed is mirrored:
// offload.StreamConfig's HostStepsBeside). Where the fastest plan updates
// every parameter on the host and neither placement was fixed by the
// caller, the first j parameters keep their state, values and gradients
// on the device, with the base plan's copies in flight: where the host is
// the busiest resource, j as keptSearch finds it (as many as bring the
// host's work down to the device's, or as fit); else, where the plan
// steps above 1.05 × its busiest resource, j = 4 (or, if that does not
// fit, 1): the first parameters' gradients (the embedding's) are the last
// backward completes and their values the first forward needs, so their
// host updates end the step; on the device they take a moment. Where none
// of that was faster, the first parameter's state stays on the host but
// visits the device for its update (State.StateVisiting): brought up at
// backward's first gradient, and, a plan of its own, at the update. And
// where the host's optimizer is still busier than both links, the
// parameters after those kept visit the device for their updates, as
// many as step fastest (visitRest: an eighth first, each try choosing its
// own copies in flight).
//
// Last, where the fastest plan brings tensors back to the device (saved
// tensors offloaded, parameters streamed), is not bound by the host, and
// steps above 1.1 × its busiest resource, waiting more than 5 % of that
// resource's time, and the caller fixed no lookahead
// (Options.Lookahead), the fastest placements try bringing them back
// further ahead (offload.Policy.Lookahead: 4, then 8, then 16, while
// that is faster), their saved tensors placed anew for the memory the
// lookahead takes.

// State is where a step keeps its training state.
type State struct {
	OptimizerState string   `json:"optimizer_state"` // device or host
	Gradients      string   `json:"gradients"`       // device or host
	ParamsOnHost   []string `json:"parameters_on_host,omitempty"`
	// StateOnDevice names parameters that keep their optimizer state, and
	// so their values and gradients, on the device, with the rest's state
	// on the host (optim.KeepOnDevice).
	StateOnDevice []string `json:"optimizer_state_on_device,omitempty"`
	// StateVisiting names parameters whose optimizer state is on the host
	// with the rest's but visits the device for their update, which runs
	// there (optim.StateVisits): their gradients stay on the device, their
	// values are streamed or not as ParamsOnHost says, and their state is
	// on the device only from its copy up to the update's end.
	StateVisiting []string `json:"optimizer_state_visiting,omitempty"`
	// StateAhead starts a visiting state's copy up that many gradients
	// before its parameter's completes (optim.StateVisitsAhead).
	StateAhead int `json:"optimizer_state_ahead,omitempty"`
	// SerialGradCopies waits for each gradient's copy to the host when
	// the next gradient completes (offload.StreamConfig): one gradient
	// fewer on the device than the copies overlapping backward, and
	// backward waits for them. Tried only when nothing else fits.
	SerialGradCopies bool `json:"serial_gradient_copies,omitempty"`
}

func (s State) String() string {
	p := "none"
	switch {
	case len(s.ParamsOnHost) == 1 && s.ParamsOnHost[0] == "*":
		p = "all"
	case len(s.ParamsOnHost) > 0:
		p = fmt.Sprintf("%d", len(s.ParamsOnHost))
	}
	serial := ""
	if s.SerialGradCopies {
		serial = ", each copied before the next"
	}
	kept := ""
	if n := len(s.StateOnDevice); n > 0 {
		kept = fmt.Sprintf(" (but the first %d parameters', their state on the device)", n)
	}
	if n := len(s.StateVisiting); n > 0 {
		when := "for it"
		if s.StateAhead > 0 {
			when = fmt.Sprintf("%d gradients ahead", s.StateAhead)
		}
		which := "the first"
		if len(s.StateOnDevice) > 0 {
			which = "the next"
		}
		kept += fmt.Sprintf(" (%s %d parameters', stepped on the device, their state brought up %s)", which, n, when)
	}
	return fmt.Sprintf("optimizer state on the %s, gradients on the %s%s, parameters in host memory: %s%s", s.OptimizerState, s.Gradients, serial, p, kept)
}

// Param is a parameter as the joint planner sees it: its name and size,
// in the model's order.
type Param struct {
	Name  string
	Bytes int64
}

// StateModels builds the Model of a step that keeps its state as s says.
type StateModels func(s State) (Model, error)

// JointOptions restrict the candidates: "" (or "auto") lets the planner
// choose, "device" or "host" fixes a placement ("host" parameters: all of
// them).
type JointOptions struct {
	OptimizerState, Gradients, Params string
}

// Tried is a candidate state and its plan's outcome, for people.
type Tried struct {
	State State `json:"state"`
	// Lookahead is the offloader's lookahead the candidate assumed (0:
	// the default, offload.DefaultConfig).
	Lookahead   int     `json:"lookahead,omitempty"`
	Fits        bool    `json:"fits"`
	PeakBytes   int64   `json:"peak_bytes"`
	StepSeconds float64 `json:"step_seconds"`
}

// MakeJoint plans the saved tensors and the training state together:
// opts as for Make (its Model, OptimizerState, Gradients and ParamsOnHost
// are set per candidate), params the model's parameters, models the
// Model of each State. It returns the chosen plan and every candidate
// tried.
func MakeJoint(opts Options, params []Param, models StateModels, jo JointOptions) (*Plan, []Tried, error) {
	for _, v := range []struct{ flag, val string }{{"optimizer state", jo.OptimizerState}, {"gradients", jo.Gradients}, {"parameters", jo.Params}} {
		switch v.val {
		case "", "auto", "device", "host":
		default:
			return nil, nil, fmt.Errorf("plan: %s %q: want auto, device or host", v.flag, v.val)
		}
	}
	allow := func(choice, v string) bool { return choice == "" || choice == "auto" || choice == v }
	if jo.OptimizerState == "device" && (jo.Gradients == "host" || jo.Params == "host") {
		return nil, nil, fmt.Errorf("plan: gradients or parameters in host memory need the optimizer's state there too (its step runs on the host)")
	}
	var tried []Tried
	var best, smallest, ref *Plan // ref: the state on the device, for Slowdown
	var plans []*Plan             // by tried's index
	triedSerial := false
	var pinned *offload.Config // the copies in flight a candidate keeps (nil: chosen per plan)
	ahead := opts.Lookahead    // the lookahead a candidate assumes (0: the offloader's)
	// pinAt has the next candidates keep on's copies in flight, unless
	// the caller's configuration pins them.
	pinAt := func(on *Plan) {
		pinned = nil
		if opts.Offload == nil && on.CopiesInFlight > 0 {
			oc := offload.DefaultConfig()
			oc.MaxInFlight = on.CopiesInFlight
			pinned = &oc
		}
	}
	try := func(s State) (*Plan, error) {
		m, err := models(s)
		if err != nil {
			return nil, err
		}
		o := opts
		if pinned != nil {
			o.Offload = pinned
		}
		o.Model, o.OptimizerState, o.Gradients, o.ParamsOnHost = m, s.OptimizerState, s.Gradients, s.ParamsOnHost
		o.SerialGradCopies, o.StateOnDevice, o.StateVisiting, o.StateAhead = s.SerialGradCopies, s.StateOnDevice, s.StateVisiting, s.StateAhead
		o.deferDescent, o.deferKeepLast = true, true
		o.Lookahead = ahead
		p, err := Make(o)
		if err != nil {
			return nil, err
		}
		p.ParamsOnHostBytes = hostBytes(params, s.ParamsOnHost)
		if s.OptimizerState == "device" && s.Gradients == "device" && len(s.ParamsOnHost) == 0 {
			ref = p
		}
		t := Tried{State: s, Lookahead: ahead, Fits: p.Fits, PeakBytes: p.Predicted.PeakBytes, StepSeconds: p.Predicted.StepSeconds}
		if !p.Fits {
			t.PeakBytes = p.Budget + p.ShortBy
		}
		tried = append(tried, t)
		plans = append(plans, p)
		if p.Fits && (best == nil || p.Predicted.StepSeconds < best.Predicted.StepSeconds) {
			best = p
		}
		return p, nil
	}
	var cands []State
	for _, os := range []string{"device", "host"} {
		for _, g := range []string{"device", "host"} {
			if !allow(jo.OptimizerState, os) || !allow(jo.Gradients, g) || g == "host" && os == "device" {
				continue
			}
			cands = append(cands, State{OptimizerState: os, Gradients: g})
		}
	}
	if allow(jo.Params, "device") && jo.Params != "host" {
		for _, s := range cands {
			if _, err := try(s); err != nil {
				return nil, nil, err
			}
		}
	}
	if allow(jo.Params, "host") && allow(jo.OptimizerState, "host") && len(params) > 0 {
		// Parameters in host memory: the most moved, so only when the
		// state above did not fit, or when asked for.
		g := "host"
		if !allow(jo.Gradients, "host") {
			g = "device"
		}
		base := State{OptimizerState: "host", Gradients: g}
		if best == nil || best != ref || jo.Params == "host" {
			// Streaming every parameter also lets the host's update run
			// beside backward: try it whenever the state leaves the device.
			fitBefore := best != nil
			all := base
			all.ParamsOnHost = []string{"*"}
			pAll, err := try(all)
			if err != nil {
				return nil, nil, err
			}
			// A host-bound plan steps at the host's pace whatever the
			// device holds: neither one gradient fewer on it nor fewer
			// parameters streamed makes it faster (keeping part of the
			// state on the device does, below), and each is a plan of
			// its own (GPT-2 XL at batch 1 on 3.6 GiB tried 6 of them,
			// 6 s of its 14 s).
			bound := pAll.Fits && hostBound(pAll)
			if g == "host" && !bound && (!pAll.Fits || pAll.Counts.Host+pAll.Counts.Disk+pAll.Counts.Recompute > 0) {
				// The saved tensors had to move or be recomputed: with
				// one gradient fewer on the device (each copied before
				// the next) fewer may have to, which can be faster than
				// hiding the copies.
				serial := all
				serial.SerialGradCopies = true
				if _, err := try(serial); err != nil {
					return nil, nil, err
				}
				triedSerial = true
			}
			if pAll.Fits && !bound && !fitBefore && jo.Params != "host" && opts.Ranks <= 1 {
				// (Across ranks, ZeRO-3 keeps all of its shards in host
				// memory or none: no bisection.)
				//
				// The fewest streamed parameters that fit: bisect over
				// the first k (1 ≤ k < n fits somewhere in between), to
				// within 1/32 of the parameters: each k is a plan of its
				// own (GPT-2 XL's 580 took 10, 15 s of its 8 GiB plan's
				// planning time, now 6).
				lo, hi := 0, len(params) // lo does not fit (none streamed), hi does
				for hi-lo > max(1, len(params)/32) {
					k := (lo + hi) / 2
					s := base
					s.ParamsOnHost = names(params[:k])
					p, err := try(s)
					if err != nil {
						return nil, nil, err
					}
					if p.Fits {
						hi = k
					} else {
						lo = k
					}
				}
			}
		}
	}
	if best != nil && best.OptimizerState == "host" && best.Gradients == "host" && len(params) > 1 &&
		opts.Ranks <= 1 && jo.OptimizerState != "host" && jo.Params != "host" { // (all on the host, if the caller says so)
		// Every parameter updated on the host, streamed or mirrored
		// (offload.StreamConfig.HostStepsBeside). Keeping the first
		// parameters' state, values and gradients on the device takes
		// their updates off the host, for their bytes and state on the
		// device (each candidate is a plan of its own, at the plan's
		// copies in flight: planning time):
		//   - where the host is the busiest resource, as many as make
		//     it no longer so, or as fit (keptSearch);
		//   - then, where that found nothing faster and the plan steps
		//     above 1.05 × its busiest resource, the first 4, or, if
		//     that does not fit, the first one: their updates (the
		//     embedding's, whose gradient backward completes last and
		//     forward needs first) end each step on the host's
		//     critical path.
		from := best
		if hostBound(best) {
			// Host-bound: the plans of the other parameter placements
			// step about as fast (the host's work is the same); the one
			// that needs the least memory for itself (its smallest
			// baseline: every parameter streamed, usually) leaves the
			// most room for state on the device. (Not the smallest
			// peak: a plan fills its budget with saved tensors.)
			for i, p := range plans {
				if t := tried[i].State; p.Fits && t.OptimizerState == "host" && t.Gradients == "host" && !t.SerialGradCopies &&
					p.Predicted.StepSeconds <= best.Predicted.StepSeconds*hostBoundAlike && leastPeak(p) < leastPeak(from) {
					from = p
				}
			}
		}
		// keep tries the first j parameters' state on the device, the
		// rest placed as on, at on's copies in flight.
		keep := func(on *Plan, j int, visiting bool, ahead int) (bool, error) {
			pinAt(on)
			s := tried[slices.Index(plans, on)].State
			if visiting {
				s.StateVisiting, s.StateAhead = names(params[:j]), ahead
			} else {
				s.StateOnDevice = names(params[:j])
			}
			p, err := try(s)
			if err != nil {
				return false, err
			}
			p.CopiesChosen = pinned != nil // the plan's choice, kept
			return p.Fits, nil
		}
		last := best
		if hostBound(best) {
			if err := keptSearch(params, from, opts.Budget, func(j int) (bool, error) { return keep(from, j, false, 0) }); err != nil {
				return nil, nil, err
			}
		}
		if best == last && last.Predicted.OverlapRatio > stateOnDeviceAbove {
			for _, j := range []int{4, 1} {
				if j >= len(params) {
					continue
				}
				fits, err := keep(from, j, false, 0)
				if err != nil {
					return nil, nil, err
				}
				if fits {
					break
				}
			}
		}
		if best == last && last.Predicted.OverlapRatio > stateOnDeviceAbove {
			// Nothing kept was faster (none fit, or the state's bytes
			// on the device took the saved tensors' room): the first
			// parameter's state visits the device for its update
			// instead, brought up as backward's first gradient
			// completes (its copy beside backward's compute), and for
			// the update itself (on the device only around it, at the
			// end of backward, where the saved tensors are gone: more
			// room for them).
			for _, ahead := range []int{len(params), 0} {
				if _, err := keep(from, 1, true, ahead); err != nil {
					return nil, nil, err
				}
			}
		}
		if b := best.Predicted.Busy; best.OptimizerState == "host" && best.Predicted.OverlapRatio > stateOnDeviceAbove &&
			b.Host > max(b.ToDevice, b.ToHost) {
			// The host is busier than the links: the updates of the
			// parameters after those kept (or visiting) move to the
			// device, their state over the links (visitRest).
			if err := visitRest(best, tried[slices.Index(plans, best)].State, params, func() { pinned = nil }, try); err != nil {
				return nil, nil, err
			}
		}
		pinned = nil
	}
	if best != nil && opts.Lookahead == 0 && !hostBound(best) && best.Predicted.OverlapRatio > lookaheadAbove &&
		best.Predicted.StallSeconds > (lookaheadAbove-1)/2*best.Predicted.Bound &&
		(best.Counts.Host+best.Counts.Disk > 0 || len(best.ParamsOnHost) > 0) {
		// Brought back further ahead (the file's comment says when), for
		// their bytes on the device earlier: the saved tensors are placed
		// anew for the memory left. The lookaheadStates fastest plans'
		// placements of the state try twice the default (one that spent
		// memory to gain time, such as serial gradient copies, may no
		// longer be the faster then), and the lookaheadKept fastest of
		// those double it again while that finds a faster plan; each at
		// its placement's copies in flight (planning time).
		from := fastestFitting(plans, lookaheadStates, 0)
		for ahead = 2 * offload.DefaultConfig().Lookahead; ahead <= maxLookaheadTried; ahead *= 2 {
			last, next := best, len(plans)
			for _, i := range from {
				pinAt(plans[i])
				p, err := try(tried[i].State)
				if err != nil {
					return nil, nil, err
				}
				p.CopiesChosen = pinned != nil // the plan's choice, kept
			}
			if best == last {
				break
			}
			from = fastestFitting(plans, lookaheadKept, next)
		}
		pinned = nil
		ahead = 0
		best.LookaheadChosen = true
	}
	if best == nil && !triedSerial && allow(jo.OptimizerState, "host") && allow(jo.Gradients, "host") {
		// Nothing fits: the least device memory there is waits for each
		// gradient's copy before the next (and streams every parameter,
		// if it may).
		s := State{OptimizerState: "host", Gradients: "host", SerialGradCopies: true}
		if allow(jo.Params, "host") && len(params) > 0 {
			s.ParamsOnHost = []string{"*"}
		}
		if _, err := try(s); err != nil {
			return nil, nil, err
		}
	}
	if best != nil {
		var err error
		if best, err = settle(plans, tried); err != nil {
			return nil, nil, err
		}
		if best != nil {
			if best, err = withKeepLast(best); err != nil {
				return nil, nil, err
			}
		}
	}
	if best != nil {
		for _, p := range plans {
			p.planner = nil // no descent: let the recordings go
		}
		if ref != nil && ref != best {
			// Slower than what the device would do with unlimited memory
			// and the state on it, not than the same state unlimited.
			best.Unlimited = ref.Unlimited
			best.Slowdown = best.Predicted.StepSeconds / ref.Unlimited.StepSeconds
		}
		return best, tried, nil
	}
	// Nothing fits: each candidate names the least budget it fits
	// (Plan.descend), and the smallest of those says what would.
	for i, p := range plans {
		if err := p.descend(); err != nil {
			return nil, nil, err
		}
		tried[i].PeakBytes = p.Budget + p.ShortBy
		if smallest == nil || p.ShortBy < smallest.ShortBy {
			smallest = p
		}
	}
	if smallest != nil {
		if err := smallest.suggestSmaller(); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range plans {
		p.planner = nil
	}
	if smallest == nil {
		return nil, tried, fmt.Errorf("plan: no state placement to try (optimizer state %q, gradients %q, parameters %q)", jo.OptimizerState, jo.Gradients, jo.Params)
	}
	return smallest, tried, nil
}

// visitAhead is how many gradients ahead of its update a state that
// visits the device for host work's sake starts up (visitRest): a chain
// of small updates, each state's copy under the compute of the few
// gradients before it. On GPT-2 124M at batch 1, 60 % of h200-pcie5, 60
// parameters visiting stepped in 0.03128 s with 4, 8 or 32, 0.03682 s
// with 0 (each copy up delaying its update), and held 103 MiB more with
// 64.
const visitAhead = 4

// visitAheadTried are the other distances ahead that visitRest tries at
// the fastest count visiting. Where the link is as busy as the host, a
// state's copy up and backward's prefetches take turns, and which
// distance interleaves them best is not monotone: GPT-2 355M at batch 1,
// 35 % of h200-pcie5, 64 visiting, stepped in 0.09494, 0.09458, 0.09719,
// 0.09697, 0.09551, 0.09516 and 0.09659 s at 1, 2, 3, 4, 6, 8 and 12
// ahead, at the same peak.
var visitAheadTried = []int{2, 8}

// visitShares are the shares of the parameters after those kept that
// visitRest sends visiting, smallest first; visitRefine bounds the tries
// between them.
var visitShares = []int{8, 4, 2, 1} // rest/8, rest/4, rest/2, all of it

// 4 found the same plans on GPT-2 124M and 355M a try later (and the
// origin model's on 15 % of h100-pcie5 0.1 % faster).
const visitRefine = 3

// visitGain is how much faster than the one before a share's plan must
// step for visitRest to go on to the next share (and, from none, to
// refine at all): each try is a plan of its own, and a gain below it is
// within what the lookahead and copies in flight move a plan by anyway
// (TinyLlama at batch 2 on 15 % of h200-pcie5: 24 visiting stepped 0.1 %
// faster than none, and five more tries, 4 s of planning, found 0.8 %;
// Llama-2-7B on 60 % of h200-pcie5: 11 visiting stepped 0.7 % faster
// than none, and at 0.005 the tries after them, 9 s of 16 s of planning,
// led to a plan 4.6 % faster, 1.606 s rather than 1.683 s, though at
// 1.278 × its busiest resource rather than 1.037 ×: planning within 15
// s is worth more).
const visitGain = 0.01

// visitRest tries, after the parameters whose state base keeps on the
// device or sends visiting, the next eighth of the rest visiting the
// device (optim.StateVisits, visitAhead ahead), then a quarter, half and
// all of it while each is faster than the one before, each a plan of its
// own: where the host's optimizer is busier than the links, each
// parameter moved takes its update off the host for 16 bytes over the
// links (AdamW's state up and down), and its state is on the device only
// around its update. More is not always faster: the states' copies up
// share the link with backward's prefetches, and an update waits for its
// state. So where one of those was faster than on (by twice visitGain),
// the count between them is refined: the midpoint of the wider gap
// beside the fastest so far, visitRefine times at most, while a gap is
// wider than one (the origin model on 35 % of h200-pcie5: 0.1134 s with
// none visiting, 0.1094 s with 6, 0.1148 s with 13; 0.1081 s with 3 or
// 4). The fastest count
// is then tried at visitAheadTried's distances ahead too, where it steps
// above lookaheadAbove × its busiest resource, and where one of those is
// faster, the count again about it at that distance (visitPattern).
//
// Each try chooses its own copies in flight (unpin; unless the caller
// pinned them): the host's work shrinks and the forward's copies off the
// device become the critical path, which more copies in flight hide
// (GPT-2 124M at batch 1, 60 % of h100-pcie5: 47 kept stepped in
// 0.04144 s at the plan's one copy in flight, and at every count; the
// next 12 visiting, in 0.04207 s at one and 0.03863 s at eight).
func visitRest(on *Plan, base State, params []Param, unpin func(), try func(State) (*Plan, error)) error {
	first := len(base.StateOnDevice) + len(base.StateVisiting)
	rest := len(params) - first
	// step[v]: the step with the next v visiting (0: on itself), +Inf
	// where that does not fit.
	// stepBy[ahead][v]: the step with the next v visiting, ahead
	// ahead; step is visitAhead's.
	stepBy := map[int]map[int]float64{visitAhead: {0: on.Predicted.StepSeconds}}
	step := stepBy[visitAhead]
	ratio := map[int]float64{0: on.Predicted.OverlapRatio} // step[v] over its busiest resource
	stepAt := func(v, ahead int) error {
		unpin()
		s := base
		s.StateVisiting, s.StateAhead = names(params[len(base.StateOnDevice):first+v]), ahead
		p, err := try(s)
		if err != nil {
			return err
		}
		if stepBy[ahead] == nil {
			stepBy[ahead] = map[int]float64{}
		}
		stepBy[ahead][v] = p.Predicted.StepSeconds
		if !p.Fits {
			stepBy[ahead][v] = math.Inf(1)
		}
		if ahead == visitAhead {
			ratio[v] = p.Predicted.OverlapRatio
		}
		return nil
	}
	visit := func(v int) error { return stepAt(v, visitAhead) }
	best := 0
	for _, share := range visitShares {
		v := rest / share
		if _, done := step[v]; v < 1 || done {
			continue
		}
		if err := visit(v); err != nil {
			return err
		}
		if step[v] >= step[best]*(1-visitGain) {
			break
		}
		best = v
	}
	// Refined only where the shares gained twice visitGain or more: a
	// smaller gain is seldom worth the refinement's tries (GPT-2 355M at
	// batch 4, 15 % of h200-pcie5: 37 visiting 1.8 % faster than none;
	// refined, 5 visiting 0.3135 s in 13.2-16.7 s of planning; not, 28
	// visiting 0.313 s in 11.8-13.4 s).
	if best > 0 && step[best] < step[0]*(1-2*visitGain) {
		if err := visitRefined(step, &best, visit); err != nil {
			return err
		}
	}
	if best == 0 || ratio[best] <= lookaheadAbove {
		return nil
	}
	// How far ahead the states start up: the fastest count visiting,
	// where it steps above lookaheadAbove × its busiest resource, tried
	// at visitAheadTried too, each with its own copies in flight (at the
	// count's, 2 ahead stepped in 0.1073 s rather than 0.09458 s in the
	// case visitAheadTried cites: the saved tensors placed anew). A plan
	// each; the fastest wins in MakeJoint.
	bestAhead := visitAhead
	for _, ahead := range visitAheadTried {
		if err := stepAt(best, ahead); err != nil {
			return err
		}
		if stepBy[ahead][best] < stepBy[bestAhead][best] {
			bestAhead = ahead
		}
	}
	if bestAhead == visitAhead {
		return nil
	}
	// The count was chosen at visitAhead; at another distance the
	// fastest count may be another (GPT-2 124M at batch 1, 35 % of
	// h200-pcie5, 8 ahead: 0.03684 s with 54 visiting, 0.03564 s with
	// 58, 0.0358 s with 60 to 64; at 4 ahead 54 was the fastest).
	return visitPattern(stepBy[bestAhead], best, max(1, rest/visitPatternShare), rest, visitPatternTries,
		func(v int) error { return stepAt(v, bestAhead) })
}

// visitPatternShare sets visitPattern's first stride (the rest over it)
// and visitPatternTries its tries, where visitRest refines the count at
// another distance ahead.
const (
	visitPatternShare = 32
	visitPatternTries = 6
)

// visitPattern searches the counts visiting about best (step: the step
// at each count tried, best the fastest) by a pattern search: the counts
// stride above and below, the first faster one taken, the stride halved
// when neither is, down to one, tries at most, within [1, most]. Where
// neither count of the first stride is faster by visitGain, it stops
// there: the count is about right (GPT-2 355M at batch 4, 15 % of
// h200-pcie5: 5 visiting, 0.3145 s; 14 and 9, 0.3147 and 0.3146 s; four
// more tries, 5 s of planning, found 3 at 0.3145 s).
func visitPattern(step map[int]float64, best, stride, most, tries int, visit func(v int) error) error {
	first := true
	for stride >= 1 && tries > 0 {
		moved, gained := false, false
		for _, v := range []int{best + stride, best - stride} {
			if v < 1 || v > most {
				continue
			}
			if _, done := step[v]; !done {
				if tries == 0 {
					return nil
				}
				tries--
				if err := visit(v); err != nil {
					return err
				}
			}
			gained = gained || step[v] < step[best]*(1-visitGain)
			if step[v] < step[best] {
				best, moved = v, true
				break
			}
		}
		if first && !gained {
			return nil
		}
		first = false
		if !moved {
			stride /= 2
		}
	}
	return nil
}

// visitRefined refines best, the fastest count visiting among those in
// step (0: none was faster than none visiting), as visitRest says:
// visit(v) adds step[v].
func visitRefined(step map[int]float64, best *int, visit func(v int) error) error {
	for range visitRefine {
		b := *best
		if b == 0 {
			return nil // nothing visiting was faster
		}
		left, right := 0, b // the nearest counts tried beside b (right: none above)
		for v := range step {
			if v < b && v > left {
				left = v
			}
			if v > b && (right == b || v < right) {
				right = v
			}
		}
		v := (left + b) / 2
		if right-b > b-left {
			v = (b + right) / 2
		}
		if _, done := step[v]; done || v == b {
			return nil // no gap wider than one
		}
		if err := visit(v); err != nil {
			return err
		}
		if step[v] < step[b] {
			*best = v
		}
	}
	return nil
}

// settleSteps is how many steps MakeJoint replays the plan it chooses
// for before it returns it: as many as `ferry demo` runs by default (a
// warm-up step and five timed). The planner's replays run two or three
// (replaySteps), and the caching allocator may settle later: GPT-2 124M
// at batch 1 on 35 % of h100-pcie5, with 16 copies in flight and 36
// parameters' state visiting, peaked 512 KiB higher from its fourth step
// on than in its second and third.
const settleSteps = 6

// settle replays the fastest plan that fits for settleSteps steps and
// returns it with the peaks of that replay, or, where that no longer fits
// the budgets, marks it as not fitting and tries the next fastest; nil
// where none still fits.
func settle(plans []*Plan, tried []Tried) (*Plan, error) {
	for _, i := range fittingByStep(plans, 0) {
		p := plans[i]
		if p.settle == nil {
			return p, nil
		}
		out, fits, err := p.settle(settleSteps)
		if err != nil {
			return nil, err
		}
		tried[i].PeakBytes = out.PeakBytes
		if fits {
			return p, nil
		}
		p.Fits, tried[i].Fits = false, false
		p.ShortBy = max(0, out.PeakBytes-p.Budget)
	}
	return nil, nil
}

// withKeepLast returns p with planner.keepLast's placements
// (Plan.keepLast) where they kept something and their settling replay
// still fits, else p.
func withKeepLast(p *Plan) (*Plan, error) {
	if p.keepLast == nil {
		return p, nil
	}
	q, err := p.keepLast()
	if err != nil || q == p {
		return p, err
	}
	if _, fits, err := q.settle(settleSteps); err != nil || !fits {
		return p, err
	}
	q.CopiesChosen = p.CopiesChosen // MakeJoint's, kept
	return q, nil
}

// fittingByStep returns the indexes of the plans that fit among
// plans[from:], fastest first (in plans' order between equals).
func fittingByStep(plans []*Plan, from int) []int {
	var fit []int
	for i := from; i < len(plans); i++ {
		if plans[i].Fits {
			fit = append(fit, i)
		}
	}
	slices.SortStableFunc(fit, func(a, b int) int {
		return cmp.Compare(plans[a].Predicted.StepSeconds, plans[b].Predicted.StepSeconds)
	})
	return fit
}

// fastestFitting returns the indexes of the n fastest plans that fit
// among plans[from:], fastest first, one of each placement of the
// state, where each count of visiting state, brought up ahead or not, is
// a placement of its own: a longer lookahead moves them apart (GPT-2
// 355M at batch 4 on 15 % of h200-pcie5: the embedding's state brought up
// for its update stepped in 0.3273 s and the first 37 parameters' state,
// brought up ahead, in 0.3279 s, at the default lookahead; at 4, 0.3291 s
// and 0.3172 s). Where the n are all variants of one placement of the
// parameters, gradients and kept state, the fastest plan of another is
// added: a longer lookahead holds more on the device, and is then not
// tried on one placement's memory only.
func fastestFitting(plans []*Plan, n, from int) []int {
	fit := fittingByStep(plans, from)
	memory := func(p *Plan) string {
		return fmt.Sprint(p.OptimizerState, p.Gradients, p.ParamsOnHost, p.StateOnDevice, p.SerialGradCopies)
	}
	var out []int
	seen, memories := map[string]bool{}, map[string]bool{}
	for _, i := range fit {
		p := plans[i]
		placement := fmt.Sprint(memory(p), len(p.StateVisiting), p.StateAhead > 0)
		if !seen[placement] && len(out) < n {
			seen[placement], memories[memory(p)] = true, true
			out = append(out, i)
		}
	}
	if len(out) > 1 && len(memories) == 1 {
		for _, i := range fit {
			if !memories[memory(plans[i])] {
				return append(out, i)
			}
		}
	}
	return out
}

// hostBound says the host's optimizer is p's busiest resource.
func hostBound(p *Plan) bool {
	b := p.Predicted.Busy
	return b.Host > 0 && b.Host >= b.Max()
}

// leastPeak is the least device memory p's state placement takes: the
// smaller of its all-recompute and all-offload peaks, or its own.
func leastPeak(p *Plan) int64 {
	least := p.Predicted.PeakBytes
	for _, bl := range []Baseline{p.AllRecompute, p.AllOffload} {
		if bl.Outcome.PeakBytes > 0 {
			least = min(least, bl.Outcome.PeakBytes)
		}
	}
	return least
}

// keptSearch tries keeping the first j parameters' optimizer state (and
// values and gradients) on the device, for a plan best whose busiest
// resource is the host: the host's work falls about in proportion to the
// parameters' bytes kept. The aim is the fewest that leave the host no
// busier than the device's busiest resource (keptHostShare; more only
// take memory from the saved tensors). The first tried is the most of
// those the budget surely holds: each kept parameter taking 3 × its
// bytes (its values and, for AdamW, two state slots), the saved tensors
// at least best's smallest baseline (leastPeak). From there, up (doubling
// while all fit: a leaner optimizer's state takes less) or down, the
// largest j that fits, up to the aim, is found by bisection to within
// 1/32 of the parameters, in at most keptTries plans; keep tries j and
// reports whether it fits (the fastest plan tried wins in MakeJoint).
func keptSearch(params []Param, best *Plan, budget int64, keep func(j int) (bool, error)) error {
	b := best.Predicted.Busy
	if b.Host <= 0 {
		return nil
	}
	var total int64
	for _, p := range params {
		total += p.Bytes
	}
	floor := leastPeak(best)
	other := max(b.Compute, b.ToDevice, b.ToHost, b.Interconnect)
	// The bytes whose updates leave the host: enough that the host's
	// work falls to keptHostShare of the device's busiest resource.
	want := float64(total) * (1 - keptHostShare*other/b.Host)
	enough, first := 0, 0 // enough: the fewest that bring the host down; first: the most the budget surely holds
	var cum int64
	for enough < len(params)-1 && float64(cum) < want {
		cum += params[enough].Bytes
		enough++
		if 3*cum <= budget-floor {
			first = enough
		}
	}
	if first == 0 {
		return nil
	}
	// Bisection between lo (fits: best itself) and hi (taken not to fit,
	// or not needed), starting at first; while everything tried fits,
	// the next is twice the last (a leaner optimizer's state takes less
	// than 3 × its parameters).
	lo, hi := 0, enough+1
	grain := max(1, len(params)/32)
	for j, tries := first, 0; tries < keptTries && hi-lo > grain; tries++ {
		fits, err := keep(j)
		if err != nil {
			return err
		}
		if fits {
			lo = j
		} else {
			hi = j
		}
		if j = (lo + hi) / 2; fits && hi == enough+1 {
			j = min(enough, 2*lo)
		}
		if j == lo {
			break
		}
	}
	return nil
}

// keptHostShare is the share of the device's busiest resource that
// keptSearch aims to leave the host. Below 1 takes memory from the saved
// tensors for little: GPT-2 XL at batch 1 on 14.4 GiB (h200-pcie5)
// keeps 403 parameters' state at 1 and steps in 0.2919 s, 431 at 0.85
// and steps in 0.3116 s, its saved tensors moving more.
const keptHostShare = 1.0

// keptTries bounds the plans keptSearch makes.
const keptTries = 5

// hostBoundAlike is how much slower than the fastest a host-bound plan
// may step and still be the base of keptSearch, for its smaller peak.
const hostBoundAlike = 1.02

// maxLookaheadTried is the largest lookahead MakeJoint tries: the
// lookaheads it doubles through are 4, 8 and 16 (TinyLlama at 2 GiB on
// h200-pcie5, every state placement planned at one lookahead: 0.969 s a
// step at the default 2, 0.847 s at 4, 0.835 s at 8, 0.858 s at 12).
const maxLookaheadTried = 16

// lookaheadStates is how many state placements try a longer lookahead,
// lookaheadKept how many of them go on to the next: at most 2 + 1 + 1
// plans (each a plan's planning time: GPT-2 XL's take 1.5 to 2.5 s each).
const lookaheadStates, lookaheadKept = 2, 1

// lookaheadAbove is how far above its busiest resource a plan must step,
// and half as far its stalls reach, before MakeJoint tries it with a
// longer lookahead: each try is a plan of its own (GPT-2 XL at batch 4 on
// 5.92 GiB of h200-pcie5, 1.061 ×, planned in 17 s with the tries, 10 s
// without, for a step 1 % faster), and the plans within 1.1 × are within
// the quality asked for.
const lookaheadAbove = 1.10

// stateOnDeviceAbove is how far above its busiest resource a plan that
// streams every parameter and updates them on the host must step before
// MakeJoint tries keeping the first parameters' state on the device
// (each try is a plan of its own).
const stateOnDeviceAbove = 1.05

func names(ps []Param) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// hostBytes is the size of the parameters named ("*": all).
func hostBytes(params []Param, named []string) int64 {
	var n int64
	all := len(named) == 1 && named[0] == "*"
	for _, p := range params {
		if all || slices.Contains(named, p.Name) {
			n += p.Bytes
		}
	}
	return n
}

// DescribeTried lists the candidates tried, one a line, for people.
func DescribeTried(ts []Tried) string {
	var b strings.Builder
	for _, t := range ts {
		fit := "fits"
		if !t.Fits {
			fit = "does not fit"
		}
		ahead := ""
		if t.Lookahead > 0 {
			ahead = fmt.Sprintf(", lookahead %d", t.Lookahead)
		}
		fmt.Fprintf(&b, "  %s%s: peak %s, step %.4g s, %s\n", t.State, ahead, device.FormatBytes(t.PeakBytes), t.StepSeconds, fit)
	}
	return b.String()
}
