package dist

import (
	"fmt"
	"slices"
	"strings"

	"ferry"
	"ferry/device"
	"ferry/optim"
)

// FullShardOptimizer is the optimizer of ZeRO-3: an optimizer over a
// FullShard's shard tensors (FullShard.Shards), which it steps, seen from
// outside as the optimizer of the whole parameters. Its state is this
// rank's part alone; GatherState assembles the whole state under the
// names and shapes an unsharded optimizer has, and SetState takes such a
// state and keeps this rank's part, so checkpoints load across ZeRO
// stages and rank counts.
//
// A shard's state is its part of the whole parameter's, slot by slot:
// for an elementwise optimizer (SGD, AdamW, Lion) its elements', for a
// block-wise one (AdamW8bit) its blocks' (shards split at ShardGrain,
// a multiple of the block). FullShard.Optimizer refuses an optimizer
// whose state does not split so.
type FullShardOptimizer struct {
	f      *FullShard
	inner  optim.Stepper
	layout func(shape []int) optim.Layout
}

// layouter is an optimizer that says what state it keeps for a parameter
// of a shape (every optimizer of package optim is its own Algorithm).
type layouter interface {
	Layout(shape []int) optim.Layout
}

// Optimizer wraps inner, an optimizer over f.Shards() (made after
// NewFullShard, with no step taken), as the optimizer of f's parameters.
// inner must be optim.Stateful and say its layout (optim.Algorithm's
// Layout), and its state must split by elements.
func (f *FullShard) Optimizer(inner optim.Stepper) (*FullShardOptimizer, error) {
	l, ok := inner.(layouter)
	if !ok {
		return nil, fmt.Errorf("dist: FullShard.Optimizer: %T does not say what state it keeps (a Layout method), which sharding its state needs", inner)
	}
	if _, ok := inner.(optim.Stateful); !ok {
		return nil, fmt.Errorf("dist: FullShard.Optimizer: %T cannot save its state (optim.Stateful)", inner)
	}
	if h, ok := inner.(optim.HostPlaced); f.onHost && (!ok || !h.StateOnHost()) {
		return nil, fmt.Errorf("dist: FullShard.Optimizer: the shards are in host memory (ShardsOnHost) and %s keeps its state on the device: build it with optim.OnHost, so that it steps them there", inner.Name())
	}
	o := &FullShardOptimizer{f: f, inner: inner, layout: l.Layout}
	for _, fp := range f.params {
		if _, err := o.split(fp); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// slotPart is where one rank's part of a state slot lies in the whole
// slot's bytes.
type slotPart struct{ off, n int64 }

// split is, per slot of fp's layout, each rank's part of the whole slot.
func (o *FullShardOptimizer) split(fp *fsParam) ([][]slotPart, error) {
	whole := o.layout(fp.p.Shape())
	size := o.f.c.Size()
	parts := make([][]slotPart, len(whole.Slots))
	for k, s := range whole.Slots {
		var off int64
		parts[k] = make([]slotPart, size)
		for r := 0; r < size; r++ {
			lo, hi := min(r*fp.per, fp.n), min((r+1)*fp.per, fp.n)
			var n int64
			if hi > lo {
				l := o.layout([]int{hi - lo})
				if len(l.Slots) != len(whole.Slots) || l.Slots[k].DType != s.DType {
					return nil, fmt.Errorf("dist: FullShard.Optimizer: %s keeps other state for a shard of %d elements than for the whole parameter %q of %d, "+
						"so the state cannot be split by elements (an optimizer that quantises only large parameters: quantise all of them, as adamw8bit does with min_8bit_size=1, or shard with ZeRO 1 or 2)", o.inner.Name(), hi-lo, fp.p.Name(), fp.n)
				}
				n = int64(device.Numel(l.Slots[k].Shape)) * int64(s.DType.Size())
			}
			parts[k][r] = slotPart{off, n}
			off += n
		}
		if want := int64(device.Numel(s.Shape)) * int64(s.DType.Size()); off != want {
			return nil, fmt.Errorf("dist: FullShard.Optimizer: %s's %s state of parameter %q does not split by elements (%d bytes whole, %d in shards)", o.inner.Name(), s.Name, fp.p.Name(), want, off)
		}
	}
	return parts, nil
}

// Inner is the optimizer over the shards.
func (o *FullShardOptimizer) Inner() optim.Stepper { return o.inner }

// Name is the inner optimizer's.
func (o *FullShardOptimizer) Name() string { return o.inner.Name() }

// Hyper is the inner optimizer's.
func (o *FullShardOptimizer) Hyper() map[string]any { return o.inner.Hyper() }

// LR is the inner optimizer's learning rate.
func (o *FullShardOptimizer) LR() float64 { return o.inner.LR() }

// SetLR sets the inner optimizer's learning rate (every rank alike).
func (o *FullShardOptimizer) SetLR(lr float64) { o.inner.SetLR(lr) }

// Release frees the inner optimizer's state, once the shards' steps
// beside the device have run (an error of one is the next Wait's).
func (o *FullShardOptimizer) Release() {
	if err := o.f.settleSteps(); err != nil {
		o.f.noteErr(err)
	}
	o.inner.Release()
}

// ZeroGrad drops the shards' gradients and any whole gradient left on
// the parameters (a step that failed before Wait), once the shards'
// steps beside the device have run (an error of one is the next Wait's).
func (o *FullShardOptimizer) ZeroGrad() {
	if err := o.f.settleSteps(); err != nil {
		o.f.noteErr(err)
	}
	o.inner.ZeroGrad()
	for _, fp := range o.f.params {
		fp.p.SetGrad(nil)
	}
}

// StateOnHost is the inner optimizer's (optim.HostPlaced).
func (o *FullShardOptimizer) StateOnHost() bool {
	h, ok := o.inner.(optim.HostPlaced)
	return ok && h.StateOnHost()
}

// StateBytes is the bytes of optimizer state this rank holds.
func (o *FullShardOptimizer) StateBytes() int64 {
	var n int64
	for _, t := range o.inner.(optim.Stateful).State().Tensors {
		n += t.StorageBytes()
	}
	return n
}

// Step updates this rank's shards from their gradients (after
// FullShard.Wait). It is a collective: if the update fails on any rank,
// every rank returns an error, so the ranks stay matched.
func (o *FullShardOptimizer) Step() error {
	return agreeStep(o.f.c, o.inner.Step(), "dist: FullShardOptimizer: the optimizer step failed on rank %d")
}

// State is this rank's part of the state, keyed by the parameters' names
// with the shards' shapes (the inner optimizer's).
// The shards' steps beside the device (FullShard.SetStepBeside) have run
// first; an error of one is the next Wait's.
func (o *FullShardOptimizer) State() optim.State {
	if err := o.f.settleSteps(); err != nil {
		o.f.noteErr(err)
	}
	return o.inner.(optim.Stateful).State()
}

// CheckState checks a whole state (as SetState takes it) against the
// parameters and the optimizer's layout, changing nothing.
func (o *FullShardOptimizer) CheckState(st optim.State) error {
	byName := map[string]*fsParam{}
	for _, fp := range o.f.params {
		byName[fp.p.Name()] = fp
	}
	var problems []string
	for k, t := range st.Tensors {
		pn, slot := splitStateKey(k)
		fp := byName[pn]
		if fp == nil {
			problems = append(problems, fmt.Sprintf("unexpected state tensor %q", k))
			continue
		}
		l := o.layout(fp.p.Shape())
		i := slices.IndexFunc(l.Slots, func(s optim.Slot) bool { return s.Name == slot })
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("unexpected state tensor %q", k))
		case t == nil:
			problems = append(problems, fmt.Sprintf("state tensor %q is nil", k))
		case !slices.Equal(t.Shape(), l.Slots[i].Shape) || t.DType() != l.Slots[i].DType:
			problems = append(problems, fmt.Sprintf("state tensor %q is %s %v, %s keeps %s %v for parameter %q",
				k, t.DType(), t.Shape(), o.Name(), l.Slots[i].DType, l.Slots[i].Shape, pn))
		}
	}
	for k := range st.Scalars {
		if pn, slot := splitStateKey(k); byName[pn] == nil || slot != "step" {
			problems = append(problems, fmt.Sprintf("unexpected state scalar %q", k))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("dist: FullShardOptimizer: state does not match the parameters:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func splitStateKey(k string) (param, slot string) {
	i := strings.LastIndexByte(k, '.')
	if i < 0 {
		return k, ""
	}
	return k[:i], k[i+1:]
}

// SetState takes a whole optimizer state (as GatherState or an unsharded
// optimizer's State gives, written by any number of ranks) and hands this
// rank's part of each entry to the inner optimizer. Not a collective.
func (o *FullShardOptimizer) SetState(st optim.State) error {
	if err := o.f.settleSteps(); err != nil {
		return err
	}
	if err := o.CheckState(st); err != nil {
		return err
	}
	part := optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	var made []*ferry.Tensor
	defer func() {
		for _, t := range made {
			t.Release()
		}
	}()
	rank := o.f.c.Rank()
	err := ferry.Catch(func() error {
		for _, fp := range o.f.params {
			if fp.shard == nil {
				continue
			}
			name := fp.p.Name()
			parts, err := o.split(fp)
			if err != nil {
				return err
			}
			whole := o.layout(fp.p.Shape())
			mine := o.layout([]int{fp.hi - fp.lo})
			for k, s := range whole.Slots {
				t := st.Tensors[name+"."+s.Name]
				if t == nil {
					continue
				}
				pr := parts[k][rank]
				raw := t.RawBytes()
				piece := ferry.ZerosOf(t.Device(), s.DType, device.OptimizerState, mine.Slots[k].Shape...)
				made = append(made, piece)
				if pr.n > 0 {
					piece.SetRawBytes(raw[pr.off : pr.off+pr.n])
				}
				part.Tensors[name+"."+s.Name] = piece
			}
			if v, ok := st.Scalars[name+".step"]; ok {
				part.Scalars[name+".step"] = v
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return o.inner.(optim.Stateful).SetState(part)
}

// GatherState assembles the whole optimizer state on root, for a
// checkpoint that any number of ranks (or one process) can load, under
// the names and shapes of an unsharded optimizer. A collective. On root
// it returns the whole state (its tensors made on the host; release
// frees them); on the other ranks an empty state.
func (o *FullShardOptimizer) GatherState(root int) (st optim.State, release func(), err error) {
	if err := o.f.settleSteps(); err != nil {
		return optim.State{}, func() {}, err
	}
	st = optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	var made []*ferry.Tensor
	release = func() {
		for _, t := range made {
			t.Release()
		}
		made = nil
	}
	c := o.f.c
	if err := CheckRoot(root, c.Size()); err != nil {
		return st, release, err
	}
	local := o.State()
	// Which parameters have state, and their step counts: three words a
	// parameter (has, and the step as two 16-bit halves, exact in
	// float32), from every rank.
	params := o.f.params
	head := make([]float32, 3*len(params))
	for i, fp := range params {
		name := fp.p.Name()
		has := false
		for k := range local.Tensors {
			if pn, _ := splitStateKey(k); pn == name {
				has = true
				break
			}
		}
		if has {
			head[3*i] = 1
		}
		if v, ok := local.Scalars[name+".step"]; ok {
			s := uint32(v)
			head[3*i+1], head[3*i+2] = float32(s>>16), float32(s&0xffff)
		}
	}
	heads := make([]float32, len(head)*c.Size())
	if err := c.AllGather(head, heads).Synchronize(); err != nil {
		return st, release, err
	}
	me := c.Rank()
	err = ferry.Catch(func() error {
		for i, fp := range params {
			// The ranks with a share must agree whether it has state.
			var with, without []int
			for r := 0; r < c.Size(); r++ {
				if min((r+1)*fp.per, fp.n) <= min(r*fp.per, fp.n) {
					continue
				}
				if heads[r*len(head)+3*i] != 0 {
					with = append(with, r)
				} else {
					without = append(without, r)
				}
			}
			if len(with) == 0 {
				continue
			}
			if len(without) > 0 {
				return fmt.Errorf("dist: GatherState: parameter %q has optimizer state on ranks %v but none on ranks %v", fp.p.Name(), with, without)
			}
			name := fp.p.Name()
			if r0 := with[0] * len(head); o.layout(fp.p.Shape()).Step && me == root {
				st.Scalars[name+".step"] = float64(uint32(heads[r0+3*i+1])<<16 | uint32(heads[r0+3*i+2]))
			}
			parts, err := o.split(fp)
			if err != nil {
				return err
			}
			for k, s := range o.layout(fp.p.Shape()).Slots {
				var longest int64
				for _, pr := range parts[k] {
					longest = max(longest, pr.n)
				}
				words := int((longest + 3) / 4)
				send := make([]float32, words)
				if t := local.Tensors[name+"."+s.Name]; t != nil && fp.shard != nil {
					if t.Bytes() != parts[k][me].n {
						return fmt.Errorf("dist: GatherState: state %q holds %d bytes, its part is %d", name+"."+s.Name, t.Bytes(), parts[k][me].n)
					}
					copy(f32bytes(send), t.RawBytes())
				}
				recv := make([]float32, words*c.Size())
				if err := c.AllGather(send, recv).Synchronize(); err != nil {
					return err
				}
				if me != root {
					continue
				}
				raw := make([]byte, device.Numel(s.Shape)*s.DType.Size())
				all := f32bytes(recv)
				for r, pr := range parts[k] {
					copy(raw[pr.off:pr.off+pr.n], all[r*4*words:])
				}
				t := ferry.ZerosOf(fp.p.Device().Host(), s.DType, device.OptimizerState, s.Shape...)
				made = append(made, t)
				if t.Numel() > 0 {
					t.SetRawBytes(raw)
				}
				st.Tensors[name+"."+s.Name] = t
			}
		}
		return nil
	})
	if err != nil {
		release()
		st = optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	}
	return st, release, err
}
