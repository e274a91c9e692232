package ferry

import (
	"errors"
	"fmt"

	"ferry/device"
	"ferry/internal/goid"
)

// Tape records the ops of one training step so that Backward can walk them
// in reverse, and owns the tensors the step makes: closing the tape
// releases every handle on it that was not released or detached before,
// and every tensor saved for backward that backward did not consume.
//
// Tensors join a tape through Input; an op on a tensor of a tape records
// itself there (when grad mode is on and an input requires grad) and puts
// its output on that tape. Ops on tensors of no tape record nothing.
//
// A tape belongs to the goroutine that first uses it (Step's, for the tape
// Step makes): an op, Backward, Release of one of its tensors or any other
// use of it from another goroutine panics with an *Error instead of
// corrupting the record of the step, and Close from another goroutine
// returns one without closing. (The check compares an identity of the
// goroutine, which costs about a nanosecond; see internal/goid.)
type Tape struct {
	owner   uintptr // goid.Current() of the goroutine that first used the tape; 0 until then
	nodes   []*node
	handles []*Tensor
	hooks   []*SavedTensorHooks // innermost last
	modules []string            // module path stack, for SaveInfo
	saves   map[string]int      // saves made so far in each module, for SaveInfo.Index
	segs    *SegmentHooks
	noGrad  int
	closed  bool
	// inBackward is set while Backward runs: ops then record nothing and
	// their outputs are counted as gradients.
	inBackward bool
	// checkpointing is set while a Checkpoint segment runs its forward.
	checkpointing bool
	// autocast is the element type of matrix products (Autocast);
	// casts holds the bfloat16 copies of parameters made under it.
	autocast device.DType
	casts    map[castKey]castEntry
	// recordHook is called after each recorded op (SetRecordHook).
	recordHook func(op string, inputs []*Tensor)
	// castSource is asked first for a parameter's bfloat16 copy
	// (SetCastSource).
	castSource func(p *Tensor) *Tensor
}

// NewTape returns an empty tape. Most code uses Step instead, which closes
// the tape for you.
func NewTape() *Tape { return &Tape{} }

// Step runs f on a new tape and closes the tape when f returns, also when
// f panics with an *Error (which Step returns as its error). It is the
// boundary of one training step: memory the step allocated and did not
// Detach is freed when Step returns.
func Step(f func(tape *Tape) error) error {
	tape := NewTape()
	defer tape.Close()
	return Catch(func() error { return f(tape) })
}

// Input returns a handle to t's data that belongs to the tape, so that ops
// on it are recorded here. t stays the caller's. If t requires grad (a
// parameter), gradients reaching the returned handle flow to t.
func (tp *Tape) Input(t *Tensor) *Tensor {
	t.use("input")
	tp.usable("input")
	if t.tape != nil && t.tape != tp {
		panicf("input", "%s belongs to another tape", t.describe())
	}
	h := t.handle(tp)
	if t.requiresGrad && tp.recording() {
		tp.record("input", h, []*Tensor{t}, nil, func(b *backward) { b.Pass(0, b.Grad()) })
	}
	return h
}

// Adopt moves t into the tape: the tape now owns it and releases it at
// Close, and ops on it are recorded here. It returns t. Use it for data made
// for this step only (Input leaves the caller a handle to release).
func (tp *Tape) Adopt(t *Tensor) *Tensor {
	t.live("adopt")
	tp.usable("adopt")
	if t.tape != nil {
		panicf("adopt", "%s already belongs to a tape", t.describe())
	}
	if t.requiresGrad {
		panicf("adopt", "%s requires grad (a parameter?); the tape would free it. Use Input", t.describe())
	}
	tp.own(t)
	return t
}

// NoGrad runs f with recording off: ops on this tape's tensors inside f
// record nothing and need no gradient (PyTorch: torch.no_grad()).
func (tp *Tape) NoGrad(f func()) {
	tp.checkOwner("no_grad")
	tp.noGrad++
	defer func() { tp.noGrad-- }()
	f()
}

// PushModule enters a module scope named name ("layers.3"); saved tensors
// recorded inside carry the joined path in SaveInfo.Module, so offload
// policies can choose by layer. PopModule leaves it.
func (tp *Tape) PushModule(name string) {
	tp.checkOwner("push_module")
	if n := len(tp.modules); n > 0 && tp.modules[n-1] != "" {
		name = tp.modules[n-1] + "." + name
	}
	tp.modules = append(tp.modules, name)
}

