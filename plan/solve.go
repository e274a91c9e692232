package plan

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"ferry/device/meta"
	"ferry/offload"
)

// The cost model and its exact solution. See docs/plan.md, "How the
// planner chooses".
//
// A plan gives each unit a choice: recompute it (segments only: what it
// saves is dropped, except its retained storages) or not, and each of its
// candidate storages that is not dropped a placement: keep, host or disk.
// With S the bytes the units before u no longer hold on the device and P
// the bytes the last unit before u with saved storages moved off it
// (backward brings them back while it runs u), the model's memory is
//
//	forward of u:   fwdPeak(u) + recompute's change − S        ≤ budget
//	backward of u:  bwdPeak(u) + recompute's change − S + P    ≤ budget
//
// where the peaks are the recorded ones of the plain step. Its time is the
// plain step's, plus the forward of every recomputed segment, plus for
// each unit the transfers that do not fit under compute: the copies out
// against the unit's forward, the copies back against the backward time
// during which the offloader brings the unit's storages back.

// problem is the cost model of one recording.
type problem struct {
	units      []punit
	base       float64 // the plain step's time
	budget     int64
	hostBudget int64 // 0: unlimited
	noDisk     bool
	p          *meta.Profile
	// grain is the granularity the last front needed (maxFront), and
	// optionGrain that of the options tried (maxWork): 1 while solve is
	// exact.
	grain, optionGrain int64
	// memo, if set, holds each unit's options once listed (they depend on
	// the units, the tiers and the profile, not the budget).
	memo []unitOptions
	// sortKeys and sorted are sortStates's buffers, kept between units.
	sortKeys []stateKey
	sorted   []state
}

type punit struct {
	segment      bool
	storages     []pstorage
	hasStorages  bool
	fwdPeak      int64
	bwdPeak      int64
	hasBwd       bool
	recFwdChange int64   // recomputing changes the forward peak by this much
	recBwdChange int64   // and the backward peak by this much
	recSeconds   float64 // the segment's forward, run again in backward
	fwdSeconds   float64 // time the copies out can hide under
	window       float64 // time the copies back can hide under
}

type pstorage struct {
	bytes     int64
	candidate bool
	retained  bool
}

// option is one choice for one unit.
type option struct {
	recompute bool
	place     []offload.Placement // per storage of the unit
	host      int64
	disk      int64
	save      int64   // bytes the unit no longer holds after its forward
	moved     int64   // host + disk
	seconds   float64 // recomputation and stalls
}

// Ties in time go to less traffic, and then to host over disk: a
// vanishing cost per byte moved (1 GB: 1 µs; on disk 2 µs).
const trafficSeconds = 1e-15

func (pr *problem) cost(u int, o *option) float64 {
	pu := &pr.units[u]
	t := 0.0
	if o.recompute {
		t += pu.recSeconds
	}
	if o.moved > 0 {
		out := math.Max(float64(o.moved)/pr.p.D2HBytesPerSec, float64(o.disk)/pr.p.DiskWriteBytesPerSec)
		in := math.Max(float64(o.moved)/pr.p.H2DBytesPerSec, float64(o.disk)/pr.p.DiskReadBytesPerSec)
		t += math.Max(0, out-pu.fwdSeconds) + math.Max(0, in-pu.window)
	}
	return t + trafficSeconds*float64(o.moved+o.disk)
}

// fill computes an option's byte totals and cost from its choices.
func (pr *problem) fill(u int, o *option) {
	o.host, o.disk, o.save, o.moved = 0, 0, 0, 0
	for i, s := range pr.units[u].storages {
		switch {
		case o.recompute && !s.retained:
			o.save += s.bytes
		case o.place[i] == offload.Host:
			o.host += s.bytes
		case o.place[i] == offload.Disk:
			o.disk += s.bytes
		}
	}
	o.moved = o.host + o.disk
	o.save += o.moved
	o.seconds = pr.cost(u, o)
}

// tiers are the placements a candidate may get.
func (pr *problem) tiers() []offload.Placement {
	// Without a host budget the disk tier is never faster than host memory.
	if pr.noDisk || pr.hostBudget == 0 {
		return []offload.Placement{offload.Keep, offload.Host}
	}
	return []offload.Placement{offload.Keep, offload.Host, offload.Disk}
}

