package nn

// Train/eval mode and the step, as optional abilities of a module. A
// training loop type-asserts them (or calls SetTraining and SetStep
// below), so a module without dropout or other step-keyed randomness
// needs neither.

// Trainable is an optional interface of a Module that computes
// differently in training and in evaluation, as dropout does (PyTorch:
// Module.train(mode) and Module.eval()). SetTraining(true) selects
// training, SetTraining(false) evaluation. A container implements it by
// passing the mode to each child that implements it.
type Trainable interface {
	SetTraining(on bool)
}

// Stepped is an optional interface of a Module whose forward depends on
// the optimizer step: dropout masks are drawn from a key that includes the
// step, so that a forward replayed for recomputation within a step draws
// the same masks, and the next step draws new ones. A training loop calls
// SetStep once per optimizer step, before that step's forward. A container
// implements it by passing the step to each child that implements it.
type Stepped interface {
	SetStep(step uint64)
}

// Sharded is an optional interface of a Module whose forward draws from
// keys indexed by batch row, as dropout does. Under data parallelism a
// training loop calls SetFirstRow with the index, in the batch a single
// process would draw, of this rank's first row (rank·rows per rank), so
// that N ranks draw the masks one process draws at N times the batch. A
// container passes it to each child that implements it.
type Sharded interface {
	SetFirstRow(row uint64)
}

// SetFirstRow sets m's first global batch row if m implements Sharded,
// and does nothing otherwise.
func SetFirstRow(m Module, row uint64) {
	if s, ok := m.(Sharded); ok {
		s.SetFirstRow(row)
	}
}

// SetTraining puts m in training (on) or evaluation mode if m implements
// Trainable, and does nothing otherwise.
func SetTraining(m Module, on bool) {
	if t, ok := m.(Trainable); ok {
		t.SetTraining(on)
	}
}

// SetStep sets m's step if m implements Stepped, and does nothing
// otherwise.
func SetStep(m Module, step uint64) {
	if s, ok := m.(Stepped); ok {
		s.SetStep(step)
	}
}

var (
	_ Trainable = (*GPT)(nil)
	_ Stepped   = (*GPT)(nil)
	_ Trainable = (*Sequential)(nil)
	_ Stepped   = (*Sequential)(nil)
	_ Trainable = ModuleList(nil)
	_ Stepped   = ModuleList(nil)
	_ Trainable = Checkpoint{}
	_ Stepped   = Checkpoint{}
	_ Trainable = (*Dropout)(nil)
	_ Stepped   = (*Dropout)(nil)
	_ Sharded   = (*GPT)(nil)
	_ Sharded   = (*Sequential)(nil)
	_ Sharded   = ModuleList(nil)
	_ Sharded   = Checkpoint{}
	_ Sharded   = (*Dropout)(nil)
)
