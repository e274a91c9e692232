package offload

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"ferry"
	"ferry/device"
)

// Mode is a memory mode of a training step: where the tensors that
// forward saves for backward spend the time until backward needs them.
// NewMemory sets a mode up; ferry train, ferry demo and the Trainer in
// package train all go through it.
type Mode string

// The memory modes.
const (
	// None keeps every saved tensor on the device.
	None Mode = "none"
	// SaveOnHost copies each saved tensor to the host as it is saved, and
	// back when backward needs it, blocking both times: PyTorch's
	// torch.autograd.graph.save_on_cpu(pin_memory=True).
	SaveOnHost Mode = "save-on-host"
	// Offload is ferry's asynchronous offloader: saved tensors leave the
	// device on a side stream and come back prefetched during backward.
	Offload Mode = "offload"
	// OffloadDisk is Offload with every offloaded tensor sent on to disk.
	OffloadDisk Mode = "offload-disk"
	// Recompute checkpoints every layer or block: only its input is kept,
	// and backward runs its forward again.
	Recompute Mode = "recompute"
	// RecomputeOffload is Recompute with the kept inputs offloaded.
	RecomputeOffload Mode = "recompute-offload"
	// PolicyMode applies a Policy (written by ferry plan): keep, host,
	// disk or recompute per saved tensor.
	PolicyMode Mode = "policy"
)

// Modes lists the modes a training run can take without a policy, in the
// order the demo runs them.
func Modes() []Mode {
	return []Mode{None, SaveOnHost, Offload, OffloadDisk, Recompute, RecomputeOffload}
}

// ParseMode checks s against the modes (policy included).
func ParseMode(s string) (Mode, error) {
	for _, m := range append(Modes(), PolicyMode) {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, 0, 7)
	for _, m := range Modes() {
		names = append(names, string(m))
	}
	return "", fmt.Errorf("memory mode %q is not one of %s (or policy, with a policy file)", s, strings.Join(names, ", "))
}

// Recomputes reports whether m checkpoints every layer or block.
func (m Mode) Recomputes() bool { return m == Recompute || m == RecomputeOffload }

// Setup says how to set a Mode up.
type Setup struct {
	Mode Mode // "" is None
	// Config tunes the offloader of modes offload, offload-disk,
	// recompute-offload and policy; the zero value means DefaultConfig.
	// Mode policy takes the policy's copies in flight and lookahead where
	// it records them (Policy.CopiesInFlight, Policy.Lookahead).
	Config *Config
	// DiskDir is the disk tier's directory: offload-disk's files ("" is
	// the system's temporary directory) and a policy's disk placements.
	DiskDir string
	// Policy is the plan that mode policy applies.
	Policy *Policy
	// Segments recompute these segments in any mode (mode policy takes
	// the policy's), and OptimizerInBackward updates each parameter inside
	// backward (optim.InBackward) in any mode (mode policy takes the
	// policy's): for callers that apply a policy's parts themselves.
	Segments            *ferry.SegmentHooks
	OptimizerInBackward bool
	// HooksOverLoss keeps the hooks pushed while the loss is computed
	// too (Begin … End), as the planner records a step, instead of around
	// forward alone (Forward).
	HooksOverLoss bool

	// Params are the model's parameters, which ParamsOnHost and
	// GradsOnHost place (mode policy takes the policy's placements). A
	// model too large for the device is built on its host (dev.Host()):
	// its streamed parameters then never take device memory but around
	// their uses, and the others move to the device.
	Params []*ferry.Tensor
	// ParamsOnHost names the parameters that live in host memory and
	// stream to the device around their uses ("*": all of them).
	ParamsOnHost []string
	// GradsOnHost sends every parameter's gradient to host memory as
	// backward completes it; the optimizer must then keep its state on
	// the host (optim.OnHost).
	GradsOnHost bool
	// SerialGradCopies: see StreamConfig (mode policy takes the policy's).
	SerialGradCopies bool
	// StateOnDevice names parameters that keep their optimizer state on
	// the device although the rest's is on the host (optim.KeepOnDevice;
	// mode policy takes the policy's): they are neither streamed nor
	// their gradients sent to the host, whatever ParamsOnHost and
	// GradsOnHost say, so that they step on the device.
	StateOnDevice []string
	// StateVisiting names parameters whose optimizer state is on the host
	// but steps on the device (optim.StateVisits; mode policy takes the
	// policy's): their gradients stay on the device, whatever GradsOnHost
	// says (StreamConfig.GradsOnDevice).
	StateVisiting []string
}