// options lists the distinct choices of unit u: one per recompute setting
// and (host, disk) byte totals, since the model depends on nothing else.
func (pr *problem) options(u int) []option {
	if pr.memo != nil && pr.memo[u].list != nil {
		pr.optionGrain = max(pr.optionGrain, pr.memo[u].grain)
		return pr.memo[u].list
	}
	out, g := pr.listOptions(u)
	if pr.memo != nil {
		pr.memo[u] = unitOptions{out, g}
	}
	pr.optionGrain = max(pr.optionGrain, g)
	return out
}

// unitOptions are a unit's options and the granularity listing them
// needed (listOptions).
type unitOptions struct {
	list  []option
	grain int64
}

// maxOptions bounds the distinct (host, disk) totals listOptions keeps
// per recompute setting while it adds a unit's storages: with three tiers
// a unit of 20 differently sized storages reaches tens of thousands.
var maxOptions = 4096 // a variable for tests

// listOptions is options without the memo, and the granularity it
// needed: 1, or where the totals outgrew maxOptions, the g of the g × g
// byte cells of (host, disk) of which it kept one total each (and always
// everything kept, everything to host and everything to disk so far).
func (pr *problem) listOptions(u int) ([]option, int64) {
	pu := &pr.units[u]
	var out []option
	grain := int64(1)
	recs := []bool{false}
	if pu.segment {
		recs = append(recs, true)
	}
	for _, rec := range recs {
		seen := map[totals][]offload.Placement{{}: make([]offload.Placement, len(pu.storages))}
		for i := range seen[totals{}] {
			seen[totals{}][i] = offload.Keep
		}
		var placed int64 // the candidates' bytes so far
		for i, s := range pu.storages {
			if !s.candidate || rec && !s.retained {
				continue
			}
			placed += s.bytes
			next := map[totals][]offload.Placement{}
			for _, t := range sortedTotals(seen) { // the first assignment to reach a total represents it
				pl := seen[t]
				for _, tier := range pr.tiers() {
					n := t
					switch tier {
					case offload.Host:
						n.host += s.bytes
					case offload.Disk:
						n.disk += s.bytes
					}
					if _, ok := next[n]; ok {
						continue
					}
					c := append([]offload.Placement(nil), pl...)
					c[i] = tier
					next[n] = c
				}
			}
			if len(next) > maxOptions && grain == 1 {
				// Totals within placed bytes on each axis fill about
				// (placed/g)²/2 cells: start near the g that fits.
				for grain < 1<<61 && (placed/grain)*(placed/grain)/2 > int64(maxOptions) {
					grain *= 2
				}
				grain = max(1, grain/2)
			}
			for len(next) > maxOptions && grain < 1<<61 {
				grain *= 2
				next = coarsen(next, grain, placed)
			}
			seen = next
		}
		for _, t := range sortedTotals(seen) {
			o := option{recompute: rec, place: seen[t]}
			pr.fill(u, &o)
			out = append(out, o)
		}
	}
	return out, grain
}

// coarsen keeps of totals the first (in sortedTotals' order) of each
// g × g cell of (host, disk), and the totals of everything kept, to the
// host and to disk (placed bytes each).
func coarsen(m map[totals][]offload.Placement, g, placed int64) map[totals][]offload.Placement {
	out := map[totals][]offload.Placement{}
	cells := map[totals]bool{}
	for _, t := range sortedTotals(m) {
		c := totals{t.host / g, t.disk / g}
		if !cells[c] || t == (totals{}) || t == (totals{host: placed}) || t == (totals{disk: placed}) {
			cells[c] = true
			out[t] = m[t]
		}
	}
	return out
}

// check applies unit u's memory constraints with S and P as above and
// returns the unit's highest point.
func (pr *problem) peak(u int, o *option, s, p int64) int64 {
	pu := &pr.units[u]
	f := pu.fwdPeak - s
	if o.recompute {
		f += pu.recFwdChange
	}
	if !pu.hasBwd {
		return f
	}
	b := pu.bwdPeak - s + p
	if o.recompute {
		b += pu.recBwdChange
	}
	return max(f, b)
}