// PopModule leaves the innermost module scope.
func (tp *Tape) PopModule() {
	tp.checkOwner("pop_module")
	tp.modules = tp.modules[:len(tp.modules)-1]
}

// Module is the current module path, "" outside any.
func (tp *Tape) Module() string {
	if len(tp.modules) == 0 {
		return ""
	}
	return tp.modules[len(tp.modules)-1]
}

// nextSave returns the next SaveInfo.Index of the current module.
func (tp *Tape) nextSave() int {
	if tp.saves == nil {
		tp.saves = map[string]int{}
	}
	m := tp.Module()
	i := tp.saves[m]
	tp.saves[m] = i + 1
	return i
}

// Len is the number of ops recorded.
func (tp *Tape) Len() int { return len(tp.nodes) }

func (tp *Tape) recording() bool { return tp.noGrad == 0 && !tp.inBackward }

func (tp *Tape) usable(op string) {
	tp.checkOwner(op)
	if tp.closed {
		panicf(op, "the tape was closed (its step ended); keep tensors past a step with Detach")
	}
}

// checkOwner panics with an *Error unless the calling goroutine owns the
// tape; the first goroutine to use it becomes its owner.
func (tp *Tape) checkOwner(op string) {
	if g := goid.Current(); g != tp.owner {
		if err := tp.claim(op, g); err != nil {
			panic(err)
		}
	}
}

// claim makes goroutine g the owner of a tape no goroutine has used yet,
// or reports that another one did.
func (tp *Tape) claim(op string, g uintptr) *Error {
	if tp.owner == 0 {
		tp.owner = g
		return nil
	}
	return errorf(op, "the tape is used from a goroutine other than the one that first used it; "+
		"a tape and its tensors belong to one goroutine: give each goroutine its own step (Step) and tape")
}

// own makes the tape responsible for releasing h.
func (tp *Tape) own(h *Tensor) {
	h.tape = tp
	h.st.tapeHandles++
	tp.handles = append(tp.handles, h)
}

// Close frees what the step left: saved tensors backward did not consume,
// gradients of non-leaves, and every handle on the tape not yet released.
// Closing twice does nothing. It returns the first error a saved-tensor
// hook reported while letting go of what it packed.
func (tp *Tape) Close() error {
	if tp.closed {
		return nil
	}
	if g := goid.Current(); g != tp.owner {
		if err := tp.claim("close", g); err != nil {
			return err // closing would free what the owner may be using
		}
	}
	err := tp.freeGraph()
	for _, h := range tp.handles {
		if h.tape == tp { // not detached from the tape since
			h.Release()
		}
	}
	clear(tp.handles)
	tp.handles = tp.handles[:0]
	tp.nodes = nil
	tp.closed = true
	return err
}

// freeGraph drops every saved tensor and pending gradient on the tape.
func (tp *Tape) freeGraph() error {
	var errs []error
	for _, n := range tp.nodes {
		errs = append(errs, n.releaseSaved())
		if n.grad != nil {
			n.grad.Release()
			n.grad = nil
		}
	}
	return errors.Join(errs...)
}

// SavedTensorHooks decide what autograd keeps of each tensor an op saves
// for backward (PyTorch: torch.autograd.graph.saved_tensors_hooks). Push
// them on a tape with PushHooks; every tensor saved while they are the
// innermost pair goes through them.
type SavedTensorHooks struct {
	// Pack is called when an op saves t for backward, on the goroutine
	// running the op, right after the op has computed its output. t is a
	// new handle that Pack owns: keep it, or copy its data and release it
	// (when the copy no longer needs it). Autograd keeps only the returned
	// value, never a reference of its own to t.
	Pack func(t *Tensor, info SaveInfo) any
	// Unpack is called during backward when the op needs the tensor back,
	// with the value Pack returned. The returned tensor must have t's
	// shape and values (its strides may differ); it stays valid until autograd releases
	// the packed value, and autograd does not release it itself. Unpack may
	// be called more than once for one value (RetainGraph).
	Unpack func(packed any) (*Tensor, error)
}

// Releaser is implemented by packed values that hold resources. Autograd
// calls Release exactly once when it drops the value: after the op's
// backward used it, or when the tape is closed.
type Releaser interface{ Release() }

