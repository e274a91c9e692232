package offload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"ferry"
	"ferry/device"
	"ferry/internal/fsx"
)

// Policy is a placement plan that can be written to a file and read back:
// `ferry plan` writes one, `ferry demo --policy` and Config.Policy use it.
// A saved tensor is matched by its module path and op (and, optionally,
// which of the op's saved tensors it is); the first matching rule wins,
// then the layer's placement, then Default.
type Policy struct {
	Version int                  `json:"version"`
	Default Placement            `json:"default"`
	Layers  map[string]Placement `json:"layers,omitempty"` // module path → placement
	Rules   []Rule               `json:"rules,omitempty"`
	// OptimizerInBackward records that the plan assumed parameters are
	// updated inside backward (optim.InBackward), which the training loop
	// must then do for the predicted peak to hold.
	OptimizerInBackward bool `json:"optimizer_in_backward,omitempty"`
	// OptimizerState records where the plan assumed the optimizer's state
	// is: "" or "device", or "host" (optim.OnHost), which a run must then
	// do for the predicted peak to hold.
	OptimizerState string `json:"optimizer_state,omitempty"`
	// Optimizer names the optimizer (optim's registry) whose state the
	// plan counted; "" for the model family's usual one. A run must use
	// it for the predicted peak to hold.
	Optimizer string `json:"optimizer,omitempty"`
	// Precision records the precision of the step the plan recorded:
	// "" or "fp32", or "bf16" (mixed precision, ferry.Tape.Autocast), which
	// a run must then use: saved tensors are half the bytes in bf16.
	Precision string `json:"precision,omitempty"`
	// ParametersOnHost names the parameters the plan keeps in host
	// memory, streamed to the device around their uses ("*": all).
	ParametersOnHost []string `json:"parameters_on_host,omitempty"`
	// Gradients records where the plan puts the parameters' gradients:
	// "" or "device", or "host" (sent to host memory as backward completes
	// them; the optimizer's state must then be on the host too).
	Gradients string `json:"gradients,omitempty"`
	// OptimizerStateOnDevice names the parameters whose optimizer state
	// the plan keeps on the device although the rest's is on the host
	// (optim.KeepOnDevice): they are not streamed, and their gradients
	// stay on the device.
	OptimizerStateOnDevice []string `json:"optimizer_state_on_device,omitempty"`
	// OptimizerStateVisiting names the parameters whose optimizer state
	// is on the host with the rest's but steps on the device, brought up
	// for each update (optim.StateVisits): their gradients stay on the
	// device, their values streamed or not as ParametersOnHost says.
	OptimizerStateVisiting []string `json:"optimizer_state_visiting,omitempty"`
	// OptimizerStateAhead starts each visiting state's copy up that many
	// gradients before its parameter's completes in backward
	// (optim.StateVisitsAhead); 0 at its update.
	OptimizerStateAhead int `json:"optimizer_state_ahead,omitempty"`
	// SerialGradCopies records that the plan waits for each gradient's
	// copy to the host when the next gradient completes
	// (StreamConfig.SerialGradCopies): the fewest gradients on the device,
	// for a budget that cannot hold one more. Only with Gradients "host".
	SerialGradCopies bool `json:"serial_gradient_copies,omitempty"`
	// CopiesInFlight is how many copies off the device the plan assumed
	// may be in flight at once (Config.MaxInFlight), which a run applies:
	// more overlap a link-bound forward better, and each holds its tensor
	// on the device until it lands. 0 is the offloader's default
	// (DefaultConfig).
	CopiesInFlight int `json:"copies_in_flight,omitempty"`
	// Lookahead is how many offloaded tensors backward brings back ahead
	// of the one it needs now (Config.Lookahead), and how many parameter
	// uses ahead streamed parameters start their uploads
	// (StreamConfig.Prefetch), which a run applies: more hide a
	// link-bound backward better, and each holds its tensor on the
	// device before its use. 0 is the offloader's default (DefaultConfig).
	Lookahead int `json:"lookahead,omitempty"`
	// Ranks and Zero record the data-parallel training the plan is one
	// rank of (ferry plan --ranks): Ranks ranks at ZeRO stage Zero. A run
	// with other ranks or another stage does not peak as planned. 0
	// ranks: one process.
	Ranks int `json:"ranks,omitempty"`
	Zero  int `json:"zero,omitempty"`
	// HostPeakBytes is the host memory the plan predicts the step uses at
	// its peak (offloaded tensors, parameters, gradients and optimizer
	// state there): a run checks the machine has it before training.
	HostPeakBytes int64 `json:"host_peak_bytes,omitempty"`
	// Comment says where the policy came from (ferry plan writes the
	// budget and predicted figures here).
	Comment string `json:"comment,omitempty"`
	// Tensors place saved tensors one by one, named as SaveInfo names
	// them: module path and Index (here "slot"). They are consulted after
	// Rules and before Layers.
	Tensors []TensorPlacement `json:"tensors,omitempty"`
	// Recompute lists the checkpointable segments (ferry.Tape.Segment, by
	// module path) that run as checkpoints: what their ops save is dropped
	// in forward and recomputed in backward. Apply it with SegmentHooks.
	Recompute []string `json:"recompute,omitempty"`
	// Model and Sizes name the model the policy was planned for (a
	// family of package models and its sizes), so that a command can take
	// them from the file, or say which differ.
	Model string             `json:"model,omitempty"`
	Sizes map[string]float64 `json:"sizes,omitempty"`

	index map[tensorKey]Placement
}