// solution is a choice for every unit.
type solution struct {
	choice  []option
	seconds float64 // predicted by the model
	peak    int64   // predicted by the model
	host    int64
}

// evaluate runs the model over a complete choice, unit by unit.
func (pr *problem) evaluate(choice []option) (sol solution, ok bool) {
	var s, p, h int64
	sol.seconds, sol.choice = pr.base, choice
	for u := range pr.units {
		o := &choice[u]
		sol.peak = max(sol.peak, pr.peak(u, o, s, p))
		s += o.save
		h += o.host
		if pr.units[u].hasStorages {
			p = o.moved
		}
		sol.seconds += o.seconds
	}
	sol.host = h
	return sol, sol.peak <= pr.budget && (pr.hostBudget == 0 || h <= pr.hostBudget)
}

// state is a partial plan over the first units: S, P as above, host bytes
// so far, time so far.
type state struct {
	s, p, host int64
	peak       int64
	seconds    float64
	prev       int // index in the previous front
	opt        int // option of the last unit
}

// solve returns the fastest choice that fits, by dynamic programming over
// the units: after each unit it keeps every partial plan that no other
// dominates — one dominates another if it holds no more on the device
// (S at least as large, S − P at least as large), uses no more host
// memory and is no slower. Later units see a partial plan only through
// S, P and host bytes, and time adds up, so the dominated ones can never
// lead to a better plan: the result is optimal for the model.
//
// Two bounds keep it fast where that is too many (see maxFront and
// maxWork); pr.grain then says how coarse the choice became. Whatever
// they drop, the partial plans of the witnesses — the smallest plans,
// all-recompute and all-offload — are kept, so a front never empties
// while one of them fits the model: solve finds a plan no slower than any
// witness that fits.
func (pr *problem) solve() (solution, bool) {
	fronts := make([][]state, len(pr.units)+1)
	fronts[0] = []state{{prev: -1, opt: -1}}
	opts := make([][]option, len(pr.units))
	pr.grain, pr.optionGrain = 1, 1
	witnesses := pr.witnesses()
	// at[w] is witness w's state in the current front, -1 once it no
	// longer fits.
	at := make([]int, len(witnesses))
	var next []state
	// Each unit's partial plans by (S, P), or (S, P, host bytes): one map
	// each, cleared for the next unit (its buckets kept).
	seen, seenHost := map[[2]int64]int{}, map[[3]int64]int{}
	for u := range pr.units {
		opts[u] = pr.options(u)
		wopt := make([]int, len(witnesses)) // each witness's option of unit u
		for w, c := range witnesses {
			wopt[w] = slices.IndexFunc(opts[u], func(o option) bool { return sameTotals(o, c[u]) })
		}
		try := pr.thin(opts[u], wopt, maxWork/max(1, len(fronts[u])))
		next = next[:0]
		clear(seen)
		clear(seenHost)
		for si, st := range fronts[u] {
			for _, oi := range try {
				n, ok := pr.extend(u, st, si, opts[u], oi)
				if !ok {
					continue
				}
				// Only the best state of each (S, P) can matter, with a
				// host budget of each (S, P, host bytes) (at the
				// granularity the fronts need, of S, S − P and host).
				k := [2]int64{floorDiv(n.s, pr.grain), floorDiv(n.s-n.p, pr.grain)}
				kh := [3]int64{k[0], k[1], floorDiv(n.host, pr.grain)}
				i, dup := seen[k]
				if pr.hostBudget > 0 {
					i, dup = seenHost[kh]
				}
				if dup {
					if stateCmp(n, next[i]) < 0 {
						next[i] = n
					}
					continue
				}
				if pr.hostBudget > 0 {
					seenHost[kh] = len(next)
				} else {
					seen[k] = len(next)
				}
				next = append(next, n)
			}
		}
		kept := pr.prune(next)
		for w := range witnesses {
			if at[w] < 0 || wopt[w] < 0 {
				at[w] = -1
				continue
			}
			n, ok := pr.extend(u, fronts[u][at[w]], at[w], opts[u], wopt[w])
			if !ok {
				at[w] = -1
				continue
			}
			if at[w] = slices.Index(kept, n); at[w] < 0 {
				at[w] = len(kept)
				kept = append(kept, n)
			}
		}
		if len(kept) == 0 {
			return solution{}, false
		}
		fronts[u+1] = kept
	}
	last := fronts[len(pr.units)]
	best := 0
	for i, st := range last {
		if st.seconds < last[best].seconds || st.seconds == last[best].seconds && st.peak < last[best].peak {
			best = i
		}
	}
	choice := make([]option, len(pr.units))
	for u, i := len(pr.units)-1, best; u >= 0; u-- {
		st := fronts[u+1][i]
		choice[u] = opts[u][st.opt]
		i = st.prev
	}
	sol, ok := pr.evaluate(choice)
	return sol, ok
}

