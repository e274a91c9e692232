package offload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"ferry"
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
	// Comment says where the policy came from (ferry plan writes the
	// budget and predicted figures here).
	Comment string `json:"comment,omitempty"`
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

// ParsePolicy reads a policy from its JSON.
func ParsePolicy(b []byte) (*Policy, error) {
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	if p.Version != 1 {
		return nil, fmt.Errorf("version %d, this ferry reads version 1", p.Version)
	}
	return &p, nil
}