// Memory is a memory mode set up on a device: the hooks and segments a
// step installs on its tape, and the offloader or host saver behind them.
// Its methods run on the training goroutine. Close it when training ends.
type Memory struct {
	mode     Mode
	overLoss bool
	hooks    *ferry.SavedTensorHooks
	segs     *ferry.SegmentHooks
	inBwd    bool
	off      *Offloader
	saver    *HostSaver
	stream   *Streamer // parameters or gradients in host memory; nil: none
}

// NewMemory sets up s.Mode on dev (the zero Mode is None).
func NewMemory(dev device.Device, s Setup) (*Memory, error) {
	if s.Mode == "" {
		s.Mode = None
	}
	m := &Memory{mode: s.Mode, overLoss: s.HooksOverLoss, segs: s.Segments, inBwd: s.OptimizerInBackward}
	if s.Policy != nil && s.Mode != PolicyMode {
		return nil, fmt.Errorf("offload: a policy is applied by mode policy, not %s", s.Mode)
	}
	cfg := DefaultConfig()
	if s.Config != nil {
		cfg = *s.Config
	}
	cfg.DiskDir = s.DiskDir
	switch s.Mode {
	case None, Recompute:
		if err := m.setupStream(dev, s); err != nil {
			return nil, err
		}
		return m, nil
	case SaveOnHost:
		m.saver = NewHostSaver(dev)
		m.hooks = m.saver.Hooks()
		if err := m.setupStream(dev, s); err != nil {
			return nil, err
		}
		return m, nil
	case OffloadDisk:
		if cfg.DiskDir == "" {
			cfg.DiskDir = os.TempDir()
		}
		cfg.HostLimit = -1 // everything offloaded goes on to disk
	case Offload, RecomputeOffload:
	case PolicyMode:
		if s.Policy == nil {
			return nil, fmt.Errorf("offload: mode policy needs a policy (ferry plan writes one)")
		}
		cfg.Policy = s.Policy.Place
		cfg.MaxInFlight = s.Policy.InFlight(cfg.MaxInFlight)
		cfg.Lookahead = s.Policy.Ahead(cfg.Lookahead)
		m.segs = s.Policy.SegmentHooks()
		m.inBwd = m.inBwd || s.Policy.OptimizerInBackward
		s.ParamsOnHost = s.Policy.ParametersOnHost
		s.GradsOnHost = s.Policy.Gradients == "host"
		s.SerialGradCopies = s.Policy.SerialGradCopies
		s.StateOnDevice, s.StateVisiting = s.Policy.OptimizerStateOnDevice, s.Policy.OptimizerStateVisiting
	default:
		return nil, fmt.Errorf("offload: unknown memory mode %q", s.Mode)
	}
	off, err := New(dev, cfg)
	if err != nil {
		return nil, err
	}
	m.off, m.hooks = off, off.Hooks()
	if err := m.setupStream(dev, s); err != nil {
		off.Close()
		return nil, err
	}
	return m, nil
}

// setupStream makes the Streamer of s's state placements, if any, on the
// offloader's side streams when there is one.
func (m *Memory) setupStream(dev device.Device, s Setup) error {
	if len(s.ParamsOnHost) == 0 && !s.GradsOnHost {
		return nil
	}
	params, err := SelectParams(s.Params, s.ParamsOnHost)
	if err != nil {
		return err
	}
	cfg := StreamConfig{Params: params, HostStepsBeside: m.inBwd, SerialGradCopies: s.SerialGradCopies}
	if s.GradsOnHost {
		cfg.Grads = s.Params
	}
	if len(s.StateOnDevice) > 0 {
		if cfg.StayOnDevice, err = SelectParams(s.Params, s.StateOnDevice); err != nil {
			return fmt.Errorf("the parameters whose optimizer state stays on the device (optimizer_state_on_device): %w", err)
		}
	}
	if len(s.StateVisiting) > 0 {
		if cfg.GradsOnDevice, err = SelectParams(s.Params, s.StateVisiting); err != nil {
			return fmt.Errorf("the parameters whose optimizer state visits the device (optimizer_state_visiting): %w", err)
		}
	}
	if m.off != nil {
		cfg.D2H, cfg.H2D = m.off.d2h, m.off.h2d
		cfg.Prefetch = m.off.cfg.Lookahead
	}
	if m.stream, err = NewStreamer(dev, cfg); err != nil {
		return err
	}
	// A model built on the host: what is not streamed moves to the device.
	return MoveToDevice(dev, s.Params)
}

