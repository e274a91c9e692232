package optim

import (
	"fmt"
	"sync"
	"unsafe"

	"ferry"
	"ferry/device"
	"ferry/internal/optkernel"
)

// Option changes how an optimizer is built (New, NewSGD, NewAdamW, …).
type Option func(*options)

type options struct {
	host     bool
	onDevice []string // with host: the parameters whose state stays on the device
	visiting []string // with host: the parameters whose state visits the device to step
	ahead    int      // how many gradients ahead of its update a visiting state comes up
}

func buildOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// OnHost keeps the optimizer's state (SGD's momentum, Adam's moments) in
// host memory and runs the update on the host's cores, as DeepSpeed's
// ZeRO-Offload and torchao's CPUOffloadOptimizer do: for each parameter,
// its gradient and values are downloaded, updated with the state on the
// host, and the values uploaded back. The device then holds no optimizer
// state (8 bytes a parameter for AdamW), at the price of moving 12 bytes a
// parameter over the host link each step.
//
// The update is bit-identical to the device optimizer's on the CPU device
// (the same float32 operations in the same order), and State and SetState
// use the same names, shapes and scalars, so a checkpoint written with the
// state on the host resumes with it on the device and the reverse.
// StepParam works as on the device, so the state may stay on the host
// with the optimizer inside backward (InBackward).
func OnHost() Option { return func(o *options) { o.host = true } }

// KeepOnDevice, with OnHost, keeps the state of the parameters named (by
// their Name) on the device, where they step as without OnHost: the
// state is placed per parameter. A planner keeps there the state of the
// parameters whose update would otherwise end the step on the host's
// critical path (package plan: the embedding, updated last in backward
// and used first in forward). State and SetState are as for one
// placement; a name that is no parameter's is ignored. Without OnHost it
// does nothing.
func KeepOnDevice(names ...string) Option {
	return func(o *options) { o.onDevice = append(o.onDevice, names...) }
}

// StateVisits, with OnHost, keeps the state of the parameters named in
// host memory but steps them on the device, as without OnHost: for each
// update the state is copied up, the device's update runs, and the state
// goes back down on a side stream while the device goes on (the next
// update of that parameter, State and SetState wait for it). The device
// holds the state only around the update; the parameter's gradient must
// be on the device, as with KeepOnDevice, and a parameter in host memory
// (offload.Streamer) is brought in for the update and left on the device
// after it, for its next use. A planner sends this way the state of a
// parameter whose host update would end the step on the critical path
// where its state does not fit on the device for the whole step (package
// plan: the embedding, its gradient the last backward completes and its
// values the first forward needs): the state crosses the link both ways,
// 16 bytes a parameter for AdamW, which takes less than the host's
// update. KeepOnDevice wins for a name given to both; without OnHost it
// does nothing.
func StateVisits(names ...string) Option {
	return func(o *options) { o.visiting = append(o.visiting, names...) }
}

// StateVisitsAhead, with StateVisits and the optimizer inside backward
// (InBackward), starts each visiting state's copy up n gradients before
// its parameter's completes, in the order the last backward completed
// them, so that the copy overlaps backward's compute instead of delaying
// the update; the state is then on the device that much longer. 0 (the
// default) copies it up at the update.
func StateVisitsAhead(n int) Option { return func(o *options) { o.ahead = min(max(n, 0), 1<<30) } }

// StateOn returns the option that places an optimizer's state: "device"
// (the default: no option) or "host" (OnHost).
func StateOn(where string) (Option, error) {
	switch where {
	case "device", "":
		return func(*options) {}, nil
	case "host":
		return OnHost(), nil
	}
	return nil, fmt.Errorf("optim: optimizer state %q: want device or host", where)
}

// HostPlaced is implemented by optimizers that may keep their state on
// the host (every optimizer built on Engine): a checkpoint loader reads such an optimizer's
// state into host memory instead of the device's.
type HostPlaced interface {
	// StateOnHost reports whether the state is on the host (OnHost).
	StateOnHost() bool
}

