package nn

import "ferry"

// Parameter names, PyTorch's way. A parameter's name is its path from the
// module asked ("0.weight", "transformer.h.0.attn.c_attn.weight"),
// computed when the parameters are listed, as named_parameters() computes
// it: a container prefixes its children's names with their position or
// field name, and never reads the names back from the tensors. So a module
// keeps its names whatever containers hold it: nesting gives "0.2.weight",
// wrapping the same modules again gives the same names, and a module held
// by two containers has a name in each.
//
// Note [parameter labels]. Optimizer state (package optim) and training
// checkpoints key by Tensor.Name, so NewSequential, NewModuleList and
// NewGPT also write each parameter's name in the model they build into
// the tensor, as a label. The label is computed like the names above,
// from the structure, so it is never prefixed twice; but a tensor has one
// label, and a module put into a second container afterwards carries the
// name it has in the container built last. Code that needs the name in a
// given model uses NamedParameters.

// Named is a parameter and its name in a module.
type Named struct {
	Name   string
	Tensor *ferry.Tensor

	// fromTensor: the name came from Tensor.Name (a module that does not
	// implement ParameterNamer), so it must not be written back as a
	// label, which would prefix it again the next time it is read.
	fromTensor bool
}

// ParameterNamer is an optional interface of a Module: it lists its
// parameters with their names relative to itself, in the order of
// Parameters (PyTorch: named_parameters). Every module of this package
// implements it; a module of your own with parameters should too, naming
// its children's parameters through NamedParameters.
type ParameterNamer interface {
	NamedParameters() []Named
}

// NamedParameters lists m's parameters with their names in m, each tensor
// once, under the first name it is reached by (a tied or shared weight
// appears once, as in PyTorch). A module that does not implement
// ParameterNamer is named by its tensors' own names (Tensor.Name).
func NamedParameters(m Module) []Named {
	if pn, ok := m.(ParameterNamer); ok {
		return uniqueNamed(pn.NamedParameters())
	}
	var ns []Named
	for _, p := range m.Parameters() {
		ns = append(ns, Named{Name: p.Name(), Tensor: p, fromTensor: true})
	}
	return uniqueNamed(ns)
}

// Prefixed is NamedParameters(m) with prefix and a dot before each name:
// how a container names a child ("3" → "3.weight").
func Prefixed(prefix string, m Module) []Named {
	ns := NamedParameters(m)
	for i := range ns {
		if ns[i].Name != "" {
			ns[i].Name = prefix + "." + ns[i].Name
		}
	}
	return ns
}

func uniqueNamed(ns []Named) []Named {
	seen := make(map[*ferry.Tensor]bool, len(ns))
	out := ns[:0:0]
	for _, n := range ns {
		if !seen[n.Tensor] {
			seen[n.Tensor] = true
			out = append(out, n)
		}
	}
	return out
}

// tensors is the parameters of ns, in order.
func tensors(ns []Named) []*ferry.Tensor {
	if len(ns) == 0 {
		return nil
	}
	ps := make([]*ferry.Tensor, len(ns))
	for i, n := range ns {
		ps[i] = n.Tensor
	}
	return ps
}

// label writes each parameter's name in m into its tensor (see Note
// [parameter labels]).
func label(m ParameterNamer) {
	for _, n := range uniqueNamed(m.NamedParameters()) {
		if !n.fromTensor {
			n.Tensor.SetName(n.Name)
		}
	}
}
