package nn

import (
	"fmt"

	"ferry"
)

// What the two decoder models, GPT (gpt.go) and Llama (llama.go), share:
// the check of a token batch, module scopes on a tape that may be absent,
// and running the blocks in turn, plainly, as segments or as checkpoints.

// tokenLength checks that tokens are [batch, seq] with 1 ≤ seq ≤ max
// (panicking with an *ferry.Error of op otherwise) and returns seq.
func tokenLength(op string, tokens *ferry.Tensor, max int) int {
	s := tokens.Shape()
	if len(s) != 2 {
		panic(&ferry.Error{Op: op, Msg: fmt.Sprintf("tokens must be [batch, seq], got %v", s)})
	}
	if T := s[1]; T > max || T < 1 {
		panic(&ferry.Error{Op: op, Msg: fmt.Sprintf("sequence of %d tokens; this model takes 1 to %d", T, max)})
	}
	return s[1]
}

// scopeFuncs are push and pop of module scopes on tp, doing nothing
// without a tape.
func scopeFuncs(tp *ferry.Tape) (push func(name string), pop func()) {
	push = func(name string) {
		if tp != nil {
			tp.PushModule(name)
		}
	}
	pop = func() {
		if tp != nil {
			tp.PopModule()
		}
	}
	return push, pop
}

// runBlocks runs x through n blocks in turn, block i (given x and then
// extra, inputs every block takes) in module scope prefix+i: plainly
// without a tape, as a checkpoint when checkpoint (recomputed in
// backward), else as a segment, recomputed if the tape's SegmentHooks say
// so. Each block's input is released once the block has run.
func runBlocks(tp *ferry.Tape, x *ferry.Tensor, n int, prefix string, checkpoint bool,
	block func(i int, xs ...*ferry.Tensor) *ferry.Tensor, extra ...*ferry.Tensor) *ferry.Tensor {
	for i := range n {
		in := append([]*ferry.Tensor{x}, extra...)
		f := func(xs ...*ferry.Tensor) *ferry.Tensor { return block(i, xs...) }
		var y *ferry.Tensor
		switch {
		case tp == nil:
			y = f(in...)
		case checkpoint:
			tp.PushModule(prefix + moduleName(i))
			y = tp.Checkpoint(f, in...)
			tp.PopModule()
		default:
			tp.PushModule(prefix + moduleName(i))
			y = tp.Segment(f, in...)
			tp.PopModule()
		}
		x.Release()
		x = y
	}
	return x
}

// scoped runs f(x) inside module scope name on x's tape.
func scoped(x *ferry.Tensor, name string, f func(*ferry.Tensor) *ferry.Tensor) *ferry.Tensor {
	tp := x.Tape()
	if tp == nil {
		return f(x)
	}
	tp.PushModule(name)
	defer tp.PopModule()
	return f(x)
}

// releaseInto returns f(x) and releases x.
func releaseInto(x *ferry.Tensor, f func(*ferry.Tensor) *ferry.Tensor) *ferry.Tensor {
	y := f(x)
	x.Release()
	return y
}
