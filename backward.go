package ferry

import (
	"fmt"
	"slices"

	"ferry/device"
)

// BackwardOptions adjust Backward.
type BackwardOptions struct {
	// Grad is the gradient of the tensor Backward starts from; nil means
	// 1, which needs a one-element tensor.
	Grad *Tensor
	// RetainGraph keeps saved tensors after use, so that Backward can run
	// over the same ops again.
	RetainGraph bool
	// GradReady, if set, is called for each leaf as soon as its gradient
	// for this backward is complete (every op that uses it has run), while
	// backward goes on. An optimizer can update the leaf there and drop its
	// gradient, so that gradients never all exist at once (see
	// optim.InBackward). It runs on the goroutine running Backward.
	GradReady func(leaf *Tensor)
	// GradComplete, if set with GradReady, is called for each leaf just
	// before GradReady, on the goroutine running Backward, whoever wraps
	// GradReady (offload.Streamer runs some updates on a host worker):
	// the order gradients complete in, for an optimizer that prepares an
	// update ahead of it (optim.StateVisits).
	GradComplete func(leaf *Tensor)
}

// Backward computes the gradient of t (a one-element loss) with respect to
// every leaf that requires grad and that t depends on, adding it to the
// leaf's Grad. It walks the tape in reverse, running each op's backward and
// freeing the tensors it saved as soon as it has run, as PyTorch does.
//
// Errors (a saved tensor modified in place, a hook that failed to bring a
// tensor back, memory exhausted) leave the graph freed and the leaves'
// gradients as they were before the failing op; the step can end normally.
func (t *Tensor) Backward() error { return t.BackwardWith(BackwardOptions{}) }

// BackwardWith is Backward with options.
func (t *Tensor) BackwardWith(opts BackwardOptions) error {
	return Catch(func() error {
		t.live("backward")
		if t.node == nil {
			if t.requiresGrad {
				return errorf("backward", "%s is a leaf: there is nothing to differentiate", t.describe())
			}
			return errorf("backward", "%s does not require grad: no op on the way to it was recorded. "+
				"Bring the step's inputs onto a tape with tape.Input, use parameters that require grad, and do not run it under NoGrad", t.describe())
		}
		if opts.Grad == nil && t.Numel() != 1 {
			return errorf("backward", "%s has %d elements: Backward needs a one-element loss, or BackwardWith a Grad", t.describe(), t.Numel())
		}
		if opts.Grad != nil && !slices.Equal(opts.Grad.shape, t.shape) {
			return errorf("backward", "gradient shape %v does not match %s", opts.Grad.shape, t.describe())
		}
		return t.tape.runBackward(t, opts)
	})
}

func (tp *Tape) runBackward(root *Tensor, opts BackwardOptions) (err error) {
	tp.usable("backward")
	// Mark the ops the root depends on. A node's seq is its place on the
	// tape, so a slice marks them; and an op's inputs were recorded before
	// it, so one walk backwards from the root marks every dependency.
	marked := make([]bool, len(tp.nodes))
	marked[root.node.seq] = true
	var want []*node
	for i := root.node.seq; i >= 0; i-- {
		n := tp.nodes[i]
		if !marked[i] {
			continue
		}
		if opts.GradReady != nil {
			want = append(want, n)
		}
		for _, e := range n.inputs {
			if e.node != nil {
				marked[e.node.seq] = true
			}
		}
	}
	// Count, per leaf, the ops that will send it a gradient.
	var pendingLeaf map[*Tensor]int
	if opts.GradReady != nil {
		pendingLeaf = map[*Tensor]int{}
		for _, n := range want {
			for _, e := range n.inputs {
				if e.leaf != nil {
					pendingLeaf[e.leaf]++
				}
			}
		}
	}
	tp.inBackward = true
	defer func() {
		tp.inBackward = false
		if r := recover(); r != nil {
			// Leave a clean slate: nothing half-done stays on the tape.
			_ = tp.freeGraph()
			panic(r)
		}
	}()
	var seed *Tensor
	if opts.Grad != nil {
		seed = opts.Grad.contiguousCopy(tp)
	} else {
		seed = Full(root.st.dev, 1, root.shape...)
		tp.own(seed)
	}
	seed.SetCategory(device.Gradient)
	accumulate(&root.node.grad, seed)
	b := &backward{tape: tp}
	for i := len(tp.nodes) - 1; i >= 0; i-- {
		n := tp.nodes[i]
		if !marked[i] {
			continue
		}
		if n.grad != nil {
			b.n = n
			n.backward(b)
			n.grad.Release()
			n.grad = nil
		}
		for _, e := range n.inputs {
			if e.leaf == nil || pendingLeaf == nil {
				continue
			}
			if pendingLeaf[e.leaf]--; pendingLeaf[e.leaf] == 0 && e.leaf.grad != nil {
				tp.inBackward = false // the callback's ops are not backward's
				if opts.GradComplete != nil {
					opts.GradComplete(e.leaf)
				}
				opts.GradReady(e.leaf)
				tp.inBackward = true
			}
		}
		if opts.RetainGraph {
			for j := range n.saved {
				n.saved[j].unpack = nil
			}
		} else if err := n.releaseSaved(); err != nil {
			return &Error{Op: "backward", Msg: "freeing saved tensors", Err: err}
		}
	}
	return nil
}

// backward is what an op's backward function sees: the gradient of its
// output, the tensors it saved, and where to send its inputs' gradients.
type backward struct {
	tape *Tape
	n    *node
}

