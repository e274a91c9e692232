package dist

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"ferry"
	"ferry/device"
	"ferry/internal/workq"
)

// The shards' steps beside the device (FullShard.SetStepBeside): ZeRO-3
// with the optimizer's state on the host (ZeRO-Offload's CPU optimizer),
// the update of each shard overlapping backward and the next forward.
//
// Backward completes the gradients from the last layer to the first, and
// each one's reduce-scatter lands in that order. As soon as a shard's mean
// gradient has landed, its step (the optimizer's, on the host) is queued
// for a host worker; the step does not wait for the updates, and a
// parameter's next gather waits for its own shard's (startGather), so the
// updates the host still has to do when backward ends run beside the next
// forward. The worker always runs, among the queued steps, the one of the
// parameter that comes first in the model's order (the next forward's,
// near enough), so that the first layers' updates, whose gradients land
// last, are not behind the others. Nothing is delayed: every shard is
// updated before its parameter is next gathered, and the bits are those
// of stepping every shard after Wait.
//
// On a device that simulates time (meta) the same rule runs in simulated
// time, as package offload's host steps beside a Streamer do: a step is
// charged to the host's clock at the moment the host would choose it,
// and a gather makes the compute stream wait for its shard's step.
//
// The gradients' norm (clipping) needs every gradient before any update,
// so it is not available then. On the device path (FullShardOptions.
// Device) a share lands once its copy to host memory, on the side stream
// after its reduce-scatter, has completed.

// shardStep is one shard's step beside the device.
type shardStep struct {
	fp     *fsParam
	seq    int
	done   chan struct{} // closed once it ran (real devices)
	err    error
	landed float64      // when its gradient landed (simulated time)
	ev     device.Event // its end (simulated time), once run
}

// hostClock is implemented by devices that simulate time (the meta
// device): the host's work beside the device is charged to its clock.
type hostClock interface {
	Now() float64
	HostFree() float64
	EventTime(device.Event) (float64, bool)
	BeginHostAt(t float64)
	EndHostAsync() device.Event
}

// besideState is a FullShard's steps beside the device.
type besideState struct {
	step   func(shard *ferry.Tensor) error
	sim    hostClock // nil on a device with data
	worker *workq.Queue
	mu     sync.Mutex
	queue  []*shardStep // queued, not yet picked (real devices), or not yet run (sim)
	steps  map[*fsParam]*shardStep
	seq    int
	landed int // of the reduce-scatters started (rsNext), how many have landed
}

// SetStepBeside makes each shard's optimizer step run beside the device
// as soon as its mean gradient has landed (step(shard): the optimizer
// over the shards, such as optim.InBackward's GradReady of the one under
// Optimizer, which also drops the shard's gradient), instead of the
// caller stepping every shard after Wait; nil turns it off, after the
// steps queued have run. Wait then leaves the steps running; a
// parameter's next gather waits for its shard's, and Settle for all of
// them (before the shards or the optimizer's state are read). The
// gradients' norm is not available then.
func (f *FullShard) SetStepBeside(step func(shard *ferry.Tensor) error) error {
	if f.beside != nil {
		if err := f.settleSteps(); err != nil {
			return err
		}
		if step == nil {
			if f.beside.worker != nil {
				f.beside.worker.Close()
			}
			f.beside = nil
			return nil
		}
		f.beside.step = step
		return nil
	}
	if step == nil {
		return nil
	}
	b := &besideState{step: step, steps: map[*fsParam]*shardStep{}}
	if sim, ok := f.dev.(hostClock); ok && f.shared {
		b.sim = sim
	} else {
		b.worker = workq.New()
	}
	f.beside = b
	return nil
}

