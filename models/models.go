// Package models is the registry of model families. A family registers
// itself once, in its package's init (models/mlp, models/gpt and
// models/llama; models/all imports them all), as database/sql drivers do;
// `ferry demo`, `plan`, `calibrate`, `tune` and `train` then know it by
// name and size it from its own list of sizes, so adding a family touches
// no command.
//
// A family gives two things: a Workload, its model on random data with its
// usual loss and optimizer, which the demo times, the planner records on
// the meta device and calibration fits a profile to; and, for language
// models, a LanguageModel that `ferry train text` trains on real text.
//
// Around language models of any family the package also holds the task
// that trains and evaluates one on text (TextTask), sampling (Generate),
// the model a run starts from: a ferry checkpoint, a Hugging Face
// directory or a safetensors file (OpenSource), and the family and sizes
// a checkpoint records (CheckpointModel), which `ferry eval` and `ferry
// sample` use too.
package models

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/optim"
)

// Size is one size setting of a family: a layer count, a width, a batch.
type Size struct {
	Name  string // the flag's name: "layers", "embd", "batch"
	Usage string
	// Default is the value for a device kind ("cpu", "meta", "cuda"):
	// families default to a size that runs in seconds on the CPU and to
	// their real size elsewhere.
	Default func(kind string) float64
	// Integer sizes take whole numbers ≥ Min; others any number in
	// [Min, Max).
	Integer  bool
	Min, Max float64
}

// Check says what is wrong with v as this size ("must be …"), or nil.
func (z Size) Check(v float64) error {
	hi := math.Min(z.Max, 1<<40)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("must be a number, got %v", v)
	case z.Integer && (v != math.Trunc(v) || v < z.Min || v > hi):
		return fmt.Errorf("must be a whole number in [%d, %d], got %v", int64(z.Min), int64(hi), v)
	case !z.Integer && (v < z.Min || v >= z.Max):
		return fmt.Errorf("must be in [%g, %g), got %v", z.Min, z.Max, v)
	}
	return nil
}

// Sizes are the values of a family's sizes by name.
type Sizes map[string]float64

// Int is the size name as an int.
func (s Sizes) Int(name string) int { return int(s[name]) }

// Family is a kind of model.
type Family interface {
	// Name is the family's name on the command line.
	Name() string
	// Summary is one line for people.
	Summary() string
	// Sizes lists the family's sizes, batch included.
	Sizes() []Size
	// Check refuses sizes no device could hold (or that overflow) before
	// anything is built, saying which.
	Check(s Sizes) error
	// Workload builds the family's model at s on dev, with parameters
	// drawn from seed.
	Workload(dev device.Device, s Sizes, seed uint64) (Workload, error)
}

// Workload is a family's model as the demo and the planner train it: one
// step on random data, its loss and its usual optimizer.
type Workload interface {
	Parameters() []*ferry.Tensor
	// Release frees the parameters.
	Release()
	// Data makes the step's input on dev and its target on dev's host (so
	// that forward runs holding only parameters and input, as the origin
	// test measured), drawn from seed.
	Data(dev device.Device, seed uint64) (input, target *ferry.Tensor)
	// Forward runs the model on x (which stays the caller's); with
	// recompute it checkpoints each layer or block.
	Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor
	Loss(y, target *ferry.Tensor) *ferry.Tensor
	// Optimizer is the family's usual optimizer (a name optim knows) and
	// its learning rate there; NewOptimizer builds it, or another.
	Optimizer() (name string, lr float32)
	// Describe is one line about the model, its sizes and its loss.
	Describe() string
	// Figures for the demo's report: the parameter count and the bytes
	// of one layer's (block's) output.
	ParameterCount() int64
	ActivationBytes() int64
	// MatmulShape is the matrix product that dominates a step, as
	// calibration times it: rows × width times width × width.
	MatmulShape() (rows, width int)
	// Smaller lists smaller sizes to suggest when a step does not fit,
	// most preferred first.
	Smaller() []Variant
}

