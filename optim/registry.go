package optim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"ferry"
)

// Registration makes an optimizer known by name to everything above optim:
// `ferry train/plan/demo --optimizer NAME`, the planner, checkpoints.
type Registration struct {
	Name    string
	Summary string // one line for people
	// Defaults is every hyperparameter the optimizer takes, "lr" and
	// "weight_decay" included, with its default: PyTorch's, where PyTorch
	// has the optimizer. Booleans are 0 or 1.
	Defaults map[string]float64
	// Recipe overrides some defaults for training a model from scratch
	// as `ferry train` does (nanoGPT's AdamW betas and weight decay, SGD
	// with momentum); nil keeps the defaults.
	Recipe map[string]float64
	// New builds the optimizer over params from h, which holds every key
	// of Defaults; it refuses values it cannot take, naming them.
	New func(params []*ferry.Tensor, h map[string]float64, opts ...Option) (Optimizer, error)
}

// Hyper returns the registration's hyperparameters: Defaults, then
// Recipe over them when recipe is set.
func (r Registration) Hyper(recipe bool) map[string]float64 {
	h := make(map[string]float64, len(r.Defaults))
	for k, v := range r.Defaults {
		h[k] = v
	}
	if recipe {
		for k, v := range r.Recipe {
			h[k] = v
		}
	}
	return h
}

var (
	regMu    sync.Mutex
	registry = map[string]Registration{}
)

// Register makes r known by its name. A second registration of a name,
// or one without New or an "lr" default, panics (a programming error, at
// init).
func Register(r Registration) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[r.Name]; dup {
		panic("optim: optimizer " + r.Name + " registered twice")
	}
	if r.New == nil || r.Name == "" || strings.ContainsAny(r.Name, " ,.") {
		panic(fmt.Sprintf("optim: bad registration %q", r.Name))
	}
	if _, ok := r.Defaults["lr"]; !ok {
		panic("optim: optimizer " + r.Name + " has no default learning rate")
	}
	registry[r.Name] = r
}

// Names lists the registered optimizers, sorted.
func Names() []string {
	regMu.Lock()
	defer regMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup finds a registered optimizer; the error lists the known ones.
func Lookup(name string) (Registration, error) {
	regMu.Lock()
	r, ok := registry[name]
	regMu.Unlock()
	if !ok {
		return r, fmt.Errorf("unknown optimizer %q: choose %s", name, strings.Join(Names(), ", "))
	}
	return r, nil
}

// New builds the optimizer registered as name over params: its defaults,
// with h's values over them (h may be nil). A key the optimizer does not
// take, or a value it refuses, is an error naming it.
func New(name string, params []*ferry.Tensor, h map[string]float64, opts ...Option) (Optimizer, error) {
	r, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	all := r.Hyper(false)
	var unknown []string
	for k, v := range h {
		if _, ok := all[k]; !ok {
			unknown = append(unknown, k)
			continue
		}
		all[k] = v
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("%s takes no %s (its hyperparameters: %s)", name, strings.Join(unknown, ", "), strings.Join(HyperNames(r), ", "))
	}
	for _, k := range HyperNames(r) {
		if v := all[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s: %s must be a finite number, got %v", name, k, v)
		}
	}
	return r.New(params, all, opts...)
}

// HyperNames lists r's hyperparameters, sorted.
func HyperNames(r Registration) []string {
	names := make([]string, 0, len(r.Defaults))
	for k := range r.Defaults {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// checkRange refuses v outside [lo, hi) (hi excluded when open) for the
// hyperparameter key of optimizer name.
func checkRange(name, key string, v, lo, hi float64, open bool) error {
	if v < lo || v > hi || open && v == hi {
		bound := "]"
		if open {
			bound = ")"
		}
		return fmt.Errorf("%s: %s must be in [%g, %g%s, got %v", name, key, lo, hi, bound, v)
	}
	return nil
}

// checkLR refuses a learning rate that is not positive and finite.
func checkLR(name string, lr float64) error {
	if !(lr > 0) || math.IsInf(lr, 0) || lr > math.MaxFloat32 {
		return fmt.Errorf("%s: lr must be a positive finite number, got %v", name, lr)
	}
	return nil
}

// Like builds, over params, an optimizer of o's kind: the one registered
// under o's name, with o's learning rate and hyperparameters, its state
// where o keeps it (OnHost, KeepOnDevice, StateVisits). ZeRO-3 steps each rank's shards of the
// parameters with it (dist.FullShard). o must be registered.
func Like(o Optimizer, params []*ferry.Tensor) (Optimizer, error) {
	if _, err := Lookup(o.Name()); err != nil {
		return nil, fmt.Errorf("%T (%q) is not a registered optimizer: %w", o, o.Name(), err)
	}
	h := map[string]float64{"lr": o.LR()}
	for k, v := range o.Hyper() {
		switch v := v.(type) {
		case float32:
			h[k] = float64(v)
		case float64:
			h[k] = v
		case int:
			h[k] = float64(v)
		case bool:
			h[k] = 0
			if v {
				h[k] = 1
			}
		default:
			return nil, fmt.Errorf("%s's hyperparameter %s is a %T, not a number", o.Name(), k, v)
		}
	}
	var opts []Option
	if hp, ok := o.(HostPlaced); ok && hp.StateOnHost() {
		opts = append(opts, OnHost())
		if d, ok := o.(interface{ StateOnDevice() []string }); ok {
			opts = append(opts, KeepOnDevice(d.StateOnDevice()...))
		}
		if v, ok := o.(interface{ StateVisiting() []string }); ok {
			opts = append(opts, StateVisits(v.StateVisiting()...))
		}
		if v, ok := o.(interface{ StateVisitsAhead() int }); ok {
			opts = append(opts, StateVisitsAhead(v.StateVisitsAhead()))
		}
	}
	return New(o.Name(), params, h, opts...)
}
