package optim

import (
	"fmt"
	"sync"

	"ferry"
	"ferry/device"
	"ferry/internal/optkernel"
)

// Engine is what every optimizer shares around its Algorithm: the
// parameters (deduplicated), the learning rate, each parameter's state and
// step count, the state's placement (on the parameters' device, or on the
// host with OnHost), the update's path to the device (Note [update
// paths]), and saving and restoring the state (State, SetState). An
// optimizer embeds an Engine and calls Init from its constructor.
//
// Ownership: the state tensors (and, with OnHost, the host slices) are
// the Engine's, made at a parameter's first update or by SetState and
// freed by Release or by SetState when it replaces them.
type Engine struct {
	alg    Algorithm
	params []*ferry.Tensor
	lr     float32
	state  map[*ferry.Tensor]*paramState
	// stateMu guards the state map: with the state placed per parameter
	// (KeepOnDevice), a host worker's steps (package offload's host steps
	// beside the device) and the device's steps on the training
	// goroutine add to it at once.
	stateMu sync.Mutex
	index   map[*ferry.Tensor]bool // built on first StepParam
	host    *hostStore             // the state, with OnHost; nil otherwise
	// onDevice names the parameters whose state stays on the device with
	// OnHost (KeepOnDevice); visiting those whose state is in host
	// tensors (paramState.tensors on the device's Host) and visits the
	// device for each update (StateVisits, visit.go), on the side streams
	// up and down (made at the first such update).
	onDevice, visiting map[string]bool
	up, down           device.Stream
	visitErr           error // a copy down that failed, seen outside a step
	// ahead is StateVisitsAhead's n; completed is the gradients of the
	// last backward in the order they completed, completing this one's so
	// far (a parameter seen twice starts the next), at is where in
	// completed the last one was found (gradComplete, visit.go).
	ahead                 int
	completed, completing []*ferry.Tensor
	at                    int
	// path, when not zero, forces one update path of Note [update
	// paths] (pathKernel…pathCopy): tests compare them.
	path int
}

// The update paths of Note [update paths], for Engine.path.
const (
	pathAuto = iota
	pathKernel
	pathLoop
	pathTensors
	pathCopy
)

// paramState is one parameter's state.
type paramState struct {
	step   int
	layout Layout
	// tensors are the slots on the parameter's device (device state);
	// host their memory in host slices (OnHost; nil on a device that
	// holds no data).
	tensors []*ferry.Tensor
	host    [][]byte
	// early, for state that visits the device: its copies there, made
	// ahead of the update (gradComplete), until the update takes them,
	// and the event their copy up completes at.
	early      []*ferry.Tensor
	earlyReady device.Event
	// down, for state that visits the device (StateVisits): the copy of
	// the last update's state back into tensors, in flight until it
	// completes; nil when none is.
	down device.Event
}

// Init sets e up to run alg over params (repeats dropped: a tied weight
// is updated once) at learning rate lr, with opts (OnHost).
func (e *Engine) Init(alg Algorithm, params []*ferry.Tensor, lr float32, opts ...Option) {
	e.alg, e.params, e.lr = alg, unique(params), lr
	e.state = map[*ferry.Tensor]*paramState{}
	if o := buildOptions(opts); o.host {
		e.host = newHostStore()
		e.onDevice, e.visiting = map[string]bool{}, map[string]bool{}
		for _, name := range o.onDevice {
			e.onDevice[name] = true
		}
		for _, name := range o.visiting {
			e.visiting[name] = !e.onDevice[name]
		}
		e.ahead = o.ahead
	}
}

// hostFor reports whether p's state is on the host and steps there.
func (e *Engine) hostFor(p *ferry.Tensor) bool {
	return e.host != nil && !e.onDevice[p.Name()] && !e.visiting[p.Name()]
}

// visits reports whether p's state is on the host and steps on the device
// (StateVisits).
func (e *Engine) visits(p *ferry.Tensor) bool { return e.host != nil && e.visiting[p.Name()] }

// StateOnDevice names the parameters whose state stays on the device
// although the optimizer was made with OnHost (KeepOnDevice), in the
// parameters' order.
func (e *Engine) StateOnDevice() []string {
	var out []string
	for _, p := range e.params {
		if e.host != nil && e.onDevice[p.Name()] {
			out = append(out, p.Name())
		}
	}
	return out
}

// StateVisiting names the parameters whose state is on the host and
// visits the device to step (StateVisits), in the parameters' order.
func (e *Engine) StateVisiting() []string {
	var out []string
	for _, p := range e.params {
		if e.visits(p) {
			out = append(out, p.Name())
		}
	}
	return out
}

// StateVisitsAhead is StateVisitsAhead's n.
func (e *Engine) StateVisitsAhead() int { return e.ahead }