// hostStore is the host side of an OnHost optimizer: the staging buffers
// and the tensors State hands out. The state itself is in the Engine's
// paramState.host slices.
//
// Ownership: every slice here and in paramState.host belongs to the
// optimizer, and nothing outside it holds one: State hands out tensors
// holding copies. A parameter's slots are made at its first update (or by
// SetState) and dropped by Release, or by SetState when it replaces them;
// dropped slices are reclaimed by Go's garbage collector (they are
// ordinary host memory, not device memory, so the collector may decide
// when). The staging buffers are grown to the largest parameter updated
// and dropped by Release too.
//
// On a device that holds no data (meta) no slice is made: the Engine
// keeps the step counts and layouts only, so planning a model of any size
// costs no host memory, and HostStateBytes still says what the state
// would hold.
type hostStore struct {
	// mu is held by each update: an optimizer inside backward may update
	// some parameters on offload.Streamer's host worker and others on the
	// caller's goroutine at once. (State, SetState and Release are called
	// when no update runs: after the Streamer's Settle.)
	mu sync.Mutex
	// w and g stage one parameter's values and gradient between the
	// download and the upload.
	w, g []float32
	// shown are the tensors the last State call made, released by the
	// next State call, SetState, Release or update.
	shown []*ferry.Tensor
}

func newHostStore() *hostStore { return &hostStore{} }

// HostCopier is the pager of a parameter that lives in host memory
// (offload.Streamer): an optimizer with its state on the host updates the
// host copy in place, and the device copy is made from it at the next use.
type HostCopier interface {
	// HostCopy returns p's host copy, p's device copy (if any) freed and,
	// if changed, written back first; nil if p does not live on the host.
	HostCopy(p *ferry.Tensor) (*ferry.Tensor, error)
}

// staged is one parameter's values and gradient on the host, and whether
// each was already there (a streamed parameter's host copy, an offloaded
// gradient) or was downloaded.
type staged struct {
	w, g             []float32 // nil on a device without data, or for no elements
	wOnHost, gOnHost bool
}

// stage finds p's values and its gradient g on the host: a streamed
// parameter's host copy and an offloaded gradient in place, the others
// downloaded into the staging buffers. On a device without data, or for
// an empty parameter, its slices are nil and nothing moves.
func (h *hostStore) stage(p, g *ferry.Tensor) (s staged, err error) {
	if p.DType() != device.Float32 || g.DType() != device.Float32 {
		return s, fmt.Errorf("optim: parameter %q is %s with a %s gradient; the host optimizer updates float32", p.Name(), p.DType(), g.DType())
	}
	n := p.Numel()
	if g.Numel() != n {
		return s, fmt.Errorf("optim: gradient of %q has %d elements, the parameter %d", p.Name(), g.Numel(), n)
	}
	var master *ferry.Tensor
	if hc, ok := p.Pager().(HostCopier); ok {
		if master, err = hc.HostCopy(p); err != nil {
			return s, err
		}
	}
	s.wOnHost, s.gOnHost = master != nil, g.Device() != p.Device()
	if n == 0 || !device.HasData(p.Device()) {
		return s, nil
	}
	if cap(h.w) < n {
		h.w, h.g = make([]float32, n), make([]float32, n)
	}
	k := p.Device().Kernels()
	if s.wOnHost {
		if s.w, err = hostFloats(master); err != nil {
			return s, err
		}
	} else {
		s.w = h.w[:n]
		if err := k.Download(asBytes(s.w), p.View()); err != nil {
			return s, err
		}
	}
	if s.gOnHost {
		s.g, err = hostFloats(g)
	} else {
		s.g = h.g[:n]
		err = k.Download(asBytes(s.g), g.View())
	}
	return s, err
}

// unstage uploads the updated values into p, unless they were updated
// in p's host copy.
func (h *hostStore) unstage(p *ferry.Tensor, s staged) error {
	if s.w == nil || s.wOnHost {
		return nil
	}
	return p.Device().Kernels().Upload(p.View(), asBytes(s.w))
}