// Grad is the gradient of the op's output. Borrowed: do not release it.
func (b *backward) Grad() *Tensor { return b.n.grad }

// Needs reports whether input i wants a gradient; ops skip computing the
// others.
func (b *backward) Needs(i int) bool {
	e := b.n.inputs[i]
	return e.node != nil || e.leaf != nil
}

// Saved returns saved tensor i, unpacking it through its hooks on first
// use. Borrowed: do not release it. It panics with an *Error if the tensor
// was modified in place since it was saved, or was freed by an earlier
// Backward.
func (b *backward) Saved(i int) *Tensor {
	s := &b.n.saved[i]
	if s.dropped {
		panicf("backward", "the tensors saved by %s (op %d on the tape) were freed by an earlier Backward; "+
			"pass RetainGraph to the first Backward to run backward twice", b.n.op, b.n.seq)
	}
	if s.st.version != s.version {
		last := s.st.lastInPlace
		if last == "" {
			last = "an in-place op"
		}
		panicf("backward", "a tensor saved by %s (op %d on the tape) for backward was modified in place by %s "+
			"(it is at version %d, saved at version %d); compute on a copy (Clone) instead of changing it in place",
			b.n.op, b.n.seq, last, s.st.version, s.version)
	}
	if s.unpack != nil {
		return s.unpack
	}
	var t *Tensor
	switch {
	case s.leaf != nil:
		s.leaf.use("backward")
		t = s.leaf
	case s.hooks == nil:
		t = s.packed.(*Tensor)
	default:
		u, err := s.hooks.Unpack(s.packed)
		if err != nil {
			panic(&Error{Op: "backward", Msg: fmt.Sprintf("bringing back a tensor saved by %s (op %d on the tape)", b.n.op, b.n.seq), Err: err})
		}
		if u == nil || u.st != nil && u.released {
			panicf("backward", "the Unpack hook returned no usable tensor for %s (op %d)", b.n.op, b.n.seq)
		}
		t = u
	}
	t.use("backward")
	if s.widen {
		s.widened = widenTemp(t)
		t = s.widened
	}
	s.unpack = t
	return t
}

// Accumulate adds g, which the engine then owns, to input i's gradient.
// A gradient of a broadcast input is summed down to the input's shape.
func (b *backward) Accumulate(i int, g *Tensor) {
	e := b.n.inputs[i]
	if e.node == nil && e.leaf == nil {
		g.Release()
		return
	}
	var shape []int
	var dt device.DType
	if e.node != nil {
		shape, dt = e.node.outShape, e.node.outType
	} else {
		shape, dt = e.leaf.shape, e.leaf.dtype
	}
	if !slices.Equal(g.shape, shape) {
		r := sumTo(g, shape)
		g.Release()
		g = r
	}
	if g.dtype != dt { // a gradient has its tensor's type
		r := Cast(g, dt)
		g.Release()
		g = r
	}
	if e.node != nil {
		accumulate(&e.node.grad, g)
		return
	}
	accumulateLeaf(e.leaf, g)
}

// Pass sends a borrowed tensor (the op's own output gradient, say) on as
// input i's gradient.
func (b *backward) Pass(i int, g *Tensor) {
	if b.Needs(i) {
		b.Accumulate(i, g.handle(b.tape))
	}
}

// accumulate adds g (owned) into *dst, adding in place when *dst is a
// contiguous tensor no one else holds.
func accumulate(dst **Tensor, g *Tensor) {
	old := *dst
	if old == nil {
		*dst = g
		return
	}
	if old.st.refs == 1 && old.IsContiguous() {
		addInto(old, g)
		g.Release()
		return
	}
	*dst = Add(old, g)
	old.Release()
	g.Release()
}

// accumulateLeaf adds g (owned) into leaf.grad. The first gradient is
// adopted without a copy when nothing else holds it, as PyTorch's
// AccumulateGrad does; the gradient then belongs to the leaf, on no tape.
func accumulateLeaf(leaf *Tensor, g *Tensor) {
	if leaf.grad != nil {
		leaf.grad.use("accumulate_grad")
		addInto(leaf.grad, g)
		leaf.grad.st.bumpVersion("accumulate_grad")
		g.Release()
		return
	}
	if g.st.refs != 1 || !g.IsContiguous() || g.offset != 0 {
		c := g.contiguousCopy(nil)
		g.Release()
		g = c
	}
	if g.tape != nil {
		g.st.tapeHandles--
		g.tape = nil // the leaf owns it now; Tape.Close skips it
	}
	g.SetCategory(device.Gradient)
	leaf.grad = g
}

// addInto adds g into dst (contiguous, same shape) in place.
func addInto(dst, g *Tensor) {
	if dst.st.block == nil { // no elements
		return
	}
	if (dst.dtype != device.Float32 || g.dtype != device.Float32) && !nativeBF16(dst) {
		dev := dst.st.dev
		d := widenTemp(dst)
		defer d.Release()
		gv := g.view()
		if g.dtype != device.Float32 {
			w := widenTemp(g)
			defer w.Release()
			gv = w.view()
		}
		check("accumulate_grad", dev.Kernels().Binary(device.Add, d.view(), d.view(), gv))
		convertInto("accumulate_grad", dst.view(), d.view(), dev)
		return
	}
	check("accumulate_grad", dst.st.dev.Kernels().Binary(device.Add, dst.view(), dst.view(), g.view()))
}
