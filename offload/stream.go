package offload

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"ferry"
	"ferry/device"
)

// StreamConfig says which training state a Streamer keeps in host memory.
type StreamConfig struct {
	// Params live in host memory: each has a device copy only around its
	// uses (from its prefetch, or the op that needs it, to the end of the
	// op in forward and to the completion of its gradient in backward).
	Params []*ferry.Tensor
	// Grads are parameters whose gradients leave the device as soon as
	// backward completes them, accumulating in host memory across
	// micro-batches. Their optimizer must keep its state on the host
	// (optim.OnHost), which updates them there.
	Grads []*ferry.Tensor
	// Prefetch is how many parameter uses ahead of the current one an
	// upload starts: the previous step's order of uses says which come
	// next (the first step faults each in when it is used). 0 means 2.
	// Beyond them, a use whose parameter has more bytes than the uses
	// between together starts too, so that a large parameter after a run
	// of small ones (a layer's norms and biases) is not late.
	Prefetch int
	// HostStepsBeside runs, for each streamed parameter whose gradient is
	// offloaded, what backward's GradReady hook does after the Streamer
	// (an optimizer inside backward, optim.InBackward, with its state on
	// the host) on a host worker, once the gradient's copy has landed,
	// while the device goes on with backward and then with the next
	// step's forward: the host's update overlaps the device's work. The
	// worker runs first the update the next forward needs first; a
	// parameter's next upload waits for its update (beside.go). Settle,
	// the next BeginBackward and Close wait for them all.
	//
	// With it, a parameter in Grads but not in Params (partial
	// streaming) is mirrored: it stays on the device, its memory allocated
	// throughout, but gets a master in host memory as a streamed one
	// does, which its host step updates beside the device like theirs;
	// when its gradient leaves, its device copy is set aside (the block
	// kept), and its next use waits for the upload of the new values
	// into that block. So its update too is off the training goroutine,
	// and it crosses the link once each way a step (its gradient down,
	// its values up), as in ZeRO-Offload, where a streamed parameter
	// also comes up for backward.
	HostStepsBeside bool
	// SerialGradCopies waits for each offloaded gradient's copy to the
	// host as soon as the next gradient is complete, which keeps the
	// fewest gradients on the device (the newest and the one before), but
	// backward then waits for each copy. Without it, a copy is waited for
	// once later gradients cover it (coveredCopies): backward's compute hides
	// the copies, for about one gradient's bytes more on the device.
	SerialGradCopies bool
	// StayOnDevice are parameters that stay on the device, neither
	// streamed nor their gradients sent to the host, whatever Params and
	// Grads say: their optimizer state is on the device
	// (optim.KeepOnDevice), so they step there.
	StayOnDevice []*ferry.Tensor
	// GradsOnDevice are parameters whose gradients stay on the device,
	// whatever Grads says, their values streamed or not as Params says:
	// their optimizer steps them on the device with its state brought
	// up from the host for it (optim.StateVisits). A streamed one is
	// brought in for its update (the update's use: the next step
	// prefetches it) and written back after.
	GradsOnDevice []*ferry.Tensor
	// D2H and H2D are the side streams the copies run on (offload.Memory
	// passes its Offloader's, so that parameters and activations share
	// them); nil makes the Streamer's own.
	D2H, H2D device.Stream
}

// StreamStats counts what a Streamer moved.
type StreamStats struct {
	ParamUploads   int     `json:"param_uploads"`      // device copies made
	ParamBytesIn   int64   `json:"param_bytes_in"`     // bytes of them
	Prefetched     int     `json:"param_prefetched"`   // uploads started ahead of use
	WrittenBack    int     `json:"param_written_back"` // device copies changed in place, copied back
	GradBytesOut   int64   `json:"grad_bytes_out"`     // gradient bytes to the host
	StallSeconds   float64 `json:"param_stall_seconds"`
	HostParamBytes int64   `json:"host_param_bytes"` // host copies of parameters
	HostGradPeak   int64   `json:"host_grad_peak_bytes"`
}