// Params are the parameters, deduplicated, in order. The slice is the
// Engine's: do not change it.
func (e *Engine) Params() []*ferry.Tensor { return e.params }

// LR is the learning rate the next Step uses.
func (e *Engine) LR() float64 { return float64(e.lr) }

// SetLR sets the learning rate of the next steps.
func (e *Engine) SetLR(lr float64) { e.lr = float32(lr) }

// ZeroGrad drops the parameters' gradients, freeing their memory
// (PyTorch: zero_grad(set_to_none=True)).
func (e *Engine) ZeroGrad() {
	for _, p := range e.params {
		p.SetGrad(nil)
	}
}

// StateOnHost reports whether the optimizer was made with OnHost.
func (e *Engine) StateOnHost() bool { return e.host != nil }

// StateBytes is the state kept for one parameter tensor of n elements.
func (e *Engine) StateBytes(n int64) int64 { return e.alg.Layout([]int{int(n)}).Bytes() }

// Step updates every parameter that has a gradient.
func (e *Engine) Step() error {
	if b, ok := e.alg.(batchStepper); ok && e.host == nil && e.path == pathAuto {
		return b.stepBatched(e, e.lr)
	}
	lr := e.lr
	for _, p := range e.params {
		if err := e.step(p, lr); err != nil {
			return err
		}
	}
	return nil
}

// batchStepper is an algorithm of this package that updates many
// parameters in one launch where the device can (AdamW on CUDA).
type batchStepper interface {
	stepBatched(e *Engine, lr float32) error
}

// StepParam updates p from its gradient, if p is one of the parameters
// and has a gradient; otherwise it does nothing (see Stepper).
func (e *Engine) StepParam(p *ferry.Tensor) error { return e.stepParamLR(p, e.lr) }

func (e *Engine) stepParamLR(p *ferry.Tensor, lr float32) error {
	e.buildIndex()
	if !e.index[p] {
		return nil
	}
	return e.step(p, lr)
}

// buildIndex makes the set of parameters, if not made yet.
func (e *Engine) buildIndex() {
	if e.index == nil {
		e.index = make(map[*ferry.Tensor]bool, len(e.params))
		for _, q := range e.params {
			e.index[q] = true
		}
	}
}

// checker is an algorithm whose settings can be wrong in a way Init
// cannot see (fields set after the constructor): Step refuses them.
type checker interface{ check() error }

func (e *Engine) step(p *ferry.Tensor, lr float32) error {
	if e.visitErr != nil {
		return fmt.Errorf("optim: the state's copy back to the host failed: %w", e.visitErr)
	}
	if c, ok := e.alg.(checker); ok {
		if err := c.check(); err != nil {
			return err
		}
	}
	g := p.Grad()
	if g == nil {
		return nil
	}
	if err := checkParam(p); err != nil {
		return err
	}
	if e.hostFor(p) {
		return e.hostStep(p, g, lr)
	}
	if err := checkOnDevice(p); err != nil {
		return err
	}
	if e.visits(p) {
		return e.visitStep(p, g, lr)
	}
	return ferry.Catch(func() error {
		s, fresh := e.deviceState(p)
		s.step++
		if p.Numel() == 0 { // no elements (and, on the CPU, no block): nothing to update
			return nil
		}
		if err := e.update(p, g, s, KernelUpdate{LR: lr, Step: s.step, Fresh: fresh}); err != nil {
			return err
		}
		ferry.BumpVersion(p, e.alg.Name()+"_step")
		return pageOut(p)
	})
}

// deviceState returns p's state on p's device, made now (zero) if it did
// not exist, and whether it was. It panics with a *ferry.Error when the
// device is full.
func (e *Engine) deviceState(p *ferry.Tensor) (*paramState, bool) {
	if s := e.stateOf(p); s != nil {
		return s, false
	}
	s := &paramState{layout: e.alg.Layout(p.Shape())}
	for _, sl := range s.layout.Slots {
		t := ferry.ZerosOf(p.Device(), sl.DType, device.OptimizerState, sl.Shape...)
		s.tensors = append(s.tensors, t)
	}
	e.setStateOf(p, s)
	return s, true
}

// stateOf is p's state, or nil.
func (e *Engine) stateOf(p *ferry.Tensor) *paramState {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return e.state[p]
}

// setStateOf makes s p's state.
func (e *Engine) setStateOf(p *ferry.Tensor, s *paramState) {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	e.state[p] = s
}

