package optim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"ferry"
	"ferry/device"
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

// CheckState validates st against the parameters and the algorithm's
// layouts without changing anything: every tensor names a parameter and
// one of its slots, with the slot's shape and dtype; the only scalars are
// "<parameter>.step" counts, for algorithms that keep them; and a
// parameter with any entry has all of its slots (and its step). Every
// problem is reported at once.
func (e *Engine) CheckState(st State) error {
	_, err := e.checkState(st)
	return err
}

// checkState is CheckState, returning the parameters by name.
func (e *Engine) checkState(st State) (map[string]*ferry.Tensor, error) {
	byName, err := paramNames(e.params)
	if err != nil {
		return nil, err
	}
	layouts := map[string]Layout{}
	layout := func(name string) Layout {
		l, ok := layouts[name]
		if !ok {
			l = e.alg.Layout(byName[name].Shape())
			layouts[name] = l
		}
		return l
	}
	var problems []string
	entries := map[string]int{}
	for k, t := range st.Tensors {
		pn, slot := splitKey(k)
		if _, ok := byName[pn]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected state tensor %q", k))
			continue
		}
		i := slices.IndexFunc(layout(pn).Slots, func(s Slot) bool { return s.Name == slot })
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("unexpected state tensor %q", k))
		case t == nil:
			problems = append(problems, fmt.Sprintf("state tensor %q is nil", k))
		case !slices.Equal(t.Shape(), layout(pn).Slots[i].Shape):
			problems = append(problems, fmt.Sprintf("state tensor %q has shape %v, %s keeps %v for parameter %q of shape %v",
				k, t.Shape(), e.alg.Name(), layout(pn).Slots[i].Shape, pn, byName[pn].Shape()))
		case t.DType() != layout(pn).Slots[i].DType:
			problems = append(problems, fmt.Sprintf("state tensor %q is %s, %s keeps %s", k, t.DType(), e.alg.Name(), layout(pn).Slots[i].DType))
		default:
			entries[pn]++
		}
	}
	for k, v := range st.Scalars {
		pn, slot := splitKey(k)
		if _, ok := byName[pn]; !ok || slot != "step" || !layout(pn).Step {
			problems = append(problems, fmt.Sprintf("unexpected state scalar %q", k))
		} else if math.IsNaN(v) || v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
			problems = append(problems, fmt.Sprintf("state scalar %q is %v, not a step count", k, v))
		} else {
			entries[pn]++
		}
	}
	for pn, n := range entries {
		l := layout(pn)
		want := len(l.Slots)
		names := make([]string, 0, want+1)
		for _, s := range l.Slots {
			names = append(names, s.Name)
		}
		if l.Step {
			want++
			names = append(names, "step")
		}
		if n != want {
			problems = append(problems, fmt.Sprintf("parameter %q has %d of its %d state entries (%s)", pn, n, want, strings.Join(names, ", ")))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, errors.New("optim: state does not match the parameters:\n  " + strings.Join(problems, "\n  "))
	}
	return byName, nil
}

// State returns the state: each slot of each parameter that has state as
// "<parameter>.<slot>", and the step counts as "<parameter>.step" for
// algorithms that keep them (see State's note on ownership).
func (e *Engine) State() State {
	st := State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	if err := e.settleVisits(); err != nil && e.visitErr == nil {
		e.visitErr = err // the next step returns it: the state may be stale
	}
	if h := e.host; h != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.dropShown()
	}
	for p, s := range e.state {
		for i, sl := range s.layout.Slots {
			key := p.Name() + "." + sl.Name
			if !e.hostFor(p) {
				st.Tensors[key] = s.tensors[i]
				continue
			}
			var data []byte
			if s.host != nil {
				data = s.host[i]
			}
			st.Tensors[key] = e.host.tensor(p, sl, data)
		}
		if s.layout.Step {
			st.Scalars[p.Name()+".step"] = float64(s.step)
		}
	}
	return st
}

// SetState replaces the state with copies of st's values (which may be on
// any device: the host, where a checkpoint loader or an OnHost
// optimizer's State puts them). It checks st first (CheckState) and
// changes nothing if anything is wrong.
func (e *Engine) SetState(st State) (err error) {
	byName, err := e.checkState(st)
	if err != nil {
		return err
	}
	fresh := map[*ferry.Tensor]*paramState{}
	defer func() {
		if err != nil {
			for _, s := range fresh {
				for _, t := range s.tensors {
					if t != nil {
						t.Release()
					}
				}
			}
		}
	}()
	for name, p := range byName {
		l := e.alg.Layout(p.Shape())
		if len(l.Slots) == 0 && !l.Step {
			continue
		}
		s := &paramState{layout: l}
		if step, ok := st.Scalars[name+".step"]; ok {
			s.step = int(step)
		} else if len(l.Slots) == 0 || st.Tensors[name+"."+l.Slots[0].Name] == nil {
			continue // no state for p
		}
		fresh[p] = s
		for _, sl := range l.Slots {
			src := st.Tensors[name+"."+sl.Name]
			if e.hostFor(p) {
				if device.HasData(p.Device()) {
					b, err := rawBytes(src)
					if err != nil {
						return err
					}
					s.host = append(s.host, b)
				}
				continue
			}
			dev := p.Device()
			if e.visits(p) {
				dev = dev.Host()
			}
			t, err := copyState(dev, sl, src)
			if err != nil {
				return err
			}
			s.tensors = append(s.tensors, t)
		}
	}
	if e.host != nil {
		e.host.mu.Lock()
		e.host.dropShown()
		e.host.mu.Unlock()
	}
	e.Release()
	e.state = fresh
	return nil
}

// rawBytes copies a tensor's memory into 4-byte aligned host bytes.
func rawBytes(t *ferry.Tensor) (b []byte, err error) {
	err = ferry.Catch(func() error {
		raw := t.RawBytes()
		b = alignedBytes(len(raw))
		copy(b, raw)
		return nil
	})
	return b, err
}

// copyState returns a new optimizer-state tensor for slot sl on dev
// holding src's values. src may be on another device (the host).
func copyState(dev device.Device, sl Slot, src *ferry.Tensor) (t *ferry.Tensor, err error) {
	err = ferry.Catch(func() error {
		t = ferry.ZerosOf(dev, sl.DType, device.OptimizerState, sl.Shape...)
		switch {
		case !device.HasData(dev) || t.Numel() == 0:
		case src.Device() == dev && sl.DType == device.Float32:
			t.CopyFrom(src)
		default:
			t.SetRawBytes(src.RawBytes())
		}
		return nil
	})
	if err != nil && t != nil {
		t.Release()
		t = nil
	}
	return t, err
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