// Streamer keeps parameters and gradients in host memory during
// training (ZeRO-Offload's and FSDP's CPU offload, for one device).
//
// A streamed parameter's values live in a host tensor (its master copy);
// its device storage is paged (ferry.Pager): an op that uses it brings it
// back, a prefetch brings it back ahead of use, and the Streamer frees it
// when the op that used it in forward has been recorded, and when its
// gradient is complete in backward. A recomputed segment's forward, run
// again in backward, frees none: its backward uses the same parameters
// next, so they stay until their gradients complete (as FSDP keeps a
// unit's parameters gathered through the unit's backward). That holds a
// segment's parameters on the device at once, and saves bringing each
// back a second time in backward: GPT-2 124M at batch 1, eight blocks
// recomputed, on 35 % of h200-pcie5, stepped in 0.03684 s, not 0.03807.
// A tied weight is one storage: one master, one device copy at a time.
//
// An offloaded gradient leaves the device when backward completes it
// (GradReady): it is copied to a host tensor on a side stream and the
// device copy is freed once the next one has left. With accumulation, the
// next micro-batch's first addition brings the host sum back (a paged-out
// shell stands for it as the parameter's Grad), so that every addition is
// the device's, in its order.
// After backward (EndBackward) the parameter's Grad is the host tensor,
// on device.Host(): the host optimizer (optim.OnHost) updates the master
// from it, and clipping computes on it with the host's kernels.
//
// Nothing changes a bit: masters hold the parameters' float32 values,
// copies are exact, and the host's kernels are the CPU device's, so on the
// CPU device a run streams to the same bits as one that does not.
//
// Use, on the training goroutine, per micro-batch: BeginStep, the
// forward with the tape's record hook set (Attach), BeginBackward,
// backward with GradReady in the options, EndBackward; after the
// optimizer's step, EndStep. Close gives the parameters back to the
// device. With HostStepsBeside, updates may still run after EndStep:
// Settle (or Close) before the optimizer's state is read, saved or
// released.
type Streamer struct {
	dev, host device.Device
	d2h, h2d  device.Stream
	prefetch  int
	params    []*streamed       // in StreamConfig.Params order
	byStorage map[any]*streamed // by storage
	grads     map[*ferry.Tensor]bool
	// hostGrads are the offloaded gradients while backward runs, by
	// parameter; shells are the paged-out device tensors standing for
	// them as the parameters' Grad, which backward brings in if it adds
	// to them (so that it adds in the order it would on the device).
	hostGrads map[*ferry.Tensor]*ferry.Tensor
	shells    map[*ferry.Tensor]*streamed
	pending   []*gradCopy // gradient copies to the host in flight
	order     []*streamed // the previous step's uses, in order
	largest   int64       // the largest streamed parameter's bytes
	serial    bool        // StreamConfig.SerialGradCopies
	uses      []*streamed // this step's so far
	pos       int         // where in order the last use was found
	// stepping: between BeginStep and EndStep. Uses outside a step (an
	// evaluation's forwards, a checkpoint's reads) are not recorded: the
	// next step's prefetches follow the last step's uses alone.
	stepping bool
	// inBackward: between BeginBackward and EndBackward. Ops recorded
	// then are a recomputed segment's forward, whose parameters its
	// backward uses next: they stay until their gradients complete.
	inBackward bool
	stats      StreamStats
	hostGrad   int64
	closed     bool
	// Host steps beside the device (StreamConfig.HostStepsBeside, see
	// beside.go): the worker that runs them, the step in flight for each
	// parameter, which a copy of it to the device waits for, the tasks a
	// device that simulates time has yet to run, and each parameter's
	// first use in this step (the order the worker prefers).
	beside   bool
	worker   *besideQueue
	tasks    map[*streamed]*hostTask
	simQ     []*hostTask
	seq      int
	firstUse map[*streamed]int
}

// streamed is one parameter storage in host memory.
type streamed struct {
	p       *ferry.Tensor // the parameter (the caller's handle), or a gradient shell
	master  *ferry.Tensor // its values, on the host
	cat     device.Category
	version uint32 // p's version when it was last brought in
	// A prefetch in flight: the block being filled and the copy's event.
	// The storage stays paged out until its first use waits for the copy
	// and installs the block (PageIn).
	pending *device.Block
	ready   device.Event
	// resident: the storage holds a device block (installed).
	resident bool
	used     bool // used since it was installed
	// written: the copy of a changed device copy back to the master
	// (pageOut), on d2h, in flight until it completes. An upload from
	// the master (into a new block or the kept one, which the copy
	// reads) waits for it on h2d; a host reader of the master waits for
	// it first (HostCopy, HostData, Settle).
	written device.Event
	// mirrored: a parameter that stays on the device, its values
	// mirrored by the master (see StreamConfig.HostStepsBeside): paging
	// it out sets its block aside in kept, still allocated, and bringing
	// it in refills that block from the master. Neither forward nor
	// backward pages it out after a use; only its gradient's completion
	// (or its host step) does.
	mirrored bool
	kept     *device.Block
	// stepsHere: its gradient stays on the device and its optimizer
	// steps it there (StreamConfig.GradsOnDevice). Inside backward
	// (Backward with a GradReady after the Streamer's) it stays on the
	// device through its update and is written back after (or, one of
	// the next step's first uses, stays there: firstUses), rather than
	// paged out at its gradient's completion and brought back at once
	// for the update.
	stepsHere bool
}

// gradCopy is one gradient on its way to the host.
type gradCopy struct {
	p   *ferry.Tensor
	dev *ferry.Tensor // the device gradient, held until the copy is done
	dst *ferry.Tensor // on the host
	ev  device.Event
	// bytes is the gradient's size; queued is the bytes of the copies
	// issued before this one and not covered then (coveredCopies), its own
	// included: what the link is taken to have had to move before this
	// copy was done.
	bytes, queued int64
}