// hostFloats is the float32 memory of a contiguous host tensor.
func hostFloats(t *ferry.Tensor) ([]float32, error) {
	b, off := t.Block()
	if b == nil {
		return []float32{}, nil
	}
	seg, ok := b.Segment().(interface{ Bytes() []byte })
	if !ok || !t.IsContiguous() {
		return nil, fmt.Errorf("optim: %q's host memory is not addressable", t.Name())
	}
	bs := seg.Bytes()[b.Offset()+int64(off)*4:]
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(bs))), t.Numel()), nil
}

// dropShown releases the tensors of the last State call.
func (h *hostStore) dropShown() {
	for _, t := range h.shown {
		t.Release()
	}
	h.shown = nil
}

// release drops the staging buffers and the tensors State made (see
// hostStore's note on ownership).
func (h *hostStore) release() {
	h.dropShown()
	h.w, h.g = nil, nil
}

// hostWorkSimulator is implemented by devices that simulate time (the
// meta device): a host step there charges its round trip, since no bytes
// move.
type hostWorkSimulator interface {
	SimulateHostWork(down, host, up int64)
}

// simulate charges p's host step to a device without data that simulates
// time: the values and the gradient down (4 bytes an element each, unless
// already on the host), traffic bytes read and written on the host, the
// values back up (4, unless updated in the host copy).
func simulate(p *ferry.Tensor, st staged, traffic int64) {
	if device.HasData(p.Device()) {
		return
	}
	if s, ok := p.Device().(hostWorkSimulator); ok {
		n := int64(p.Numel())
		var down, up int64
		if !st.wOnHost {
			down, up = 4*n, 4*n
		}
		if !st.gOnHost {
			down += 4 * n
		}
		s.SimulateHostWork(down, traffic, up)
	}
}

// hostStep is step with the state on the host: the parameter and its
// gradient staged on the host, the algorithm's Update run over them on the
// host's cores, the values sent back.
func (e *Engine) hostStep(p, g *ferry.Tensor, lr float32) error {
	h := e.host
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropShown()
	return ferry.Catch(func() error {
		st, err := h.stage(p, g)
		if err != nil {
			return err
		}
		s, fresh := e.stateOf(p), false
		if s == nil {
			s, fresh = &paramState{layout: e.alg.Layout(p.Shape())}, true
			if st.w != nil {
				for _, b := range slotBytes(s.layout) {
					s.host = append(s.host, alignedBytes(b))
				}
			}
			e.setStateOf(p, s)
		}
		s.step++
		if st.w != nil {
			u := &Update{W: st.w, G: st.g, State: s.host, LR: lr, Step: s.step, Fresh: fresh}
			optkernel.Parallel(len(st.w), s.layout.Grain, func(lo, hi int) { e.alg.Update(u, lo, hi) })
		}
		simulate(p, st, s.layout.Traffic)
		if err := h.unstage(p, st); err != nil {
			return err
		}
		ferry.BumpVersion(p, e.alg.Name()+"_step")
		return nil
	})
}

// HostStateBytes is the host memory the state holds with OnHost (on a
// device without data, what it would hold), staging buffers included; 0
// with the state on the device. State that visits the device
// (StateVisits) is not in it: its host tensors are the device's host
// allocator's, which counts them.
func (e *Engine) HostStateBytes() int64 {
	h := e.host
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	e.stateMu.Lock()
	for p, s := range e.state {
		if e.hostFor(p) {
			n += s.layout.Bytes()
		}
	}
	e.stateMu.Unlock()
	if cap(h.w) > 0 {
		n += 8 * int64(cap(h.w))
	}
	return n
}

// tensor returns a new optimizer-state tensor for slot sl of p on p's
// host device holding data (zeros, on a device without data, where data
// is nil), remembered in shown.
func (h *hostStore) tensor(p *ferry.Tensor, sl Slot, data []byte) *ferry.Tensor {
	t := ferry.ZerosOf(p.Device().Host(), sl.DType, device.OptimizerState, sl.Shape...)
	if len(data) > 0 {
		t.SetRawBytes(data)
	}
	h.shown = append(h.shown, t)
	return t
}