// extend is state st (index si of its front) followed by option oi of
// unit u, and whether that fits the budgets.
func (pr *problem) extend(u int, st state, si int, opts []option, oi int) (state, bool) {
	o := &opts[oi]
	pk := pr.peak(u, o, st.s, st.p)
	if pk > pr.budget {
		return state{}, false
	}
	n := state{s: st.s + o.save, p: st.p, host: st.host + o.host, peak: max(st.peak, pk),
		seconds: st.seconds + o.seconds, prev: si, opt: oi}
	if pr.hostBudget > 0 && n.host > pr.hostBudget {
		return state{}, false
	}
	if pr.units[u].hasStorages {
		n.p = o.moved
	}
	return n, true
}

// witnesses are the complete plans solve never loses (see solve).
func (pr *problem) witnesses() [][]option {
	return append(pr.smallestChoices(), pr.allRecompute(), pr.allOffload())
}

// sameTotals says whether two options of a unit are the same to the
// model: options are distinct by recompute and host and disk bytes.
func sameTotals(a, b option) bool {
	return a.recompute == b.recompute && a.host == b.host && a.disk == b.disk
}

// maxWork bounds the partial plans solve builds for one unit: the front
// times the options tried. Where the product is larger (a unit with many
// differently sized saved tensors has hundreds of distinct options: a bf16
// GPT block 605, against 164 in float32), thin keeps fewer options, so
// that planning costs about the same in either precision.
var maxWork = 1 << 14 // a variable for tests

// thin returns the indices of the options of a unit to try, at most about
// limit of them: all of them if they are few enough, or else, for each
// recompute setting, the fastest option of each cell of g × g bytes of
// (host, disk), g doubling until they fit, and always the options that
// move least and most and the witnesses' (wopt). It records g in
// pr.optionGrain: a choice it skips moves at most g bytes more or less
// than one it tries.
func (pr *problem) thin(opts []option, wopt []int, limit int) []int {
	all := make([]int, len(opts))
	for i := range all {
		all[i] = i
	}
	limit = max(limit, 16)
	if len(opts) <= limit {
		return all
	}
	protected := map[int]bool{}
	for _, oi := range wopt {
		if oi >= 0 {
			protected[oi] = true
		}
	}
	for _, rec := range []bool{false, true} {
		lo, hi := -1, -1
		for i, o := range opts {
			if o.recompute != rec {
				continue
			}
			if lo < 0 || o.moved < opts[lo].moved {
				lo = i
			}
			if hi < 0 || o.moved > opts[hi].moved {
				hi = i
			}
		}
		if lo >= 0 {
			protected[lo], protected[hi] = true, true
		}
	}
	type cell struct {
		rec        bool
		host, disk int64
	}
	var span int64
	for _, o := range opts {
		span = max(span, o.host+o.disk)
	}
	for g := max(pr.optionGrain, 2, span/int64(4*limit)); ; g *= 2 {
		best := map[cell]int{}
		for i, o := range opts {
			c := cell{o.recompute, o.host / g, o.disk / g}
			if j, ok := best[c]; !ok || o.seconds < opts[j].seconds || o.seconds == opts[j].seconds && o.save > opts[j].save {
				best[c] = i
			}
		}
		if len(best)+len(protected) > limit && g < 1<<61 {
			continue
		}
		var try []int
		for i := range opts {
			c := cell{opts[i].recompute, opts[i].host / g, opts[i].disk / g}
			if best[c] == i || protected[i] {
				try = append(try, i)
			}
		}
		pr.optionGrain = max(pr.optionGrain, g)
		return try
	}
}