// SaveInfo tells Pack where a tensor is saved.
type SaveInfo struct {
	Op     string // the op saving it: "linear", "relu"
	Node   int    // the op's position on the tape, from 0
	Slot   int    // which of the op's saved tensors
	Module string // module path when saved ("layers.3"), or ""
	// Index is the save's position among those made directly in Module
	// during this step (0, 1, ...): Module and Index name a saved tensor
	// the same way in every step of the same model, whatever its ops.
	Index int
	// Parameter is true for a leaf that requires grad, memory counted as
	// parameters (a weight, also through tape.Input) or a paged storage (a
	// pager's, such as a parameter's bfloat16 copy from the tape's cast
	// source, which its pager brings back itself): kept as itself by
	// offloaders, which only move activations.
	Parameter bool
}

// PushHooks makes h the innermost saved-tensor hooks of the tape; PopHooks
// removes them. Tensors saved after PushHooks (until PopHooks) go through h;
// their unpacking does too, whenever backward runs.
func (tp *Tape) PushHooks(h *SavedTensorHooks) {
	tp.checkOwner("push_hooks")
	if h == nil || h.Pack == nil || h.Unpack == nil {
		panicf("push_hooks", "hooks need both Pack and Unpack")
	}
	tp.hooks = append(tp.hooks, h)
}

// PopHooks removes the innermost hooks.
func (tp *Tape) PopHooks() {
	tp.checkOwner("pop_hooks")
	if len(tp.hooks) == 0 {
		panicf("pop_hooks", "no hooks pushed")
	}
	tp.hooks = tp.hooks[:len(tp.hooks)-1]
}

// WithHooks runs f with h pushed, popping them afterwards.
func (tp *Tape) WithHooks(h *SavedTensorHooks, f func()) {
	tp.PushHooks(h)
	defer tp.PopHooks()
	f()
}

// node is one recorded op.
type node struct {
	op       string
	seq      int
	inputs   []edge
	saved    []savedTensor
	backward func(*backward)
	grad     *Tensor // gradient of the output, accumulated during backward
	outShape []int
	outType  device.DType // the output's element type, which its gradient has
	ran      bool         // backward ran and freed its saved tensors

	// Room for the inputs and saved tensors of most ops, so that recording
	// one is one allocation.
	inputsBuf [3]edge
	savedBuf  [3]savedTensor
}

// edge says where the gradient of one input goes.
type edge struct {
	node *node   // the op that produced the input, if it requires grad
	leaf *Tensor // the input itself, when it is a leaf that requires grad
}

// savedTensor is what autograd keeps of a tensor saved for backward: the
// packed value (the tensor itself without hooks) and enough to check that
// the storage was not modified in place since.
type savedTensor struct {
	packed  any
	hooks   *SavedTensorHooks // nil: packed is a *Tensor handle
	st      *storage          // for the version check only; holds no reference
	version uint32
	leaf    *Tensor // a saved leaf is kept as itself (its handle is the caller's)
	dropped bool
	unpack  *Tensor // the tensor Unpack returned, while the node runs
	// widen: the op saved a float32 widening of a bfloat16 tensor, and
	// packed is the bfloat16 tensor (Note in ops_precision.go); Saved
	// widens it again into widened, freed with the saved tensors.
	widen   bool
	widened *Tensor
}

// record makes out the output of op on its tape, recording the op if any
// input requires grad. save lists the tensors backward needs; bw computes
// input gradients. It must be called after out's data is computed.
func (tp *Tape) record(op string, out *Tensor, inputs []*Tensor, save []*Tensor, bw func(*backward)) {
	needs := false
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
			needs = true
			break
		}
	}
	if !needs {
		return
	}
	n := &node{op: op, seq: len(tp.nodes), backward: bw, outShape: out.shape, outType: out.dtype}
	if len(inputs) <= len(n.inputsBuf) {
		n.inputs = n.inputsBuf[:len(inputs)]
	} else {
		n.inputs = make([]edge, len(inputs))
	}
	if len(save) <= len(n.savedBuf) {
		n.saved = n.savedBuf[:0]
	}
	for i, in := range inputs {
		if in == nil || !in.requiresGrad {
			continue
		}
		if in.node != nil {
			n.inputs[i].node = in.node
		} else {
			n.inputs[i].leaf = in
		}
	}
	tp.nodes = append(tp.nodes, n)
	for i, s := range save {
		n.saved = append(n.saved, tp.pack(n, i, s))
	}
	out.node = n
	out.requiresGrad = true
	if tp.recordHook != nil {
		tp.recordHook(op, inputs)
	}
}

