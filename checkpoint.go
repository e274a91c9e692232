package ferry

import (
	"fmt"
	"slices"

	"ferry/device"
)

// Activation checkpointing: a segment of forward keeps only its inputs and
// runs again during backward to bring back what its ops saved.
//
// # How (PyTorch's non-reentrant checkpoint)
//
// The segment's ops record their nodes on the tape as usual, so the graph
// and the order of backward are those of the plain run. What they save goes
// through a pair of hooks that keep nothing but a slot number: the tensor
// itself is released at once, and its memory freed when forward lets go of
// it. The segment's inputs are saved instead, through the hooks that were
// active around the segment (so an offloader can move them off the device).
// When backward first needs a slot, the segment runs forward again on a
// sub-tape whose hooks capture, in order, every tensor its ops save; slot k
// is the k-th. The recomputation is bitwise the original: the kernels are
// deterministic and dropout draws from keys, not from a stream. What it
// produced is used at once and never goes through the outer hooks again.

// segment is one checkpointed call: its inputs (packed through the outer
// hooks), its function, and, once recomputed, what its ops saved.
type segment struct {
	tape      *Tape
	f         func(xs ...*Tensor) *Tensor
	packed    []any             // the inputs, as the outer hooks packed them
	hooks     *SavedTensorHooks // the outer hooks (nil: packed are handles)
	slots     int               // tensors saved in forward
	live      int               // slots not yet released
	recomp    []*Tensor         // slot k's recomputed tensor, once recomputed
	released  []bool
	shapes    [][]int // slot k's shape in forward
	done      bool    // inputs released
	recomputd bool
	autocast  device.DType // the tape's autocast type in forward, which the recomputation runs in
}

// checkpointSlot is what autograd keeps for a tensor saved inside a
// segment: a number.
type checkpointSlot struct {
	seg *segment
	k   int
}

// Release drops the slot's recomputed tensor and, with the last slot, the
// segment's inputs.
func (s checkpointSlot) Release() {
	g := s.seg
	if g.released[s.k] {
		return
	}
	g.released[s.k] = true
	if g.recomp != nil && g.recomp[s.k] != nil {
		g.recomp[s.k].Release()
		g.recomp[s.k] = nil
	}
	g.live--
	if g.live == 0 {
		g.releaseInputs()
	}
}

func (g *segment) releaseInputs() {
	if g.done {
		return
	}
	g.done = true
	for _, p := range g.packed {
		if r, ok := p.(Releaser); ok {
			r.Release()
		}
	}
	g.packed = nil
}

// Checkpoint runs f(xs...) as a checkpointed segment (PyTorch:
// torch.utils.checkpoint.checkpoint with use_reentrant=False): it saves
// only xs for backward and, when backward reaches the segment, runs f again
// to bring back what its ops saved. Gradients are bitwise those of calling
// f directly, dropout included (its masks are drawn from keys). f must
// compute the same ops from the same inputs each time it runs; a run that
// saves a different number or shape of tensors is an *Error at backward.
//
// xs must be tensors of this tape (or leaves such as parameters); what f
// returns is on the tape, as any op's output. Checkpoints do not nest: a
// Checkpoint inside f is an *Error (checkpoint the inner or the outer
// segment). A segment whose output backward never reaches is never
// recomputed; its inputs are freed with the tape.
func (tp *Tape) Checkpoint(f func(xs ...*Tensor) *Tensor, xs ...*Tensor) *Tensor {
	const op = "checkpoint"
	tp.usable(op)
	tp.checkOwner(op)
	if tp.checkpointing {
		panicf(op, "checkpoint segments do not nest; checkpoint either the outer or the inner segment")
	}
	for _, x := range xs {
		x.use(op)
		if x.tape != nil && x.tape != tp {
			panicf(op, "%s belongs to another tape", x.describe())
		}
	}
	if !tp.recording() {
		return f(xs...)
	}
	g := &segment{tape: tp, f: f, autocast: tp.autocast}
	// The inputs, through the hooks around the segment.
	seq := len(tp.nodes)
	if n := len(tp.hooks); n > 0 {
		g.hooks = tp.hooks[n-1]
	}
	for i, x := range xs {
		if g.hooks == nil {
			g.packed = append(g.packed, x.handle(nil))
			continue
		}
		info := SaveInfo{Op: op, Node: seq, Slot: i, Module: tp.Module(), Index: tp.nextSave(),
			Parameter: x.node == nil && x.requiresGrad && x.tape == nil}
		g.packed = append(g.packed, g.hooks.Pack(x.handle(nil), info))
	}
	slotHooks := &SavedTensorHooks{
		Pack: func(t *Tensor, _ SaveInfo) any {
			g.shapes = append(g.shapes, t.shape)
			t.Release()
			g.slots++
			g.live++
			g.released = append(g.released, false)
			return checkpointSlot{g, g.slots - 1}
		},
		Unpack: func(p any) (*Tensor, error) {
			s := p.(checkpointSlot)
			return s.seg.unpack(s.k)
		},
	}
	tp.checkpointing = true
	defer func() { tp.checkpointing = false }()
	var out *Tensor
	tp.WithHooks(slotHooks, func() { out = f(xs...) })
	if g.slots == 0 {
		g.releaseInputs()
	}
	return out
}