// stateCmp orders states by time, then peak; the previous state and the
// option tell any two apart, so that the order is total and nothing
// depends on a sort's stability.
func stateCmp(a, b state) int { return keyOf(a, 0).cmp(keyOf(b, 0)) }

// stateKey is what stateCmp orders a state by, and (for sortStates) its
// index: 32 bytes against the state's 56.
type stateKey struct {
	seconds  float64
	peak     int64
	prev     int64
	opt, idx int32
}

func keyOf(st state, idx int) stateKey {
	return stateKey{st.seconds, st.peak, int64(st.prev), int32(st.opt), int32(idx)}
}

func (a stateKey) cmp(b stateKey) int {
	switch { // seconds are finite: no NaN to order
	case a.seconds < b.seconds:
		return -1
	case a.seconds > b.seconds:
		return 1
	}
	if c := cmp.Compare(a.peak, b.peak); c != 0 {
		return c
	}
	if c := cmp.Compare(a.prev, b.prev); c != 0 {
		return c
	}
	return cmp.Compare(a.opt, b.opt)
}

// sortStates sorts states by stateCmp. It sorts their keys and then
// moves each state once: pdqsort's swaps of the states themselves took a
// quarter of GPT-2 XL's planning time.
func (pr *problem) sortStates(states []state) {
	keys := pr.sortKeys[:0]
	for i, st := range states {
		keys = append(keys, keyOf(st, i))
	}
	slices.SortFunc(keys, stateKey.cmp)
	sorted := pr.sorted[:0]
	for _, k := range keys {
		sorted = append(sorted, states[k.idx])
	}
	copy(states, sorted)
	pr.sortKeys, pr.sorted = keys, sorted
}

// maxFront bounds the partial plans kept after a unit. Where more than
// this are undominated (a model with many differently sized saved
// tensors: TinyLlama's fronts grew past 200,000, and solving took
// minutes), states whose S and S − P are within a granularity g of a
// faster one's are dropped too, g doubling from budget/8192 until the
// front fits. A plan so dropped holds at most g more than one kept, for
// the model; the search replays what it chooses and corrects the budget
// anyway. 1024 rather than 2048: as good a plan for every model
// docs/plan.md shows (better for TinyLlama at 2 and 4 GiB, where the
// search's budgets fell differently) and 20-30 % faster to plan.
var maxFront = 1024 // a variable for tests

// prune keeps the states no other dominates (see maxFront).
func (pr *problem) prune(states []state) []state {
	// A total order (the previous state and the option tell any two
	// apart), so the result does not depend on the sort's stability.
	pr.sortStates(states)
	g := pr.grain
	all := states
	for {
		kept, ok := pr.pruneWithin(states, g)
		if ok && len(kept) <= maxFront || g >= 1<<61 {
			if g > 1 {
				kept = keepRoomiest(kept, all)
			}
			pr.grain = g
			return kept
		}
		if ok {
			states = kept
		}
		g = max(2*g, pr.budget/8192)
	}
}

// keepRoomiest adds to kept, if missing, the states of all that hold the
// least on the device (the largest S, and the largest S − P; then the
// least host memory, then the fastest): pruning within a granularity may
// drop them for faster ones that hold a little more, and where the
// budget is tight later units may fit only them.
func keepRoomiest(kept, all []state) []state {
	if len(all) == 0 {
		return kept
	}
	roomier := func(a, b state, first func(state) int64, second func(state) int64) bool {
		if first(a) != first(b) {
			return first(a) > first(b)
		}
		if second(a) != second(b) {
			return second(a) > second(b)
		}
		if a.host != b.host {
			return a.host < b.host
		}
		return stateCmp(a, b) < 0
	}
	s := func(st state) int64 { return st.s }
	d := func(st state) int64 { return st.s - st.p }
	for _, by := range [][2]func(state) int64{{s, d}, {d, s}} {
		best := all[0]
		for _, st := range all[1:] {
			if roomier(st, best, by[0], by[1]) {
				best = st
			}
		}
		if !slices.Contains(kept, best) {
			kept = append(kept, best)
		}
	}
	return kept
}