func (tp *Tape) pack(n *node, slot int, t *Tensor) savedTensor {
	widened := false
	if t.widenedFrom != nil && !t.widenedFrom.released {
		t, widened = t.widenedFrom, true
	}
	s := savedTensor{st: t.st, version: t.st.version, widen: widened}
	if len(tp.hooks) == 0 {
		if t.node == nil && t.requiresGrad && t.tape == nil {
			// A leaf of no tape (a parameter) is saved as itself: the caller
			// keeps it alive for the whole step.
			s.leaf = t
			return s
		}
		s.packed = t.handle(nil)
		return s
	}
	h := tp.hooks[len(tp.hooks)-1]
	s.hooks = h
	info := SaveInfo{Op: n.op, Node: n.seq, Slot: slot, Module: tp.Module(), Index: tp.nextSave(),
		Parameter: t.node == nil && t.requiresGrad || t.Category() == device.Parameter || t.st.pager != nil}
	s.packed = h.Pack(t.handle(nil), info)
	return s
}

// releaseSaved drops the node's saved tensors (after its backward ran, or
// when the graph is freed).
func (n *node) releaseSaved() error {
	var err error
	for i := range n.saved {
		s := &n.saved[i]
		if s.dropped {
			continue
		}
		s.dropped = true
		s.unpack = nil
		if s.widened != nil {
			s.widened.Release()
			s.widened = nil
		}
		if r, ok := s.packed.(Releaser); ok {
			func() {
				defer func() {
					if p := recover(); p != nil {
						if e, ok := p.(error); ok {
							err = fmt.Errorf("releasing a tensor saved by %s: %w", n.op, e)
						} else {
							err = fmt.Errorf("releasing a tensor saved by %s: %v", n.op, p)
						}
					}
				}()
				r.Release()
			}()
		}
		s.packed = nil
	}
	return err
}

// tapeOf returns the tape shared by the inputs (nil if none has one); it
// panics if they come from different tapes or the tape is closed.
func tapeOf(op string, inputs ...*Tensor) *Tape {
	tp := sharedTape(op, inputs, true)
	if tp != nil {
		tp.usable(op)
	}
	return tp
}

// sharedTape checks that the inputs are live, bringing paged-out ones
// back if pageIn (else the caller brings back those the op reads), and
// returns the tape they share (nil if none has one); it panics if they
// come from different tapes.
func sharedTape(op string, inputs []*Tensor, pageIn bool) *Tape {
	var tp *Tape
	for _, t := range inputs {
		if t == nil {
			continue
		}
		if pageIn {
			t.use(op)
		} else {
			t.live(op)
		}
		if t.tape == nil {
			continue
		}
		if tp != nil && t.tape != tp {
			panicf(op, "inputs belong to different tapes")
		}
		tp = t.tape
	}
	return tp
}

// tapeOfAutocast is tapeOf for an op on autocast's list (a matrix
// product) with operands cast and other inputs (a bias, read in float32):
// an operand that is a float32 parameter whose bfloat16 copy the tape's
// cast source gives (SetCastSource) is not brought back to the device,
// since the op reads that copy instead (castOf).
func tapeOfAutocast(op string, cast []*Tensor, others ...*Tensor) *Tape {
	inputs := append(cast[:len(cast):len(cast)], others...)
	tp := sharedTape(op, inputs, false)
	for i, t := range inputs {
		if t == nil || !t.st.pagedOut {
			continue
		}
		if i < len(cast) && tp.lowPrecision() && tp.castSource != nil && t.tape == nil && t.node == nil &&
			t.dtype == device.Float32 && tp.castSource(t) != nil {
			continue
		}
		t.pageIn(op)
	}
	if tp != nil {
		tp.usable(op)
	}
	return tp
}

// sameDevice panics unless all inputs are on one device, which it returns.
func sameDevice(op string, inputs ...*Tensor) device.Device {
	var dev device.Device
	for _, t := range inputs {
		if t == nil {
			continue
		}
		if dev == nil {
			dev = t.st.dev
		} else if t.st.dev != dev {
			why := ""
			if dev.Name() == t.st.dev.Name() {
				why = ": two devices of one name, opened separately"
			}
			panicf(op, "inputs on different devices (%s and %s%s); move one with To, or open the device once and share it",
				device.Identify(dev), device.Identify(t.st.dev), why)
		}
	}
	return dev
}