// unpack returns slot k, recomputing the segment first if needed.
func (g *segment) unpack(k int) (*Tensor, error) {
	if g.released[k] {
		return nil, fmt.Errorf("checkpoint: slot %d was released", k)
	}
	if !g.recomputd {
		if err := Catch(g.recompute); err != nil {
			return nil, err
		}
	}
	return g.recomp[k], nil
}

// recompute runs the segment's function again on a sub-tape whose hooks
// capture what its ops save.
func (g *segment) recompute() error {
	if g.done {
		return fmt.Errorf("checkpoint: the segment's inputs were already freed")
	}
	g.recomputd = true
	sub := NewTape()
	defer sub.Close()
	sub.autocast = g.autocast
	sub.recordHook = g.tape.recordHook // a pager frees parameters after use here too
	inputs := make([]*Tensor, len(g.packed))
	for i, p := range g.packed {
		var u *Tensor
		if g.hooks == nil {
			u = p.(*Tensor)
		} else {
			var err error
			if u, err = g.hooks.Unpack(p); err != nil {
				return fmt.Errorf("checkpoint: bringing back input %d: %w", i, err)
			}
		}
		h := u.handle(sub)
		h.requiresGrad = true // so that the ops record, and save, as in forward
		inputs[i] = h
	}
	var captured []*Tensor
	capture := &SavedTensorHooks{
		Pack: func(t *Tensor, _ SaveInfo) any {
			captured = append(captured, t)
			return nil
		},
		Unpack: func(any) (*Tensor, error) { return nil, fmt.Errorf("checkpoint: recomputation is never run backward") },
	}
	sub.WithHooks(capture, func() { g.f(inputs...) }) //ferry:discard only what it saves is wanted; sub releases the output
	if len(captured) != g.slots {
		for _, t := range captured {
			t.Release()
		}
		return fmt.Errorf("checkpoint: the segment saved %d tensors in forward and %d when recomputed; "+
			"a checkpointed function must compute the same ops each time", g.slots, len(captured))
	}
	for k, t := range captured {
		if !slices.Equal(t.shape, g.shapes[k]) {
			for _, t := range captured {
				t.Release()
			}
			return fmt.Errorf("checkpoint: saved tensor %d had shape %v in forward and %v when recomputed; "+
				"a checkpointed function must compute the same ops each time", k, g.shapes[k], t.shape)
		}
	}
	g.recomp = captured
	for k, t := range captured {
		if g.released[k] { // backward will never ask for it
			t.Release()
			g.recomp[k] = nil
		}
	}
	return nil
}

// SegmentHooks let the code around a model decide which of its
// checkpointable segments are recomputed, and watch them run (the planner
// records a step with them). Set them with Tape.SetSegmentHooks; every
// function is called on the tape's goroutine, during forward.
type SegmentHooks struct {
	// Recompute reports whether the segment named module (its module path)
	// runs as a checkpoint (Tape.Checkpoint); nil means none does.
	Recompute func(module string) bool
	// Enter is called as a segment starts, with its module path and its
	// inputs (borrowed: the hook must not release or keep them); Exit
	// when it has returned. Either may be nil.
	Enter func(module string, inputs []*Tensor)
	Exit  func(module string)
}

// SetSegmentHooks sets the tape's segment hooks (nil: none).
func (tp *Tape) SetSegmentHooks(h *SegmentHooks) {
	tp.checkOwner("segment_hooks")
	tp.segs = h
}

// Segment runs f(xs...) as a checkpointable segment named by the current
// module path: as a checkpoint (Checkpoint) if the tape's SegmentHooks say
// so, else directly. Models mark their blocks with it so that whoever
// trains them chooses, per block, between keeping what the block saves and
// recomputing it; gradients are bitwise the same either way. Inside a
// checkpoint, or when nothing records, it is f(xs...).
func (tp *Tape) Segment(f func(xs ...*Tensor) *Tensor, xs ...*Tensor) *Tensor {
	tp.usable("segment")
	if !tp.recording() || tp.checkpointing {
		return f(xs...)
	}
	h, m := tp.segs, tp.Module()
	if h != nil && h.Enter != nil {
		h.Enter(m, xs)
	}
	var out *Tensor
	if h != nil && h.Recompute != nil && h.Recompute(m) {
		out = tp.Checkpoint(f, xs...)
	} else {
		out = f(xs...)
	}
	if h != nil && h.Exit != nil {
		h.Exit(m)
	}
	return out
}