// SelectParams returns the parameters named in names ("*" alone: all), in
// params' order; a name no parameter has is an error.
func SelectParams(params []*ferry.Tensor, names []string) ([]*ferry.Tensor, error) {
	if len(names) == 1 && names[0] == "*" {
		return params, nil
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	seen := make(map[string]*ferry.Tensor, len(params))
	for _, p := range params {
		if q, dup := seen[p.Name()]; dup && q != p && want[p.Name()] {
			return nil, fmt.Errorf("offload: two parameters are named %q; name parameters uniquely to place them by name", p.Name())
		}
		seen[p.Name()] = p
	}
	var out []*ferry.Tensor
	for _, p := range params {
		if want[p.Name()] {
			out = append(out, p)
			delete(want, p.Name())
		}
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for n := range want {
			missing = append(missing, n)
		}
		slices.Sort(missing)
		return nil, fmt.Errorf("offload: parameters named that the model does not have: %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// Mode is the mode set up.
func (m *Memory) Mode() Mode { return m.mode }

// Recompute reports whether the model should checkpoint every layer or
// block (modes recompute and recompute-offload).
func (m *Memory) Recompute() bool { return m.mode.Recomputes() }

// OptimizerInBackward reports whether the policy updates each parameter
// inside backward (optim.InBackward), so that gradients never all exist.
func (m *Memory) OptimizerInBackward() bool { return m.inBwd }

// Hooks are the saved-tensor hooks to push around forward; nil for modes
// that keep saved tensors where they are.
func (m *Memory) Hooks() *ferry.SavedTensorHooks { return m.hooks }

// Segments are the policy's recomputed segments (nil: none).
func (m *Memory) Segments() *ferry.SegmentHooks { return m.segs }

// Forward runs f, the forward pass of a step on tape, under the mode: the
// policy's segments are set on the tape and the hooks pushed around f.
func (m *Memory) Forward(tape *ferry.Tape, f func()) {
	if m.segs != nil {
		tape.SetSegmentHooks(m.segs)
	}
	if m.stream != nil {
		m.stream.Attach(tape)
	}
	if m.hooks != nil {
		tape.WithHooks(m.hooks, f)
		return
	}
	f()
}

// HooksOverLoss reports whether the hooks cover the loss too (Begin and
// End rather than Forward).
func (m *Memory) HooksOverLoss() bool { return m.overLoss }

// Begin sets the mode up on tape (the policy's segments, the hooks pushed)
// for what runs until End: forward and the loss.
func (m *Memory) Begin(tape *ferry.Tape) {
	if m.segs != nil {
		tape.SetSegmentHooks(m.segs)
	}
	if m.stream != nil {
		m.stream.Attach(tape)
	}
	if m.hooks != nil {
		tape.PushHooks(m.hooks)
	}
}

// End pops what Begin pushed.
func (m *Memory) End(tape *ferry.Tape) {
	if m.hooks != nil {
		tape.PopHooks()
	}
}

// Stats returns what the mode moved so far; ok is false for modes that
// move nothing.
func (m *Memory) Stats() (s Stats, ok bool) {
	switch {
	case m.off != nil:
		return m.off.Stats(), true
	case m.saver != nil:
		return m.saver.Stats(), true
	}
	return Stats{}, false
}

// Streamer is the streamer of parameters and gradients in host memory,
// or nil when they stay on the device.
func (m *Memory) Streamer() *Streamer { return m.stream }

// BeginStep is called before a training step's first forward.
func (m *Memory) BeginStep() error {
	if m.stream == nil {
		return nil
	}
	return m.stream.BeginStep()
}

// Backward runs backward from loss under the mode, with opts: parameters
// in host memory come back as backward needs them and leave when their
// gradients are complete, and gradients placed on the host leave the
// device then. opts.GradReady runs after that (an optimizer inside
// backward then finds the gradient where it was placed).
func (m *Memory) Backward(loss *ferry.Tensor, opts ferry.BackwardOptions) error {
	if m.stream == nil {
		return loss.BackwardWith(opts)
	}
	return m.stream.Backward(loss, opts)
}

// Attach sets the mode's hooks that must see every op of a tape (the
// streamer's record hook) on tape: for evaluation tapes, which do not go
// through Forward or Begin.
func (m *Memory) Attach(tape *ferry.Tape) {
	if m.stream != nil {
		m.stream.Attach(tape)
	}
}

// Settle sends parameters in host memory that an evaluation or a
// checkpoint brought to the device back.
func (m *Memory) Settle() error {
	if m.stream == nil {
		return nil
	}
	return m.stream.Settle()
}

// EndStep is called after the optimizer's step.
func (m *Memory) EndStep() error {
	if m.stream == nil {
		return nil
	}
	return m.stream.EndStep()
}

// Close waits for transfers in flight and frees what the mode holds;
// parameters in host memory come back to the device.
func (m *Memory) Close() error {
	var err error
	if m.stream != nil {
		err = m.stream.Close()
	}
	if m.off != nil {
		if oerr := m.off.Close(); err == nil {
			err = oerr
		}
	}
	return err
}
