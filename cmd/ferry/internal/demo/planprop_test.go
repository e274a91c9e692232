package demo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/offload"
	"ferry/plan"
)

// The planner as a property: for random models of every registered
// family (random sizes, fp32 and bf16, SGD and AdamW, every built-in
// profile) planned at random budgets — the unlimited peak, fractions of
// it down to 1 %, the smallest budget the planner names and one byte less
// — planning never panics, answers within planTimeLimit, a plan that fits
// replays on the meta device (ferry demo --policy) to the predicted byte
// within its budget, the named budget fits, and one byte less is refused
// with a reason.
//
// FERRY_PLAN_SEED=S replays the models from seed S (each failure prints
// its own); FERRY_PLAN_LONG=N draws N models instead of planPropModels.
const (
	planPropModels = 200
	planTimeLimit  = 15 * time.Second
)

// propCase is one drawn model.
type propCase struct {
	seed    uint64
	family  string
	sizes   models.Sizes
	bf16    bool
	opt     string
	profile string
}

func (c propCase) String() string {
	keys := make([]string, 0, len(c.sizes))
	for k := range c.sizes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "--model %s", c.family)
	for _, k := range keys {
		fmt.Fprintf(&b, " --%s %g", k, c.sizes[k])
	}
	prec := "fp32"
	if c.bf16 {
		prec = "bf16"
	}
	fmt.Fprintf(&b, " --precision %s --optimizer %s --profile %s", prec, c.opt, c.profile)
	return b.String()
}

// drawCase draws a small model of a random family from seed.
func drawCase(seed uint64) propCase {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := propCase{seed: seed, bf16: r.IntN(2) == 1, opt: []string{"sgd", "adamw"}[r.IntN(2)]}
	c.profile = []string{"h200-pcie5", "h100-pcie5", "a100-pcie4", "cpu", "cpu-gpt"}[r.IntN(5)]
	between := func(lo, hi int) float64 { return float64(lo + r.IntN(hi-lo+1)) }
	switch r.IntN(3) {
	case 0:
		c.family = "mlp"
		c.sizes = models.Sizes{"layers": between(1, 8), "width": between(1, 256), "batch": between(1, 96)}
	case 1:
		c.family = "gpt"
		heads := between(1, 4)
		c.sizes = models.Sizes{"layers": between(1, 3), "heads": heads, "embd": heads * between(1, 24),
			"seq": between(1, 64), "vocab": between(2, 300), "batch": between(1, 4)}
	default:
		c.family = "llama"
		heads := between(1, 4)
		kv := heads
		if divs := divisors(int(heads)); len(divs) > 0 {
			kv = float64(divs[r.IntN(len(divs))])
		}
		c.sizes = models.Sizes{"layers": between(1, 3), "heads": heads, "kv-heads": kv, "embd": heads * 2 * between(1, 12),
			"hidden": []float64{0, between(1, 96)}[r.IntN(2)], "seq": between(1, 64), "vocab": between(2, 300), "batch": between(1, 4)}
	}
	return c
}

func divisors(n int) []int {
	var d []int
	for i := 1; i <= n; i++ {
		if n%i == 0 {
			d = append(d, i)
		}
	}
	return d
}

// config is the demo configuration of the case (the meta device's).
func (c propCase) config(t *testing.T) Config {
	cfg := DefaultConfig("meta")
	f, err := models.Lookup(c.family)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Family, cfg.Sizes, cfg.Optimizer = f, c.sizes, c.opt
	if c.bf16 {
		cfg.Precision = device.BFloat16
	}
	return cfg
}

// planAt plans the case at budget as ferry plan does, recovering a panic
// into an error and timing the answer.
func planAt(cfg Config, prof *meta.Profile, budget int64) (p *plan.Plan, took time.Duration, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		}
	}()
	params, err := PlanParams(cfg)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	p, _, err = plan.MakeJoint(plan.Options{Budget: budget, Profile: prof, Precision: offload.PrecisionName(cfg.Precision)},
		params, StateModels(cfg), plan.JointOptions{})
	return p, time.Since(start), err
}

// slowest is the slowest plan of the test, for its log.
var slowest struct {
	sync.Mutex
	took time.Duration
	what string
}

func TestPlanProperty(t *testing.T) {
	n := planPropModels
	if testing.Short() {
		n = 20
	}
	if s := os.Getenv("FERRY_PLAN_LONG"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("FERRY_PLAN_LONG=%q: want a count of models", s)
		}
		n = v
	}
	base := uint64(38)
	if s := os.Getenv("FERRY_PLAN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FERRY_PLAN_SEED=%q: want an unsigned integer", s)
		}
		base = v
	}
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(k string) { mu.Lock(); counts[k]++; mu.Unlock() }
	start := time.Now()
	t.Run("models", func(t *testing.T) {
		for i := range n {
			c := drawCase(base + uint64(i))
			t.Run(strconv.FormatUint(c.seed, 10), func(t *testing.T) {
				t.Parallel()
				checkPlanCase(t, c, count)
			})
		}
	})
	t.Logf("%d models (%d invalid sizes drawn and skipped), %d plans (%d fit, each replayed on meta; %d refused) in %.1f s; slowest plan %.2f s: %s",
		n, counts["invalid"], counts["plans"], counts["fits"], counts["refused"], time.Since(start).Seconds(), slowest.took.Seconds(), slowest.what)
}