// TensorPlacement places one saved tensor. Shape is the shape it was
// saved with, checked against the model (Validate); Bytes its storage's
// size, for people reading the file.
type TensorPlacement struct {
	Module    string    `json:"module"`
	Slot      int       `json:"slot"`
	Op        string    `json:"op,omitempty"`
	Shape     []int     `json:"shape,omitempty"`
	Bytes     int64     `json:"bytes,omitempty"`
	Placement Placement `json:"placement"`
}

type tensorKey struct {
	module string
	slot   int
}

// SegmentHooks returns hooks that recompute the policy's Recompute
// segments (nil when there are none).
func (p *Policy) SegmentHooks() *ferry.SegmentHooks {
	if len(p.Recompute) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, m := range p.Recompute {
		set[m] = true
	}
	return &ferry.SegmentHooks{Recompute: func(m string) bool { return set[m] }}
}

// Rule places the tensors one op of one module saves.
type Rule struct {
	Module    string    `json:"module"`
	Op        string    `json:"op,omitempty"`   // "" matches every op
	Slot      *int      `json:"slot,omitempty"` // nil matches every saved tensor of the op
	Placement Placement `json:"placement"`
}

// Place is the policy as a Config.Policy function.
func (p *Policy) Place(info ferry.SaveInfo, _ *ferry.Tensor) Placement {
	for _, r := range p.Rules {
		if r.Module == info.Module && (r.Op == "" || r.Op == info.Op) && (r.Slot == nil || *r.Slot == info.Slot) {
			return r.Placement
		}
	}
	if len(p.Tensors) > 0 {
		if p.index == nil {
			p.index = make(map[tensorKey]Placement, len(p.Tensors))
			for _, t := range p.Tensors {
				p.index[tensorKey{t.Module, t.Slot}] = t.Placement
			}
		}
		if pl, ok := p.index[tensorKey{info.Module, info.Index}]; ok {
			return pl
		}
	}
	if pl, ok := p.Layers[info.Module]; ok {
		return pl
	}
	return p.Default
}

// MarshalText writes a placement as its name.
func (p Placement) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a placement's name.
func (p *Placement) UnmarshalText(b []byte) error {
	v, err := ParsePlacement(string(b))
	*p = v
	return err
}