// NewOptimizer builds the optimizer registered as name (optim.Names; ""
// for w's usual one) over w's parameters at learning rate lr (0: w's for
// its usual optimizer, the optimizer's default for another), with opts
// (optim.OnHost: its state on the host).
func NewOptimizer(w Workload, name string, lr float32, opts ...optim.Option) (optim.Stepper, error) {
	usual, usualLR := w.Optimizer()
	if name == "" {
		name = usual
	}
	h := map[string]float64{}
	switch {
	case lr != 0:
		h["lr"] = float64(lr)
	case name == usual:
		h["lr"] = float64(usualLR)
	}
	o, err := optim.New(name, w.Parameters(), h, opts...)
	if err != nil {
		return nil, err
	}
	st, ok := o.(optim.Stepper)
	if !ok {
		o.Release()
		return nil, fmt.Errorf("optimizer %s cannot update one parameter at a time (optim.Stepper), which the planner needs", name)
	}
	return st, nil
}

// Variant is a smaller size of a workload and what changed.
type Variant struct {
	Change string
	Sizes  Sizes
}

// NaiveForwarder is a workload that can run the origin user's mistake:
// forward with each layer's input copied to the host and the copy thrown
// away (`ferry demo`'s mode naive).
type NaiveForwarder interface {
	ForwardNaive(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor
}

// Counter is a family that counts its parameters at sizes without
// building the model (what a preflight check of memory needs first).
type Counter interface {
	ParameterCount(s Sizes) int64
}

// LanguageModel is a model of token sequences: Forward maps [batch, seq]
// int32 token ids to [batch, seq, vocab] logits.
type LanguageModel interface {
	nn.Module
	// Context is the longest sequence it takes; Vocab its vocabulary.
	Context() int
	Vocab() int
	// SetRecompute makes Forward checkpoint each block.
	SetRecompute(on bool)
}

// LanguageFamily is a family of language models.
type LanguageFamily interface {
	Family
	// LanguageModel builds the model at s (with s's "vocab" and "seq")
	// on dev, parameters drawn from seed.
	LanguageModel(dev device.Device, s Sizes, seed uint64) (LanguageModel, error)
}

var (
	mu       sync.Mutex
	families = map[string]Family{}
)

// Register makes f known by its name; a second family of the same name
// panics (a programming error, at init).
func Register(f Family) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := families[f.Name()]; dup {
		panic("models: family " + f.Name() + " registered twice")
	}
	families[f.Name()] = f
}

// Lookup finds a family by name.
func Lookup(name string) (Family, error) {
	mu.Lock()
	defer mu.Unlock()
	if f, ok := families[name]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("unknown model %q: choose %s", name, strings.Join(namesLocked(nil), ", "))
}

// Names lists the registered families, sorted; with keep, only those for
// which keep is true.
func Names(keep func(Family) bool) []string {
	mu.Lock()
	defer mu.Unlock()
	return namesLocked(keep)
}

func namesLocked(keep func(Family) bool) []string {
	var names []string
	for n, f := range families {
		if keep == nil || keep(f) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Defaults are f's sizes for a device kind.
func Defaults(f Family, kind string) Sizes {
	s := Sizes{}
	for _, z := range f.Sizes() {
		s[z.Name] = z.Default(kind)
	}
	return s
}

// Validate checks each of s's values against f's sizes: known names,
// whole numbers where they must be, ranges; then f.Check.
func Validate(f Family, s Sizes) error {
	var problems []string
	known := map[string]Size{}
	for _, z := range f.Sizes() {
		known[z.Name] = z
	}
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		z, ok := known[n]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s sizes no %s (its sizes: %s)", n, f.Name(), sizeNames(f)))
		} else if err := z.Check(s[n]); err != nil {
			problems = append(problems, n+" "+err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s", f.Name(), strings.Join(problems, "; "))
	}
	return f.Check(s)
}

func sizeNames(f Family) string {
	var names []string
	for _, z := range f.Sizes() {
		names = append(names, z.Name)
	}
	return strings.Join(names, ", ")
}

// KindDefault is a Size.Default: cpu on the CPU, other on every other
// device.
func KindDefault(cpu, other float64) func(string) float64 {
	return func(kind string) float64 {
		if kind == "cpu" {
			return cpu
		}
		return other
	}
}