// checkPlanCase plans one model at its budgets and checks each answer.
func checkPlanCase(t *testing.T, c propCase, count func(string)) {
	replay := fmt.Sprintf("(replay: FERRY_PLAN_SEED=%d FERRY_PLAN_LONG=1 go test ./cmd/ferry/internal/demo -run TestPlanProperty; ferry plan %s)", c.seed, c)
	cfg := c.config(t)
	cfg.Sizes = cfg.sizes()
	if err := models.Validate(cfg.Family, cfg.Sizes); err != nil {
		count("invalid")
		return
	}
	prof, err := plan.LoadProfile(c.profile)
	if err != nil {
		t.Fatal(err)
	}
	at := func(budget int64, why string) *plan.Plan {
		t.Helper()
		p, took, err := planAt(cfg, prof, budget)
		count("plans")
		slowest.Lock()
		if took > slowest.took {
			slowest.took, slowest.what = took, fmt.Sprintf("ferry plan %s --budget %d", c, budget)
		}
		slowest.Unlock()
		if err != nil {
			t.Fatalf("budget %d (%s): %v %s", budget, why, err, replay)
		}
		if took > planTimeLimit {
			t.Errorf("budget %d (%s): planning took %.1f s, more than %s %s", budget, why, took.Seconds(), planTimeLimit, replay)
		}
		if p.Fits {
			count("fits")
			checkReplay(t, cfg, prof, p, fmt.Sprintf("budget %d (%s) %s", budget, why, replay))
		} else {
			count("refused")
			if p.Why == "" || len(p.Suggestions) == 0 {
				t.Errorf("budget %d (%s): refused without a reason or a suggestion %s", budget, why, replay)
			}
		}
		return p
	}
	// The unlimited peak, from one plan of the state on the device (the
	// joint planner's first candidate) rather than every candidate's.
	model, err := StateModels(cfg)(plan.State{OptimizerState: "device", Gradients: "device"})
	if err != nil {
		t.Fatal(err)
	}
	full, err := plan.Make(plan.Options{Model: model, Budget: 1 << 50, Profile: prof, Precision: offload.PrecisionName(cfg.Precision)})
	if err != nil {
		t.Fatalf("unlimited: %v %s", err, replay)
	}
	unlimited := full.Unlimited.PeakBytes
	if p := at(unlimited, "the unlimited peak"); !p.Fits || !p.KeepsEverything && p.Predicted.PeakBytes > unlimited {
		t.Errorf("the unlimited peak %d: fits %v, keeps everything %v %s", unlimited, p.Fits, p.KeepsEverything, replay)
	}
	// A fraction of it, log-uniform down to 1 %; where that fits, 1 %
	// itself, so that a refusal names the smallest budget.
	r := rand.New(rand.NewPCG(c.seed, 0xb0d6e7))
	frac := math.Exp(math.Log(0.01) * r.Float64())
	tiny := at(max(1, int64(frac*float64(unlimited))), fmt.Sprintf("%.1f %% of the unlimited peak", 100*frac))
	if tiny.Fits {
		tiny = at(max(1, unlimited/100), "1 % of the unlimited peak")
	}
	if tiny.Fits {
		return // nothing smallest to name
	}
	named := tiny.Budget + tiny.ShortBy
	if !strings.Contains(strings.Join(tiny.Suggestions, "\n"), fmt.Sprintf("(%d bytes)", named)) {
		t.Errorf("the refusal at %d does not name its smallest budget %d: %q %s", tiny.Budget, named, tiny.Suggestions, replay)
	}
	if p := at(named, "the named smallest budget"); !p.Fits {
		t.Errorf("the named smallest budget %d does not fit: %s %s", named, p.Why, replay)
	}
	if p := at(named-1, "one byte below the named budget"); p.Fits {
		t.Errorf("one byte below the named smallest budget (%d) fits, peak %d %s", named-1, p.Predicted.PeakBytes, replay)
	} else if p.Budget+p.ShortBy != named {
		t.Errorf("one byte below it names %d, not %d %s", p.Budget+p.ShortBy, named, replay)
	}
}

// checkReplay runs the plan's policy, read back from its file, as ferry
// demo --device meta --policy does, and compares the peak with the plan's.
func checkReplay(t *testing.T, cfg Config, prof *meta.Profile, p *plan.Plan, what string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "p.json")
	if err := p.Policy().Save(file); err != nil {
		t.Fatal(err)
	}
	pol, err := offload.LoadPolicy(file)
	if err != nil {
		t.Fatalf("%s: the written policy does not load: %v", what, err)
	}
	if err := pol.Validate(p.ModelInfo(), true); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	cfg.Open = func(string, device.Options) (device.Device, error) { return meta.New(device.Options{}, prof), nil }
	cfg.Steps, cfg.SkipWarmup, cfg.Modes = 2, false, []string{Policy}
	cfg.Policy, cfg.Segments, cfg.OptimizerInBackward = pol.Place, pol.SegmentHooks(), pol.OptimizerInBackward
	cfg.OptimizerState, cfg.GradsOnHost, cfg.ParamsOnHost = p.OptimizerState, p.Gradients == "host", p.ParamsOnHost
	cfg.SerialGradCopies, cfg.StateOnDevice = p.SerialGradCopies, pol.OptimizerStateOnDevice
	cfg.DiskDir = t.TempDir()
	res, err := Execute(cfg)
	if err != nil {
		t.Fatalf("%s: replay: %v", what, err)
	}
	got := res.Runs[len(res.Runs)-1].PeakStepBytes
	if got != p.Predicted.PeakBytes || got > p.Budget {
		t.Errorf("%s: the policy replays at a peak of %d bytes; predicted %d, budget %d", what, got, p.Predicted.PeakBytes, p.Budget)
	}
}