// Save writes the policy as JSON.
func (p *Policy) Save(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return fsx.WriteAtomic(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// UsesDisk says whether the policy places any saved tensor on disk: by
// default, by layer, by rule or tensor by tensor (as ferry plan writes
// them).
func (p *Policy) UsesDisk() bool {
	if p.Default == Disk {
		return true
	}
	for _, pl := range p.Layers {
		if pl == Disk {
			return true
		}
	}
	for _, r := range p.Rules {
		if r.Placement == Disk {
			return true
		}
	}
	for _, t := range p.Tensors {
		if t.Placement == Disk {
			return true
		}
	}
	return false
}

// Check validates the policy against a model whose saved tensors come from
// the given module paths, on a run that has a disk tier or not. It reports
// every problem at once: a module the model does not have, a negative
// slot, a disk placement the run cannot honour (never silently turned into
// a host placement), an unknown placement.
func (p *Policy) Check(modules []string, haveDisk bool) error {
	var problems []string
	known := func(m string) bool { return slices.Contains(modules, m) }
	usesDisk := func(pl Placement, where string) {
		if pl == Disk && !haveDisk {
			problems = append(problems, where+" places tensors on disk, but this run has no disk directory (give --disk-dir, or use the offload-disk mode)")
		}
		if int(pl) < 0 || int(pl) >= len(placementNames) {
			problems = append(problems, fmt.Sprintf("%s: unknown placement %d", where, int(pl)))
		}
	}
	usesDisk(p.Default, "default")
	names := make([]string, 0, len(p.Layers))
	for m := range p.Layers {
		names = append(names, m)
	}
	slices.Sort(names)
	for _, m := range names {
		if !known(m) {
			problems = append(problems, fmt.Sprintf("layers: the model has no module %q (it has %s)", m, summarize(modules)))
		}
		usesDisk(p.Layers[m], fmt.Sprintf("layers[%q]", m))
	}
	for i, r := range p.Rules {
		where := fmt.Sprintf("rules[%d] (module %q)", i, r.Module)
		if !known(r.Module) {
			problems = append(problems, fmt.Sprintf("%s: the model has no such module (it has %s)", where, summarize(modules)))
		}
		if r.Slot != nil && *r.Slot < 0 {
			problems = append(problems, fmt.Sprintf("%s: slot %d is negative", where, *r.Slot))
		}
		usesDisk(r.Placement, where)
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("policy does not fit this run:\n  " + strings.Join(problems, "\n  "))
}

// summarize lists a few module names.
func summarize(modules []string) string {
	if len(modules) == 0 {
		return "no modules"
	}
	if len(modules) <= 4 {
		return strings.Join(modules, ", ")
	}
	return fmt.Sprintf("%s, %s, …, %s (%d in all)", modules[0], modules[1], modules[len(modules)-1], len(modules))
}

// PrecisionName is how policies, plans and the CLI spell the precision of
// a step whose autocast type is dt: "bf16" for device.BFloat16, else
// "fp32".
func PrecisionName(dt device.DType) string {
	if dt == device.BFloat16 {
		return "bf16"
	}
	return "fp32"
}

// LoadPolicy reads a policy file.
// maxPolicyBytes caps what LoadPolicy reads: a policy names one placement
// per saved storage, far below this.
const maxPolicyBytes = 64 << 20

func LoadPolicy(path string) (*Policy, error) {
	b, err := fsx.ReadLimited(path, maxPolicyBytes)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// InFlight is the copies off the device in flight a run of the policy
// uses (Config.MaxInFlight): the count it records, else def.
func (p *Policy) InFlight(def int) int {
	if p.CopiesInFlight > 0 {
		return p.CopiesInFlight
	}
	return def
}

// MaxCopiesInFlight bounds a policy's copies_in_flight: the planner
// chooses among counts up to it, and a larger one is a damaged file.
const MaxCopiesInFlight = 64

// Ahead is the lookahead a run of the policy uses (Config.Lookahead,
// StreamConfig.Prefetch): the count it records, else def.
func (p *Policy) Ahead(def int) int {
	if p.Lookahead > 0 {
		return p.Lookahead
	}
	return def
}

// MaxLookahead bounds a policy's lookahead, as MaxCopiesInFlight its
// copies_in_flight.
const MaxLookahead = 64

// ParsePolicy reads a policy from its JSON. It refuses, naming each, a
// key given twice, a null value, an unknown key, and entries that place
// the same tensors differently.
func ParsePolicy(b []byte) (*Policy, error) {
	if err := checkPolicyJSON(b); err != nil {
		return nil, err
	}
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a misspelt key would silently place nothing
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	if p.Version != 1 && p.Version != 2 {
		return nil, fmt.Errorf("version %d, this ferry reads versions 1 and 2", p.Version)
	}
	if s := p.OptimizerState; s != "" && s != "device" && s != "host" {
		return nil, fmt.Errorf("optimizer_state %q: want device or host", s)
	}
	if s := p.Precision; s != "" && s != "fp32" && s != "bf16" {
		return nil, fmt.Errorf("precision %q: want fp32 or bf16", s)
	}
	if s := p.Gradients; s != "" && s != "device" && s != "host" {
		return nil, fmt.Errorf("gradients %q: want device or host", s)
	}
	if len(p.OptimizerStateOnDevice) > 0 && p.OptimizerState != "host" {
		return nil, fmt.Errorf("optimizer_state_on_device keeps some parameters' state on the device while the rest's is on the host; the policy's optimizer_state is %q, not host", p.OptimizerState)
	}
	if i := firstRepeat(p.OptimizerStateOnDevice); i >= 0 {
		return nil, fmt.Errorf("optimizer_state_on_device names %q twice", p.OptimizerStateOnDevice[i])
	}
	if len(p.OptimizerStateVisiting) > 0 && p.OptimizerState != "host" {
		return nil, fmt.Errorf("optimizer_state_visiting steps some parameters' host state on the device; the policy's optimizer_state is %q, not host", p.OptimizerState)
	}
	if i := firstRepeat(p.OptimizerStateVisiting); i >= 0 {
		return nil, fmt.Errorf("optimizer_state_visiting names %q twice", p.OptimizerStateVisiting[i])
	}
	if p.OptimizerStateAhead < 0 || p.OptimizerStateAhead > 0 && len(p.OptimizerStateVisiting) == 0 {
		return nil, fmt.Errorf("optimizer_state_ahead %d: want 0, or more with optimizer_state_visiting", p.OptimizerStateAhead)
	}
	for _, name := range p.OptimizerStateVisiting {
		if slices.Contains(p.OptimizerStateOnDevice, name) {
			return nil, fmt.Errorf("%q is in both optimizer_state_on_device and optimizer_state_visiting: its state is in one place", name)
		}
	}
	if p.SerialGradCopies && p.Gradients != "host" {
		return nil, fmt.Errorf("serial_gradient_copies is for gradients in host memory; the policy's gradients are %q", p.Gradients)
	}
	if p.Ranks < 0 || p.Zero < 0 || p.Zero > 3 || p.Zero > 0 && p.Ranks < 2 {
		return nil, fmt.Errorf("ranks %d at zero %d: want ranks 0 (one process) or at least 2, zero 0 to 3 (1 to 3 with 2 ranks or more)", p.Ranks, p.Zero)
	}
	if p.CopiesInFlight < 0 || p.CopiesInFlight > MaxCopiesInFlight {
		return nil, fmt.Errorf("copies_in_flight %d: want 0 (the default) to %d", p.CopiesInFlight, MaxCopiesInFlight)
	}
	if p.Lookahead < 0 || p.Lookahead > MaxLookahead {
		return nil, fmt.Errorf("lookahead %d: want 0 (the default) to %d", p.Lookahead, MaxLookahead)
	}
	if err := p.checkConflicts(); err != nil {
		return nil, err
	}
	return &p, nil
}

// firstRepeat is the index of the first name that appears earlier in
// names, or -1.
func firstRepeat(names []string) int {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		if seen[n] {
			return i
		}
		seen[n] = true
	}
	return -1
}

// SavedTensor describes one tensor a model's step saves, as the planner
// records it on the meta device: where it is saved (Module and Slot, which
// is SaveInfo.Index), by which op, its shape and its storage's bytes.
type SavedTensor struct {
	Module string
	Slot   int
	Op     string
	Shape  []int
	Bytes  int64
}

// ModelInfo is what Validate checks a policy against: every save of one
// step and the checkpointable segments.
type ModelInfo struct {
	Saved    []SavedTensor
	Segments []string
}

// Validate checks the policy against the model it is to be applied to, on
// a run that has a disk tier or not, and reports every problem at once: a
// module that saves nothing, a slot out of the module's range, a shape
// other than the one saved there, a segment the model does not have, a
// disk placement the run cannot honour (never silently turned into a host
// placement), an unknown placement.
func (p *Policy) Validate(m ModelInfo, haveDisk bool) error {
	var problems []string
	saves := map[string][]SavedTensor{}
	var modules []string
	for _, t := range m.Saved {
		if _, ok := saves[t.Module]; !ok {
			modules = append(modules, t.Module)
		}
		saves[t.Module] = append(saves[t.Module], t)
	}
	check := func(pl Placement, where string) {
		if int(pl) >= len(placementNames) {
			problems = append(problems, fmt.Sprintf("%s: unknown placement %d", where, int(pl)))
		} else if pl == Disk && !haveDisk {
			problems = append(problems, where+" places tensors on disk, but this run has no disk directory, so no disk tier (give --disk-dir, or plan with --no-disk)")
		}
	}
	check(p.Default, "default")
	for i, t := range p.Tensors {
		where := fmt.Sprintf("tensors[%d] (%s slot %d)", i, t.Module, t.Slot)
		ts, ok := saves[t.Module]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: the model saves nothing in a module %q (modules that save: %s)", where, t.Module, summarize(modules)))
		case t.Slot < 0 || t.Slot >= len(ts):
			problems = append(problems, fmt.Sprintf("%s: slot out of range: %s saves %d tensors (slots 0–%d)", where, t.Module, len(ts), len(ts)-1))
		case t.Shape != nil && !slices.Equal(t.Shape, ts[t.Slot].Shape):
			problems = append(problems, fmt.Sprintf("%s: shape %v, but the model saves %v there (by %s)", where, t.Shape, ts[t.Slot].Shape, ts[t.Slot].Op))
		}
		check(t.Placement, where)
	}
	for _, s := range p.Recompute {
		if !slices.Contains(m.Segments, s) {
			problems = append(problems, fmt.Sprintf("recompute: the model has no segment %q (it has %s)", s, summarize(m.Segments)))
		}
	}
	names := make([]string, 0, len(p.Layers))
	for n := range p.Layers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if _, ok := saves[n]; !ok {
			problems = append(problems, fmt.Sprintf("layers: the model saves nothing in a module %q (modules that save: %s)", n, summarize(modules)))
		}
		check(p.Layers[n], fmt.Sprintf("layers[%q]", n))
	}
	for i, r := range p.Rules {
		where := fmt.Sprintf("rules[%d] (module %q)", i, r.Module)
		if _, ok := saves[r.Module]; !ok && !slices.Contains(m.Segments, r.Module) {
			problems = append(problems, fmt.Sprintf("%s: the model saves nothing in that module (modules that save: %s)", where, summarize(modules)))
		}
		if r.Slot != nil && *r.Slot < 0 {
			problems = append(problems, fmt.Sprintf("%s: slot %d is negative", where, *r.Slot))
		}
		check(r.Placement, where)
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("policy does not fit this model:\n  " + strings.Join(problems, "\n  "))
}
