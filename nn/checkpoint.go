package nn

import "ferry"

// Checkpoint runs Module as an activation-checkpointed segment (PyTorch:
// torch.utils.checkpoint with use_reentrant=False): forward keeps only the
// segment's input, and backward runs the module's forward again to bring
// back what its ops saved. Gradients are bitwise those of Module alone. Off
// a tape (inference) it is Module itself. See ferry.Tape.Checkpoint.
type Checkpoint struct{ Module Module }

// Forward runs the module as one checkpointed segment on x's tape.
func (c Checkpoint) Forward(x *ferry.Tensor) *ferry.Tensor {
	tp := x.Tape()
	if tp == nil {
		return c.Module.Forward(x)
	}
	return tp.Checkpoint(func(xs ...*ferry.Tensor) *ferry.Tensor { return c.Module.Forward(xs[0]) }, x)
}

// Parameters are the module's.
func (c Checkpoint) Parameters() []*ferry.Tensor { return c.Module.Parameters() }

// NamedParameters are the module's, under the same names (PyTorch's
// checkpoint is a function, not a module, and adds nothing to a path).
func (c Checkpoint) NamedParameters() []Named { return NamedParameters(c.Module) }

// SetTraining passes the mode to the module.
func (c Checkpoint) SetTraining(on bool) { SetTraining(c.Module, on) }

// SetStep passes the step to the module.
func (c Checkpoint) SetStep(step uint64) { SetStep(c.Module, step) }

// SetFirstRow passes the first global batch row to the module.
func (c Checkpoint) SetFirstRow(row uint64) { SetFirstRow(c.Module, row) }
