package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"ferry"
)

// State is an optimizer's state in a form that can be written to disk and
// read back: tensors keyed "<parameter name>.<slot>" (PyTorch's slot names:
// "momentum_buffer" for SGD, "exp_avg" and "exp_avg_sq" for AdamW) and
// scalars keyed the same way ("<parameter name>.step"). The tensors are the
// optimizer's own: they stay valid until the optimizer is released or its
// state replaced, and the caller must not release them. An optimizer with
// its state on the host (OnHost) hands out copies on the parameters' host
// device (Device.Host), made by State and released by the optimizer at its
// next State, SetState, update or Release: read them before stepping.
type State struct {
	Tensors map[string]*ferry.Tensor
	Scalars map[string]float64
}

// Stateful is an optimizer whose state can be saved and restored, for
// checkpoints that resume exactly.
type Stateful interface {
	Optimizer
	State() State
	// SetState replaces the state with copies of st's values. It checks
	// every entry against the parameters first and changes nothing if any
	// is wrong, reporting all the problems at once.
	SetState(st State) error
}

// paramNames maps each parameter to its name, failing on unnamed or
// repeated names: state is keyed by name, so names must be unique.
func paramNames(params []*ferry.Tensor) (map[string]*ferry.Tensor, error) {
	byName := make(map[string]*ferry.Tensor, len(params))
	for i, p := range params {
		n := p.Name()
		if n == "" {
			return nil, fmt.Errorf("optim: parameter %d has no name; name parameters (nn modules do) to save optimizer state", i)
		}
		if _, dup := byName[n]; dup {
			return nil, fmt.Errorf("optim: two parameters are named %q; optimizer state is keyed by name", n)
		}
		byName[n] = p
	}
	return byName, nil
}

// splitKey splits "<param>.<slot>" at its last dot.
func splitKey(k string) (param, slot string) {
	i := strings.LastIndexByte(k, '.')
	if i < 0 {
		return k, ""
	}
	return k[:i], k[i+1:]
}

// checkState validates st against params: known parameters, known slots,
// shapes equal to the parameter's, scalars finite non-negative integers.
func checkState(params []*ferry.Tensor, st State, tensorSlots, scalarSlots []string) (map[string]*ferry.Tensor, error) {
	byName, err := paramNames(params)
	if err != nil {
		return nil, err
	}
	var problems []string
	has := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	for k, t := range st.Tensors {
		pn, slot := splitKey(k)
		p, ok := byName[pn]
		switch {
		case !ok || !has(tensorSlots, slot):
			problems = append(problems, fmt.Sprintf("unexpected state tensor %q", k))
		case t == nil:
			problems = append(problems, fmt.Sprintf("state tensor %q is nil", k))
		case !slices.Equal(t.Shape(), p.Shape()):
			problems = append(problems, fmt.Sprintf("state tensor %q has shape %v, parameter %q has %v", k, t.Shape(), pn, p.Shape()))
		case t.DType() != p.DType():
			problems = append(problems, fmt.Sprintf("state tensor %q is %s, parameter %q is %s", k, t.DType(), pn, p.DType()))
		}
	}
	for k, v := range st.Scalars {
		pn, slot := splitKey(k)
		if _, ok := byName[pn]; !ok || !has(scalarSlots, slot) {
			problems = append(problems, fmt.Sprintf("unexpected state scalar %q", k))
		} else if math.IsNaN(v) || v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
			problems = append(problems, fmt.Sprintf("state scalar %q is %v, not a step count", k, v))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, errors.New("optim: state does not match the parameters:\n  " + strings.Join(problems, "\n  "))
	}
	return byName, nil
}

// copyState returns a new optimizer-state tensor on p's device holding
// src's values. src may be on another device (the host, where an OnHost
// optimizer's State puts its tensors).
func copyState(p, src *ferry.Tensor) (t *ferry.Tensor, err error) {
	err = ferry.Catch(func() error {
		t = stateLike(p)
		if src.Device() == p.Device() {
			t.CopyFrom(src)
			return nil
		}
		v, err := values(p, src)
		if err != nil || len(v) == 0 {
			return err
		}
		ferry.BumpVersion(t, "copy_")
		return p.Device().Kernels().Upload(t.View(), asBytes(v))
	})
	if err != nil && t != nil {
		t.Release()
		t = nil
	}
	return t, err
}

// State returns the momentum buffers ("<name>.momentum_buffer").
func (o *SGD) State() State {
	if o.host != nil {
		return o.hostState()
	}
	st := State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	for p, b := range o.buf {
		st.Tensors[p.Name()+".momentum_buffer"] = b
	}
	return st
}