// land finishes the reduce-scatters started that have landed (all of
// them with force), in the order they started, and queues their shards'
// steps. On a device that simulates time every one started has: its
// landing time is its event's.
func (f *FullShard) land(force bool) {
	b := f.beside
	for b.landed < f.rsNext {
		fp := f.params[len(f.params)-1-b.landed]
		if !force && b.sim == nil && fp.rs != nil && !fp.rs.Done() {
			return
		}
		b.landed++
		at := 0.0
		if b.sim != nil && fp.rs != nil {
			at, _ = b.sim.EventTime(fp.rs)
		}
		finish := f.finishGrad
		if f.dc != nil {
			finish = f.finishGradDevice
		}
		if err := finish(fp); err != nil {
			f.noteErr(err)
			continue
		}
		if b.sim != nil && f.down != nil { // after its share's way down
			t, _ := b.sim.EventTime(f.down.Record())
			at = max(at, t)
		}
		if fp.shard == nil {
			continue
		}
		if err := f.waitStep(fp); err != nil { // the last step's, if no gather came for it
			f.noteErr(err)
			continue
		}
		b.seq++
		s := &shardStep{fp: fp, seq: b.seq, landed: at}
		b.steps[fp] = s
		if b.sim != nil {
			b.queue = append(b.queue, s)
			f.simAdvance(b.sim.Now(), nil)
			continue
		}
		s.done = make(chan struct{})
		b.mu.Lock()
		b.queue = append(b.queue, s)
		b.mu.Unlock()
		if err := b.worker.Push(f.turn); err != nil {
			f.noteErr(err)
		}
	}
}

// pickStep is the index of the queued step to run next: the first
// parameter's in the model's order among those that have landed by now
// (ready), the earlier queued between equals; -1 if none has.
func pickStep(q []*shardStep, ready func(*shardStep) bool) int {
	best := -1
	for i, s := range q {
		if ready(s) && (best < 0 || s.fp.i < q[best].fp.i || s.fp.i == q[best].fp.i && s.seq < q[best].seq) {
			best = i
		}
	}
	return best
}

// turn runs one queued step on the worker: each push queues one turn.
func (f *FullShard) turn() {
	b := f.beside
	b.mu.Lock()
	i := pickStep(b.queue, func(*shardStep) bool { return true })
	s := b.queue[i]
	b.queue = slices.Delete(b.queue, i, i+1)
	step := b.step
	b.mu.Unlock()
	defer close(s.done)
	s.err = runStep(step, s.fp.shard)
}

// runStep runs step on shard, turning a panic into its error.
func runStep(step func(*ferry.Tensor) error, shard *ferry.Tensor) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("dist: a shard's step panicked: %v", r)
			}
		}
	}()
	return step(shard)
}

// simAdvance runs the queued steps in simulated time, each when the host
// would choose it (when it is free, or when the first gradient lands if
// none has by then): while that moment is no later than limit, or, with
// until, until until has run.
func (f *FullShard) simAdvance(limit float64, until *shardStep) {
	b := f.beside
	for len(b.queue) > 0 {
		if until != nil && until.ev != nil {
			return
		}
		first := math.Inf(1)
		for _, s := range b.queue {
			first = min(first, s.landed)
		}
		now := max(b.sim.HostFree(), first)
		if until == nil && now > limit {
			return
		}
		i := pickStep(b.queue, func(s *shardStep) bool { return s.landed <= now })
		s := b.queue[i]
		b.queue = slices.Delete(b.queue, i, i+1)
		b.sim.BeginHostAt(now)
		s.err = runStep(b.step, s.fp.shard)
		s.ev = b.sim.EndHostAsync()
	}
}

// waitStep waits for fp's shard's step, if one is queued or running (on
// a device that simulates time, the compute stream waits for it), and
// returns its error.
func (f *FullShard) waitStep(fp *fsParam) error {
	b := f.beside
	if b == nil {
		return nil
	}
	s := b.steps[fp]
	if s == nil {
		return nil
	}
	delete(b.steps, fp)
	if b.sim != nil {
		f.simAdvance(math.Inf(1), s)
		f.dev.Compute().Wait(s.ev)
	} else {
		<-s.done
	}
	return s.err
}

// settleSteps waits for every shard's step and returns the first error
// of one since the last report.
func (f *FullShard) settleSteps() error {
	b := f.beside
	if b == nil {
		return nil
	}
	var err error
	for _, fp := range f.params {
		if e := f.waitStep(fp); e != nil && err == nil {
			err = e
		}
	}
	return err
}