// pruneWithin keeps, of states sorted by time, those that no state kept
// before dominates with S, S − P (and host bytes) compared in units of g
// bytes: g 1 is exact dominance. With a host budget it reports false,
// doing nothing, where g is too fine for its table (hostCells).
func (pr *problem) pruneWithin(states []state, g int64) ([]state, bool) {
	if pr.hostBudget == 0 {
		return pruneFast(states, g), true
	}
	return pruneHost(states, g)
}

// hostCells bounds the table of pruneHost: distinct S values × distinct
// host values, at the granularity asked.
const hostCells = 1 << 22

// pruneHost is pruneWithin with a host budget: a state is dominated when
// one kept before it has S and S − P at least as large and host bytes no
// larger (in units of g). The kept states' largest S − P over S at least
// and host at most a value is a two-dimensional Fenwick tree over the
// distinct values of S (largest first) and of host bytes (smallest first).
func pruneHost(states []state, g int64) ([]state, bool) {
	ss := make([]int64, 0, len(states))
	hs := make([]int64, 0, len(states))
	for _, st := range states {
		ss = append(ss, -floorDiv(st.s, g)) // largest S first
		hs = append(hs, floorDiv(st.host, g))
	}
	slices.Sort(ss)
	ss = slices.Compact(ss)
	slices.Sort(hs)
	hs = slices.Compact(hs)
	if int64(len(ss))*int64(len(hs)) > hostCells {
		return nil, false
	}
	w := len(hs) + 1
	tree := make([]int64, (len(ss)+1)*w)
	for i := range tree {
		tree[i] = math.MinInt64
	}
	var kept []state
	for _, st := range states {
		r, _ := slices.BinarySearch(ss, -floorDiv(st.s, g))
		c, _ := slices.BinarySearch(hs, floorDiv(st.host, g))
		r, c = r+1, c+1
		d := floorDiv(st.s-st.p, g)
		best := int64(math.MinInt64)
		for i := r; i > 0; i -= i & -i {
			for j := c; j > 0; j -= j & -j {
				best = max(best, tree[i*w+j])
			}
		}
		if best >= d {
			continue
		}
		kept = append(kept, st)
		for i := r; i <= len(ss); i += i & -i {
			for j := c; j < w; j += j & -j {
				tree[i*w+j] = max(tree[i*w+j], d)
			}
		}
	}
	return kept, true
}

// floorDiv is v / g rounded down (g > 0).
func floorDiv(v, g int64) int64 {
	d := v / g
	if v%g != 0 && v < 0 {
		d--
	}
	return d
}

// pruneFast is pruneWithin without a host budget, for states sorted by
// time: a state is dominated when a state kept before it has S and S − P
// at least as large (in units of g). The kept states' largest S − P for
// each S and above is a Fenwick tree over the distinct values of S,
// largest first, so each state costs O(log n) rather than a pass over
// every state kept.
func pruneFast(states []state, g int64) []state {
	ss := make([]int64, len(states))
	for i, st := range states {
		ss[i] = floorDiv(st.s, g)
	}
	slices.Sort(ss)
	ss = slices.Compact(ss)
	rank := func(s int64) int { // 1 for the largest S
		i, _ := slices.BinarySearch(ss, s)
		return len(ss) - i
	}
	tree := make([]int64, len(ss)+1)
	for i := range tree {
		tree[i] = math.MinInt64
	}
	kept := make([]state, 0, len(states))
	for _, st := range states {
		s, d := floorDiv(st.s, g), floorDiv(st.s-st.p, g)
		r := rank(s)
		best := int64(math.MinInt64) // the largest S − P kept with S ≥ st.s
		for i := r; i > 0; i -= i & -i {
			best = max(best, tree[i])
		}
		if best >= d {
			continue
		}
		kept = append(kept, st)
		for i := r; i < len(tree); i += i & -i {
			tree[i] = max(tree[i], d)
		}
	}
	return kept
}

type totals struct{ host, disk int64 }

func sortedTotals(m map[totals][]offload.Placement) []totals {
	keys := make([]totals, 0, len(m))
	for t := range m {
		keys = append(keys, t)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].host != keys[j].host {
			return keys[i].host < keys[j].host
		}
		return keys[i].disk < keys[j].disk
	})
	return keys
}