// NewStreamer moves cfg.Params to host memory (their device memory is
// freed) and returns the Streamer that brings them back.
func NewStreamer(dev device.Device, cfg StreamConfig) (*Streamer, error) {
	if cfg.Prefetch < 0 {
		return nil, fmt.Errorf("offload: parameter prefetch %d: want 0 (the default) or more", cfg.Prefetch)
	}
	s := &Streamer{dev: dev, host: dev.Host(), prefetch: cfg.Prefetch, d2h: cfg.D2H, h2d: cfg.H2D,
		byStorage: map[any]*streamed{}, grads: map[*ferry.Tensor]bool{},
		hostGrads: map[*ferry.Tensor]*ferry.Tensor{}, shells: map[*ferry.Tensor]*streamed{},
		beside: cfg.HostStepsBeside, serial: cfg.SerialGradCopies, tasks: map[*streamed]*hostTask{}, firstUse: map[*streamed]int{}}
	if s.prefetch == 0 {
		s.prefetch = 2
	}
	var err error
	if s.d2h == nil {
		if s.d2h, err = dev.NewStream("d2h-state"); err != nil {
			return nil, fmt.Errorf("offload: %w", err)
		}
	}
	if s.h2d == nil {
		if s.h2d, err = dev.NewStream("h2d-state"); err != nil {
			return nil, fmt.Errorf("offload: %w", err)
		}
	}
	without := func(ps, drop []*ferry.Tensor) []*ferry.Tensor {
		if len(drop) == 0 {
			return ps
		}
		var out []*ferry.Tensor
		for _, p := range ps {
			if !slices.Contains(drop, p) {
				out = append(out, p)
			}
		}
		return out
	}
	cfg.Params, cfg.Grads = without(cfg.Params, cfg.StayOnDevice), without(without(cfg.Grads, cfg.StayOnDevice), cfg.GradsOnDevice)
	for _, p := range cfg.Grads {
		if p.Device() != dev && p.Device() != dev.Host() {
			return nil, fmt.Errorf("offload: parameter %q is on %s, the streamer on %s", p.Name(), p.Device().Name(), dev.Name())
		}
		s.grads[p] = true
	}
	err = ferry.Catch(func() error {
		for _, p := range cfg.Params {
			if _, dup := s.byStorage[p.Storage()]; dup {
				continue
			}
			if err := s.adopt(p, false); err != nil {
				return err
			}
		}
		for _, p := range cfg.GradsOnDevice {
			if st := s.byStorage[p.Storage()]; st != nil {
				st.stepsHere = true
			}
		}
		if !s.beside {
			return nil
		}
		for _, p := range cfg.Grads {
			if _, done := s.byStorage[p.Storage()]; done || p.Numel() == 0 || !p.IsContiguous() || p.StorageBytes() != p.Bytes() || p.Pager() != nil {
				continue // (a view, or paged by someone else: stepped on the training goroutine)
			}
			if err := s.adopt(p, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// adopt copies p to a new master on the host and pages p out; a p built
// on the host is migrated instead, its memory the master (no device
// memory is used). A mirrored p (see streamed.mirrored) stays on the device:
// one built on the host is brought there now.
func (s *Streamer) adopt(p *ferry.Tensor, mirrored bool) error {
	st := &streamed{p: p, cat: device.Parameter, mirrored: mirrored}
	if p.Device() == s.host && s.host != s.dev {
		if p.Pager() != nil {
			return fmt.Errorf("offload: parameter %q already has a pager", p.Name())
		}
		st.master = p.MigrateToPager(s.dev, s)
		if st.master.Numel() == 0 {
			st.master.Release()
			st.master = nil
		}
		s.register(st)
		if mirrored {
			return s.PageIn(p)
		}
		return nil
	}
	switch {
	case p.Device() != s.dev:
		return fmt.Errorf("offload: parameter %q is on %s, the streamer on %s", p.Name(), p.Device().Name(), s.dev.Name())
	case p.Pager() != nil:
		return fmt.Errorf("offload: parameter %q already has a pager", p.Name())
	case !p.IsContiguous() || p.StorageBytes() != p.Bytes():
		return fmt.Errorf("offload: parameter %q is a view of a larger storage; stream whole parameters", p.Name())
	}
	if p.Numel() > 0 {
		m := ferry.ZerosAs(s.host, device.Parameter, p.Shape()...)
		if err := s.copy(s.d2h, m, p, true); err != nil {
			m.Release()
			return err
		}
		st.master = m
	}
	s.register(st)
	p.SetPager(s)
	st.resident = p.Numel() > 0
	if mirrored {
		return nil
	}
	return s.pageOut(st)
}

// register records st, a parameter storage adopted with its master.
func (s *Streamer) register(st *streamed) {
	if st.master != nil {
		s.stats.HostParamBytes += st.p.Bytes()
	}
	s.params = append(s.params, st)
	s.byStorage[st.p.Storage()] = st
	s.largest = max(s.largest, st.p.Bytes())
	st.version = st.p.Version()
}

// copy copies src into dst (whole blocks, same size) on stream, after the
// compute stream's work so far; with wait, it returns when the copy is
// done.
func (s *Streamer) copy(stream device.Stream, dst, src *ferry.Tensor, wait bool) error {
	db, _ := dst.Block()
	sb, _ := src.Block()
	if db == nil || sb == nil {
		return nil
	}
	stream.Wait(s.dev.Compute().Record())
	if err := s.dev.Copy(stream, device.Span{Block: db, Len: dst.Bytes()}, device.Span{Block: sb, Len: src.Bytes()}); err != nil {
		return err
	}
	if wait {
		return stream.Record().Synchronize()
	}
	return nil
}

// HostCopy returns p's master copy on the host, paging p out first (its
// device copy, if changed in place, written back), for an optimizer that
// updates the master; nil if p is not streamed.
func (s *Streamer) HostCopy(p *ferry.Tensor) (*ferry.Tensor, error) {
	st := s.byStorage[p.Storage()]
	if st == nil {
		return nil, nil
	}
	var err error
	if cerr := ferry.Catch(func() error { err = s.pageOut(st); return nil }); cerr != nil {
		return nil, cerr
	}
	if err == nil && st.written != nil {
		err = st.written.Synchronize() // the host reads and writes it next
	}
	return st.master, err
}

// HostData returns the master of a streamed parameter's storage (a
// ferry.HostReader: Float32s reads it there), or nil.
func (s *Streamer) HostData(t *ferry.Tensor) *ferry.Tensor {
	if st := s.byStorage[t.Storage()]; st != nil && st.cat == device.Parameter {
		if t := s.tasks[st]; t != nil {
			return nil // a host step may be writing it: bring it in instead
		}
		if st.written != nil && st.written.Synchronize() != nil {
			return nil // (the copy back failed: bringing it in says so)
		}
		return st.master
	}
	return nil
}

// Settle waits for the host steps still running beside the device and
// pages out every parameter on the device (after an evaluation or a
// checkpoint read them outside a training step): the parameters and
// the optimizer's state are then whole, to read or save.
func (s *Streamer) Settle() error {
	if err := ferry.Catch(s.drainBeside); err != nil {
		return err
	}
	if err := s.pageOutAll(true); err != nil {
		return err
	}
	return s.d2h.Synchronize() // the copies back to the masters (streamed.written)
}

// Streams reports whether p lives in host memory.
func (s *Streamer) Streams(p *ferry.Tensor) bool { return s.byStorage[p.Storage()] != nil }

// PageIn brings t's storage back: the prefetched copy if one was started,
// else a copy started now. (ferry.Pager.)
func (s *Streamer) PageIn(t *ferry.Tensor) error {
	st := s.byStorage[t.Storage()]
	if st == nil {
		return errors.New("offload: a storage the streamer does not hold")
	}
	if st.resident {
		return nil
	}
	if st.pending == nil {
		if err := s.bringIn(st, false); err != nil {
			return err
		}
	}
	if !st.ready.Done() {
		start := time.Now()
		s.dev.Compute().Wait(st.ready)
		s.stats.StallSeconds += time.Since(start).Seconds()
	}
	st.p.InstallBlock(st.pending)
	st.pending, st.ready = nil, nil
	st.resident, st.used = true, false
	st.version = st.p.Version()
	if st.cat == device.Parameter {
		s.noteUse(st)
	}
	return nil
}

// bringIn allocates st's device copy and starts the upload; prefetched
// says whether it is ahead of use.
func (s *Streamer) bringIn(st *streamed, prefetched bool) error {
	if err := s.waitBeside(st); err != nil {
		return err
	}
	b := st.kept
	st.kept = nil
	if b == nil {
		var err error
		if b, err = s.dev.Allocator().Alloc(st.p.PagedBytes(), st.cat); err != nil {
			return err
		}
	}
	st.pending = b
	// The new block may have been used by compute work not yet finished;
	// the master (and a kept block) is the copy back's until it is done.
	s.h2d.Wait(s.dev.Compute().Record())
	if st.written != nil {
		s.h2d.Wait(st.written)
	}
	mb, _ := st.master.Block()
	if err := s.dev.Copy(s.h2d, device.Whole(b), device.Span{Block: mb, Len: st.p.PagedBytes()}); err != nil {
		st.pending = nil
		if st.mirrored {
			st.kept = b
		} else {
			s.dev.Allocator().Free(b)
		}
		return err
	}
	st.ready = s.h2d.Record()
	s.stats.ParamUploads++
	s.stats.ParamBytesIn += st.p.PagedBytes()
	if prefetched {
		s.stats.Prefetched++
	}
	return nil
}

// resyncWithin is how far ahead of the position in the previous step's
// order noteUse looks for a use: twice the prefetch (the first uses a
// step may not note) and a few more.
func resyncWithin(prefetch int) int { return 2*prefetch + 8 }

// noteUse records a use of st in this step's order (in a step only) and
// starts the uploads of the next Prefetch uses the previous step made
// after it.
//
// An evaluation between steps used to append its forwards' uses: the
// first step after the run's first validation then followed them,
// backward prefetching parameters in forward's order, which stayed on
// the device unused (a 2-layer GPT's step, planned at 255 KiB with every
// parameter in host memory, peaked 35 KiB higher under train text, whose
// validation at step 0 the planner's replay does not run).
func (s *Streamer) noteUse(st *streamed) {
	if n := len(s.uses); s.stepping && (n == 0 || s.uses[n-1] != st) {
		if _, seen := s.firstUse[st]; !seen {
			s.firstUse[st] = len(s.uses)
		}
		s.uses = append(s.uses, st)
	}
	// The previous step may have noted uses this one does not (a use of
	// a parameter already on the device notes none: the step's first
	// uses, kept between steps, are noted in one step and not the next),
	// so st is looked for a little ahead, not further: a parameter used
	// again much later (an embedding in forward and again at its update
	// at backward's end, optim.StateVisits) matched there would leave
	// every use between unguessed, and prefetched too late. (GPT-2 124M
	// at batch 4, 35 % of h100-pcie5, the embedding's state visiting: its
	// use at backward's start matched its update 85 uses on, and each of
	// backward's parameter uses waited for its upload: 0.1824 s a step,
	// 0.1476 s now.)
	i := s.pos
	for end := min(len(s.order), s.pos+resyncWithin(s.prefetch)); i < end && s.order[i] != st; i++ {
	}
	if i == len(s.order) || s.order[i] != st {
		return // not where the previous step had it: no guess
	}
	s.pos = i + 1
	// Prefetch uses ahead, and beyond them each use whose parameter has
	// more bytes than the uses before it from here together: compute on
	// those would not cover its upload (a layer's weight after its norm
	// and biases). Past the largest parameter's bytes none can.
	var before int64
	for j := s.pos; j < len(s.order) && (j < s.pos+s.prefetch || before < s.largest); j++ {
		next := s.order[j]
		b := next.p.Bytes()
		ahead := j < s.pos+s.prefetch || before < b
		before += b
		if ahead && !next.resident && next.pending == nil {
			if err := s.bringIn(next, true); err != nil {
				return // out of memory ahead of use: the use itself will ask again
			}
		}
	}
}

// pageOut frees st's device copy (a mirrored one's is set aside, still
// allocated), first copying it back to the master if an in-place op
// changed it since it came in; a prefetch in flight is waited for and
// dropped.
func (s *Streamer) pageOut(st *streamed) error {
	if st.pending != nil {
		err := st.ready.Synchronize()
		if st.mirrored {
			st.kept = st.pending
		} else {
			s.dev.Allocator().RecordStream(st.pending, s.h2d)
			s.dev.Allocator().Free(st.pending)
		}
		st.pending, st.ready = nil, nil
		if err != nil {
			return err
		}
	}
	if !st.resident {
		return nil
	}
	written := false
	if st.p.Version() != st.version && st.master != nil {
		// Written back beside compute (streamed.written says who waits).
		if err := s.copy(s.d2h, st.master, st.p, false); err != nil {
			return err
		}
		st.written, written = s.d2h.Record(), true
		s.stats.WrittenBack++
	}
	if st.mirrored {
		// Its next upload waits for compute's work so far (bringIn):
		// the block may be refilled once backward is done with it.
		st.kept = st.p.TakeBlock()
		st.resident, st.used = false, false
		return nil
	}
	if b, _ := st.p.Block(); b != nil {
		// Uploads read the master on h2d; the block goes back for compute
		// (and the copy back reads it on d2h).
		s.dev.Allocator().RecordStream(b, s.h2d)
		if written {
			s.dev.Allocator().RecordStream(b, s.d2h)
		}
	}
	st.p.PageOut()
	st.resident, st.used = false, false
	return nil
}

// Attach sets tape's record hook, which frees a parameter's device copy
// once the ops using it are recorded.
func (s *Streamer) Attach(tape *ferry.Tape) { tape.SetRecordHook(s.recorded) }

// recorded pages out the streamed parameters that earlier ops used and
// op does not.
func (s *Streamer) recorded(op string, inputs []*ferry.Tensor) {
	for _, in := range inputs {
		if in == nil {
			continue
		}
		if st := s.byStorage[in.Storage()]; st != nil && op != "input" {
			st.used = true
		}
	}
	if s.inBackward {
		return
	}
	for _, st := range s.params {
		if !st.resident || !st.used || st.mirrored || s.usedBy(st, inputs) {
			continue
		}
		if err := s.pageOut(st); err != nil {
			panic(err)
		}
	}
}

func (s *Streamer) usedBy(st *streamed, inputs []*ferry.Tensor) bool {
	for _, in := range inputs {
		if in != nil && in.Storage() == st.p.Storage() {
			return true
		}
	}
	return false
}

// BeginStep starts a step: parameters still on the device (a checkpoint
// read them) leave but the step's first uses (firstUses), and the first
// Prefetch uses of the last step start their uploads.
func (s *Streamer) BeginStep() error {
	// A backward that failed before EndBackward left it set: forward's
	// uses free their parameters again.
	s.inBackward = false
	if len(s.uses) > 0 {
		s.order, s.uses = s.uses, s.order[:0]
	}
	if err := s.pageOutBut(s.firstUses(s.order), false); err != nil {
		return err
	}
	clear(s.firstUse)
	s.pos, s.stepping = 0, true
	// The first uses still on the device are this step's first: their
	// use will not page them in, which notes a use, so they are noted
	// now (else the next step's order would lack them, and the step
	// after would page them in again).
	for _, st := range s.firstUses(s.order) {
		if !st.resident {
			break
		}
		s.noteUse(st)
	}
	for j := 0; j < len(s.order) && j < s.prefetch; j++ {
		if next := s.order[j]; !next.resident && next.pending == nil {
			if err := s.bringIn(next, true); err != nil {
				break
			}
		}
	}
	return nil
}

// pageOutAll pages out every resident parameter (and, with all, drops
// every prefetch in flight) but the mirrored ones, whose device copies
// stay current.
func (s *Streamer) pageOutAll(all bool) error { return s.pageOutBut(nil, all) }

// firstUses are the first Prefetch uses of order: a step's first uses,
// which the next step's forward makes first, where order is a step's
// uses. Between steps they stay on the device (pageOutBut): they would
// come back at once. (That keeps there a parameter stepped on the device
// at the end of backward, optim.StateVisits: the embedding, which forward
// uses first.)
func (s *Streamer) firstUses(order []*streamed) []*streamed {
	return order[:min(len(order), s.prefetch)]
}

// pageOutBut is pageOutAll but for the parameters in keep, which stay
// on the device or on their way there.
func (s *Streamer) pageOutBut(keep []*streamed, all bool) error {
	return ferry.Catch(func() error {
		for _, st := range s.params {
			if st.mirrored || slices.Contains(keep, st) {
				continue
			}
			if st.resident || all && st.pending != nil {
				if err := s.pageOut(st); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Backward runs backward from loss with opts between BeginBackward and
// EndBackward, the Streamer's GradReady before opts.GradReady (which then
// finds an offloaded gradient on the host, as an optimizer inside
// backward needs it).
func (s *Streamer) Backward(loss *ferry.Tensor, opts ferry.BackwardOptions) error {
	if err := s.BeginBackward(); err != nil {
		return err
	}
	next := opts.GradReady
	opts.GradReady = func(p *ferry.Tensor) {
		st := s.byStorage[p.Storage()]
		if next != nil && st != nil && st.stepsHere {
			next(p) // its update, on the device
			if slices.Contains(s.firstUses(s.uses), st) {
				return // the next step's first: it stays (EndStep)
			}
			if err := s.pageOut(st); err != nil {
				panic(err)
			}
			return
		}
		if next != nil && s.beside && st != nil && s.grads[p] {
			if ev := s.gradReadyBeside(p); ev != nil {
				s.runBeside(st, ev, func() { next(p) })
				return
			}
		}
		s.gradReady(p, next != nil)
		if next != nil {
			next(p)
		}
	}
	err := loss.BackwardWith(opts)
	if eerr := s.EndBackward(); err == nil {
		err = eerr
	}
	return err
}

// BeginBackward is called between forward and backward: parameters forward
// used leave the device (backward brings them back as it needs them), and
// each offloaded gradient that earlier micro-batches left in host memory
// is set aside, the parameter's Grad a paged-out device tensor standing
// for it: backward's first addition to it brings it back, so that the
// additions are the device's, in its order.
func (s *Streamer) BeginBackward() error {
	err := ferry.Catch(func() error {
		// The last step's host updates are done (forward waited for those
		// of the parameters it used): they own the gradients they read.
		if err := s.drainBeside(); err != nil {
			return err
		}
		for p := range s.grads {
			g := p.Grad()
			if g == nil || g.Device() == s.dev {
				continue
			}
			h := g.Detach()
			shell := ferry.NewPagedOut(s.dev, h.DType(), h.Shape(), s)
			st := &streamed{p: shell, master: h, cat: device.Gradient}
			s.byStorage[shell.Storage()], s.shells[p], s.hostGrads[p] = st, st, h
			p.SetGrad(shell) // releases p's handle on h; the streamer keeps its own
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.inBackward = true
	return s.pageOutAll(false)
}

// GradReady is backward's hook (ferry.BackwardOptions.GradReady): p's
// gradient is complete. p's device copy leaves, and an offloaded gradient
// starts its copy to the host.
func (s *Streamer) GradReady(p *ferry.Tensor) { _ = s.gradReady(p, false) }

// gradReady is GradReady; with now, an offloaded gradient's copy is waited
// for and the host gradient is p's Grad at once (for an optimizer that
// updates p next, inside backward).
func (s *Streamer) gradReady(p *ferry.Tensor, now bool) device.Event {
	if st := s.byStorage[p.Storage()]; st != nil {
		if err := s.pageOut(st); err != nil {
			panic(err)
		}
	}
	if !s.grads[p] {
		return nil
	}
	g := p.Grad()
	if g == nil || g.Device() != s.dev || g.PagedOut() {
		return nil // nothing added this backward: the host's stands
	}
	if sh := s.shells[p]; sh != nil {
		delete(s.byStorage, g.Storage())
		delete(s.shells, p)
		g.SetPager(nil)
	}
	dst := s.hostGrads[p]
	if dst == nil {
		dst = ferry.ZerosAs(s.host, device.Gradient, g.Shape()...)
		s.hostGrads[p] = dst
		s.hostGrad += dst.Bytes()
		s.stats.HostGradPeak = max(s.stats.HostGradPeak, s.hostGrad)
	}
	if err := s.copy(s.d2h, dst, g, false); err != nil {
		panic(err)
	}
	ev := s.d2h.Record()
	s.pending = append(s.pending, &gradCopy{p: p, dev: g.Detach(), dst: dst, ev: ev, bytes: g.Bytes()})
	s.stats.GradBytesOut += g.Bytes()
	p.SetGrad(nil)
	switch {
	case now:
		s.reapAll()
	case s.serial: // all but the newest (StreamConfig.SerialGradCopies)
		newest := len(s.pending) - 1
		s.reap(func(i int) bool { return i < newest })
	default:
		covered := coveredCopies(s.pending)
		s.reap(func(i int) bool { return covered[i] })
	}
	if now {
		p.SetGrad(s.takeHostGrad(p))
	}
	return ev
}

// gradReadyBeside is gradReady for a host step beside the device: p's
// gradient starts its copy to the host and p's Grad is the host tensor at
// once, its data there when the returned event has completed (nil: no
// gradient moved; gradReady handles p).
func (s *Streamer) gradReadyBeside(p *ferry.Tensor) device.Event {
	g := p.Grad()
	if g == nil || g.Device() != s.dev || g.PagedOut() {
		return nil
	}
	ev := s.gradReady(p, false)
	p.SetGrad(s.takeHostGrad(p))
	return ev
}

// runBeside runs work for st on the host worker once after has
// completed, as beside.go describes; a copy of st to the device waits for
// it. On a device that simulates time, it runs in simulated time.
func (s *Streamer) runBeside(st *streamed, after device.Event, work func()) {
	prio, ok := s.firstUse[st]
	if !ok {
		prio = math.MaxInt // not used this step: after the others
	}
	s.seq++
	t := &hostTask{st: st, after: after, prio: prio, seq: s.seq, work: work, done: make(chan struct{})}
	s.tasks[st] = t
	if sim, ok := s.dev.(hostSim); ok && !device.HasData(s.dev) {
		s.simQ = append(s.simQ, t)
		s.simAdvance(sim, sim.Now(), nil)
		return
	}
	if s.worker == nil {
		s.worker = newBesideQueue()
	}
	if !s.worker.push(t) {
		t.err = errors.New("offload: the streamer is closed")
		close(t.done)
	}
}

// waitBeside waits for st's host step, if one is in flight: on a device
// that simulates time, the upload stream waits for its simulated end.
func (s *Streamer) waitBeside(st *streamed) error {
	t := s.tasks[st]
	if t == nil {
		return nil
	}
	delete(s.tasks, st)
	if sim, ok := s.dev.(hostSim); ok && !device.HasData(s.dev) {
		s.simAdvance(sim, math.Inf(1), t)
		s.h2d.Wait(t.ev)
		return t.err
	}
	select {
	case <-t.done:
	default:
		start := time.Now()
		<-t.done
		s.stats.StallSeconds += time.Since(start).Seconds()
	}
	return t.err
}

// drainBeside waits for every host step in flight (the compute stream
// too, on a device that simulates time) and returns the first failure.
func (s *Streamer) drainBeside() error {
	var first error
	for len(s.tasks) > 0 {
		var t *hostTask
		for _, u := range s.tasks {
			if t == nil || u.seq < t.seq {
				t = u
			}
		}
		err := s.waitBeside(t.st)
		if t.ev != nil {
			s.dev.Compute().Wait(t.ev)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// takeHostGrad removes p's host gradient from the streamer and returns it
// (nil if none), dropping the shell standing for it, if any.
func (s *Streamer) takeHostGrad(p *ferry.Tensor) *ferry.Tensor {
	if sh := s.shells[p]; sh != nil {
		delete(s.byStorage, sh.p.Storage())
		delete(s.shells, p)
		if g := p.Grad(); g != nil && g.Storage() == sh.p.Storage() {
			p.SetGrad(nil) // paged out: holds no device memory
		}
	}
	h := s.hostGrads[p]
	delete(s.hostGrads, p)
	return h
}

// coveredCopies says which of the gradient copies in flight (oldest
// first, the newest just issued) later gradients cover, and sets the
// newest's queued bytes: those of the copies not covered, its own
// included. A copy is covered when the gradients completed after it are
// at least as many bytes as the copies queued before it, its own included
// (gradCopy.queued): backward's compute between two gradients grows with
// their sizes, so a covered copy has had about the time it needs to
// finish, and waiting for it seldom stalls, where waiting for the one just
// before (a weight's, when its bias completes next; or a small one queued
// behind a large one) would stall for the copies ahead of it. The rule
// depends only on the gradients' order and sizes, never on the copies'
// timing, so the peak is the same on every device (and on meta): besides
// the newest gradients, about one queue's bytes of them are on the
// device. The newest is never covered.
func coveredCopies(pending []*gradCopy) []bool {
	n := len(pending)
	covered := make([]bool, n)
	var later int64
	for i := n - 1; i >= 0; i-- {
		covered[i] = i < n-1 && later >= pending[i].queued
		later += pending[i].bytes
	}
	if n > 0 {
		newest := pending[n-1]
		newest.queued = 0
		for i, c := range pending {
			if !covered[i] {
				newest.queued += c.bytes
			}
		}
	}
	return covered
}

// reap waits for the gradient copies in flight that finish says to (by
// index, oldest first) and frees their device copies; the others stay in
// flight, in order.
func (s *Streamer) reap(finish func(i int) bool) {
	kept := s.pending[:0]
	for i, c := range s.pending {
		if !finish(i) {
			kept = append(kept, c)
			continue
		}
		if err := c.ev.Synchronize(); err != nil {
			panic(err)
		}
		s.dev.Allocator().RecordStream(blockOf(c.dev), s.d2h)
		c.dev.Release()
	}
	clear(s.pending[len(kept):])
	s.pending = kept
}

// reapAll waits for every gradient copy in flight and frees the device
// copies.
func (s *Streamer) reapAll() { s.reap(func(int) bool { return true }) }

func blockOf(t *ferry.Tensor) *device.Block {
	b, _ := t.Block()
	return b
}

// EndBackward waits for the gradients' copies and hands each offloaded
// gradient to its parameter (Grad, on the host); parameters backward
// brought back leave the device, but the next step's first uses
// (firstUses).
func (s *Streamer) EndBackward() error {
	s.inBackward = false
	err := ferry.Catch(func() error {
		s.reapAll()
		for p := range s.hostGrads {
			if g := p.Grad(); g != nil && g.Device() == s.dev && !g.PagedOut() {
				return fmt.Errorf("offload: the gradient of %q is still on the device after backward", p.Name())
			}
			p.SetGrad(s.takeHostGrad(p))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.pageOutBut(s.firstUses(s.uses), true)
}

// EndStep is called after the optimizer's step: no parameter stays on the
// device but the next step's first uses (firstUses), and host gradients
// the optimizer dropped are no longer counted.
func (s *Streamer) EndStep() error {
	s.hostGrad, s.stepping = 0, false
	for p := range s.grads {
		if st := s.byStorage[p.Storage()]; st != nil && s.tasks[st] != nil {
			continue // its host step, still running, owns and drops it
		}
		if g := p.Grad(); g != nil && g.Device() != s.dev {
			s.hostGrad += g.Bytes()
		}
	}
	return s.pageOutBut(s.firstUses(s.uses), true)
}

// Stats returns what the streamer moved so far.
func (s *Streamer) Stats() StreamStats { return s.stats }

// Close brings every parameter back to the device, to stay, and frees the
// masters. Closing twice does nothing.
func (s *Streamer) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return ferry.Catch(func() error {
		derr := s.drainBeside()
		if s.worker != nil {
			s.worker.close()
		}
		if derr != nil {
			return derr
		}
		s.reapAll()
		for p := range s.hostGrads {
			p.SetGrad(s.takeHostGrad(p))
		}
		for _, st := range s.params {
			if !st.resident && st.p.Numel() > 0 {
				if err := s.PageIn(st.p); err != nil {
					return err
				}
			}
			st.p.SetPager(nil)
		}
		// The uploads read the masters: done before they go.
		if err := s.h2d.Synchronize(); err != nil {
			return err
		}
		for _, st := range s.params {
			if st.master != nil {
				st.master.Release()
			}
		}
		s.params = nil
		clear(s.byStorage)
		return nil
	})
}

// onceIn is the pager of a parameter moved to the device for good
// (MoveToDevice): its one page-in uploads the host copy.
type onceIn struct {
	dev    device.Device
	master *ferry.Tensor
}

func (o *onceIn) PageIn(t *ferry.Tensor) error {
	b, err := o.dev.Allocator().Alloc(t.PagedBytes(), device.Parameter)
	if err != nil {
		return err
	}
	mb, _ := o.master.Block()
	s := o.dev.Compute()
	if err := o.dev.Copy(s, device.Whole(b), device.Span{Block: mb, Len: t.PagedBytes()}); err != nil {
		o.dev.Allocator().Free(b)
		return err
	}
	if err := s.Record().Synchronize(); err != nil {
		o.dev.Allocator().Free(b)
		return err
	}
	t.InstallBlock(b)
	return nil
}

// MoveToDevice moves parameters built on dev's host to dev, in place (the
// model's handles stay valid): those a Streamer does not stream when the
// model was built on the host. Parameters already on dev are left alone.
func MoveToDevice(dev device.Device, params []*ferry.Tensor) error {
	return ferry.Catch(func() error {
		for _, p := range params {
			if p.Device() == dev || p.Device() != dev.Host() || p.Pager() != nil {
				continue
			}
			o := &onceIn{dev: dev}
			o.master = p.MigrateToPager(dev, o)
			if p.PagedOut() {
				if err := o.PageIn(p); err != nil {
					return err
				}
			}
			p.SetPager(nil)
			o.master.Release()
		}
		return nil
	})
}