// update runs one update of p on its device by the first path of Note
// [update paths] that the algorithm and the device allow.
func (e *Engine) update(p, g *ferry.Tensor, s *paramState, u KernelUpdate) error {
	k := p.Device().Kernels()
	if ks, ok := e.alg.(KernelStepper); ok && (e.path == pathAuto || e.path == pathKernel) {
		if done, err := ks.StepKernel(k, p, g, s.tensors, u); done || err != nil {
			return err
		}
	}
	if p.DType() != device.Float32 || g.DType() != device.Float32 {
		return fmt.Errorf("optim: parameter %q is %s with a %s gradient; %s updates float32", p.Name(), p.DType(), g.DType(), e.alg.Name())
	}
	n := p.Numel()
	if hl, ok := k.(device.HostLoopKernels); ok && (e.path == pathAuto || e.path == pathLoop) {
		views := []device.View{p.View(), g.View()}
		for _, t := range s.tensors {
			views = append(views, t.View())
		}
		sizes := slotBytes(s.layout)
		return hl.HostLoop(n, s.layout.Grain, views, s.layout.Traffic, func(mem [][]byte, lo, hi int) {
			up := &Update{W: Float32s(mem[0][:4*n]), G: Float32s(mem[1][:4*n]), LR: u.LR, Step: u.Step, Fresh: u.Fresh,
				State: make([][]byte, len(sizes))}
			for i, b := range sizes {
				up.State[i] = mem[2+i][:b]
			}
			e.alg.Update(up, lo, hi)
		})
	}
	if ts, ok := e.alg.(TensorStepper); ok && (e.path == pathAuto || e.path == pathTensors) {
		ts.StepTensors(p, g, s.tensors, u)
		return nil
	}
	return e.updateCopy(p, g, s, u)
}

// updateCopy is path 4 of Note [update paths]: the parameter, gradient
// and state downloaded, updated on the host, and the parameter and state
// uploaded back. On a device that holds no data nothing moves.
func (e *Engine) updateCopy(p, g *ferry.Tensor, s *paramState, u KernelUpdate) error {
	dev := p.Device()
	if !device.HasData(dev) {
		return nil
	}
	k := dev.Kernels()
	n := p.Numel()
	w, gr := make([]float32, n), make([]float32, n)
	if err := k.Download(asBytes(w), p.View()); err != nil {
		return err
	}
	if err := k.Download(asBytes(gr), g.View()); err != nil {
		return err
	}
	up := &Update{W: w, G: gr, LR: u.LR, Step: u.Step, Fresh: u.Fresh}
	for i, b := range slotBytes(s.layout) {
		m := alignedBytes(b)
		if err := k.Download(m, s.tensors[i].View()); err != nil {
			return err
		}
		up.State = append(up.State, m)
	}
	optkernel.Parallel(n, s.layout.Grain, func(lo, hi int) { e.alg.Update(up, lo, hi) })
	for i, t := range s.tensors {
		ferry.BumpVersion(t, e.alg.Name()+"_step")
		if err := k.Upload(t.View(), up.State[i]); err != nil {
			return err
		}
	}
	return k.Upload(p.View(), asBytes(w))
}

// slotBytes is each slot's size in bytes.
func slotBytes(l Layout) []int {
	out := make([]int, len(l.Slots))
	for i, s := range l.Slots {
		out[i] = device.Numel(s.Shape) * s.DType.Size()
	}
	return out
}

// alignedBytes is n zero bytes, 4-byte aligned (Float32s may view them).
func alignedBytes(n int) []byte {
	return asBytes(make([]float32, (n+3)/4))[:n]
}

// Release frees the state. Releasing again does nothing.
func (e *Engine) Release() {
	if e.host != nil {
		e.host.release()
	}
	e.settleVisits() //ferry:discard a failed copy leaves nothing to keep
	for p, s := range e.state {
		s.dropEarly()
		for _, t := range s.tensors {
			t.Release()
		}
		delete(e.state, p)
	}
}

// checkParam refuses a parameter or gradient the update cannot read
// as one run of elements.
func checkParam(p *ferry.Tensor) error {
	if !p.IsContiguous() {
		return fmt.Errorf("optim: parameter %q is not contiguous", p.Name())
	}
	if g := p.Grad(); g != nil && !g.IsContiguous() {
		return fmt.Errorf("optim: gradient of %q is not contiguous", p.Name())
	}
	return nil
}

// pageOut sends a parameter that lives in host memory (a HostCopier's)
// back there once the device has updated it, so that parameters do not
// gather on the device during the step.
func pageOut(p *ferry.Tensor) error {
	if hc, ok := p.Pager().(HostCopier); ok {
		_, err := hc.HostCopy(p)
		return err
	}
	return nil
}

// checkOnDevice refuses a gradient that is not on its parameter's device
// (offloaded to the host) for an optimizer whose state is on the device.
func checkOnDevice(p *ferry.Tensor) error {
	if g := p.Grad(); g != nil && g.Device() != p.Device() {
		return fmt.Errorf("optim: the gradient of %q is on %s, the parameter on %s (gradients offloaded to the host): "+
			"make the optimizer with optim.OnHost, which updates it there", p.Name(), g.Device().Name(), p.Device().Name())
	}
	return nil
}
