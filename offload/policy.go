package offload

import (
	"encoding/json"
	"fmt"
	"os"

	"ferry"
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
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// LoadPolicy reads a policy file.
func LoadPolicy(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	if p.Version != 1 {
		return nil, fmt.Errorf("policy %s: version %d, this ferry reads version 1", path, p.Version)
	}
	return &p, nil
}