// SetState replaces the momentum buffers with copies of st's.
func (o *SGD) SetState(st State) error {
	byName, err := checkState(o.Params, st, []string{"momentum_buffer"}, nil)
	if err != nil {
		return err
	}
	if o.host != nil {
		slots := map[*ferry.Tensor]*hostSlot{}
		for k, src := range st.Tensors {
			pn, _ := splitKey(k)
			p := byName[pn]
			v, err := values(p, src)
			if err != nil {
				return err
			}
			slots[p] = &hostSlot{a: v}
		}
		o.Release()
		o.host.slots = slots
		return nil
	}
	fresh := map[*ferry.Tensor]*ferry.Tensor{}
	for k, src := range st.Tensors {
		pn, _ := splitKey(k)
		p := byName[pn]
		t, err := copyState(p, src)
		if err != nil {
			for _, t := range fresh {
				t.Release()
			}
			return err
		}
		fresh[p] = t
	}
	o.Release()
	o.buf = fresh
	return nil
}

// State returns the moments ("<name>.exp_avg", "<name>.exp_avg_sq") and the
// per-parameter step counts ("<name>.step").
func (o *AdamW) State() State {
	if o.host != nil {
		return o.hostState()
	}
	st := State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	for p, s := range o.state {
		st.Tensors[p.Name()+".exp_avg"] = s.expAvg
		st.Tensors[p.Name()+".exp_avg_sq"] = s.expSq
		st.Scalars[p.Name()+".step"] = float64(s.step)
	}
	return st
}

// SetState replaces the moments and step counts with copies of st's. Each
// parameter with state needs all three entries.
func (o *AdamW) SetState(st State) error {
	byName, err := checkState(o.Params, st, []string{"exp_avg", "exp_avg_sq"}, []string{"step"})
	if err != nil {
		return err
	}
	var problems []string
	for name := range byName {
		n := 0
		for _, k := range []string{name + ".exp_avg", name + ".exp_avg_sq"} {
			if _, ok := st.Tensors[k]; ok {
				n++
			}
		}
		if _, ok := st.Scalars[name+".step"]; ok {
			n++
		}
		if n != 0 && n != 3 {
			problems = append(problems, fmt.Sprintf("parameter %q has %d of its 3 state entries (exp_avg, exp_avg_sq, step)", name, n))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New("optim: " + strings.Join(problems, "; "))
	}
	if o.host != nil {
		slots := map[*ferry.Tensor]*hostSlot{}
		for name, p := range byName {
			step, ok := st.Scalars[name+".step"]
			if !ok {
				continue
			}
			s := &hostSlot{step: int(step)}
			if s.a, err = values(p, st.Tensors[name+".exp_avg"]); err != nil {
				return err
			}
			if s.b, err = values(p, st.Tensors[name+".exp_avg_sq"]); err != nil {
				return err
			}
			slots[p] = s
		}
		o.Release()
		o.host.slots = slots
		return nil
	}
	fresh := map[*ferry.Tensor]*adamState{}
	release := func() {
		for _, s := range fresh {
			if s.expAvg != nil {
				s.expAvg.Release()
			}
			if s.expSq != nil {
				s.expSq.Release()
			}
		}
	}
	for name, p := range byName {
		step, ok := st.Scalars[name+".step"]
		if !ok {
			continue
		}
		s := &adamState{step: int(step)}
		fresh[p] = s
		if s.expAvg, err = copyState(p, st.Tensors[name+".exp_avg"]); err != nil {
			release()
			return err
		}
		if s.expSq, err = copyState(p, st.Tensors[name+".exp_avg_sq"]); err != nil {
			release()
			return err
		}
	}
	o.Release()
	o.state = fresh
	return nil
}

// GradNorm returns the global L2 norm of params' gradients (parameters
// without a gradient skipped, a parameter listed twice counted once): NaN
// or +Inf when some gradient is not finite.
func GradNorm(params []*ferry.Tensor) (norm float64, err error) {
	params = unique(params)
	err = ferry.Catch(func() error {
		var sumSq float64
		for _, p := range params {
			g := p.Grad()
			if g == nil {
				continue
			}
			sq := ferry.Square(g)
			s := ferry.Sum(sq)
			sumSq += float64(s.Item())
			sq.Release()
			s.Release()
		}
		norm = math.Sqrt(sumSq)
		return nil
	})
	return norm, err
}

// ClipGradNorm scales the gradients of params so that their global L2 norm
// is at most maxNorm, as PyTorch's torch.nn.utils.clip_grad_norm_ does
// (coefficient maxNorm/(norm+1e-6), applied only when below 1), and returns
// the norm before clipping. Parameters without a gradient are skipped; a
// parameter listed twice counts once. A non-finite norm is returned with an
// error and the gradients are left as they were.
func ClipGradNorm(params []*ferry.Tensor, maxNorm float64) (norm float64, err error) {
	if !(maxNorm > 0) || math.IsInf(maxNorm, 1) {
		return 0, fmt.Errorf("optim.ClipGradNorm: max norm must be positive and finite, got %v", maxNorm)
	}
	params = unique(params)
	if norm, err = GradNorm(params); err != nil {
		return norm, err
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, fmt.Errorf("optim.ClipGradNorm: the gradients' norm is %v", norm)
	}
	coef := maxNorm / (norm + 1e-6)
	if coef >= 1 {
		return norm, nil
	}
	err = ferry.Catch(func() error {
		for _, p := range params {
			if g := p.Grad(); g != nil {
				g.ScaleInPlace(float32(coef))
			}
		}
		return nil
	})
	return norm, err
}
