package offload

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"ferry/device"
	"ferry/internal/workq"
)

// Host steps beside the device (StreamConfig.HostStepsBeside).
//
// Backward completes gradients from the last layer to the first; the next
// forward needs the parameters from the first layer to the last. A host
// worker that updated them in the order their gradients arrive would
// finish the first layer last, and the next forward could not start until
// every update was done: the host's work would overlap backward only. So
// the worker always runs, among the updates whose gradients have reached
// the host, the one whose parameter the next forward uses first, and a
// step does not wait for its updates: each parameter's next upload waits
// for its own (bringIn), so the updates the host still has to do when
// backward ends run beside the next forward, in the order it needs them.
// Nothing is delayed: every parameter is updated before its next use, as
// when the step waited for all of them, and the bits are the same.
//
// On a device that simulates time (meta) the same rule runs in simulated
// time: updates are queued and the host's choices made, in order of
// simulated time, as far as what has been issued lets them be known
// (simAdvance).

// hostTask is one parameter's host step beside the device.
type hostTask struct {
	st    *streamed
	after device.Event // the gradient's copy to the host
	prio  int          // the parameter's first use in this step: lower runs first
	seq   int          // queue order, breaking ties
	work  func()
	done  chan struct{} // closed when the step has run
	ev    device.Event  // its end, on a device that simulates time
	err   error         // a panic of work, or after's failure
}

// run runs the task's work once after has completed (wait: on a device
// that simulates time the host's clock accounts for after instead),
// recording a panic as the task's error.
func (t *hostTask) run(wait bool) {
	defer close(t.done)
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				t.err = e
			} else {
				t.err = fmt.Errorf("offload: a host step panicked: %v", r)
			}
		}
	}()
	if wait {
		if err := t.after.Synchronize(); err != nil {
			t.err = err
			return
		}
	}
	t.work()
}

// pickTask returns the index of the task to run next: the one whose
// parameter is used first among those whose gradients have arrived
// (ready), else -1.
func pickTask(tasks []*hostTask, ready func(*hostTask) bool) int {
	best := -1
	for i, t := range tasks {
		if !ready(t) {
			continue
		}
		if best < 0 || t.prio < tasks[best].prio || t.prio == tasks[best].prio && t.seq < tasks[best].seq {
			best = i
		}
	}
	return best
}

// besideQueue runs host tasks on a workq goroutine, by pickTask: each
// push queues one turn, and a turn runs the task pickTask chooses then, so
// there are always as many turns queued as tasks.
type besideQueue struct {
	turns *workq.Queue
	mu    sync.Mutex
	tasks []*hostTask
}

func newBesideQueue() *besideQueue { return &besideQueue{turns: workq.New()} }

// push queues t; false after close.
func (q *besideQueue) push(t *hostTask) bool {
	q.mu.Lock()
	defer q.mu.Unlock() // the turn finds t: it takes mu first
	if q.turns.Push(q.turn) != nil {
		return false
	}
	q.tasks = append(q.tasks, t)
	return true
}

// turn runs one task: the one pickTask chooses among those whose
// gradients have arrived, or, if none has, among those there once the
// first sent has (the copies complete in order).
func (q *besideQueue) turn() {
	for {
		q.mu.Lock()
		i := pickTask(q.tasks, func(t *hostTask) bool { return t.after.Done() })
		if i < 0 {
			first := q.tasks[0].after
			q.mu.Unlock()
			_ = first.Synchronize() // a failure is the task's, when it runs
			continue
		}
		t := q.tasks[i]
		q.tasks = slices.Delete(q.tasks, i, i+1)
		q.mu.Unlock()
		t.run(true)
		return
	}
}

// close runs what is queued and stops the goroutine.
func (q *besideQueue) close() { q.turns.Close() }

// hostSim is implemented by devices that simulate time (the meta device):
// host work beside the device is charged to the host's clock.
type hostSim interface {
	// Now is the compute stream's clock; HostFree when the host's cores
	// are next free; EventTime an event's time.
	Now() float64
	HostFree() float64
	EventTime(device.Event) (float64, bool)
	// BeginHostAt starts accounting host work at t (SimulateHostWork is
	// charged to the host until EndHostAsync), whose event EndHostAsync
	// returns.
	BeginHostAt(t float64)
	EndHostAsync() device.Event
}

// simAdvance runs queued host tasks on a device that simulates time, by
// pickTask, each at the simulated moment the host would choose it: while
// that moment is no later than limit (what is issued up to the compute
// stream's clock is known), or, with until, until until has run.
func (s *Streamer) simAdvance(sim hostSim, limit float64, until *hostTask) {
	at := func(t *hostTask) float64 {
		ts, _ := sim.EventTime(t.after)
		return ts
	}
	for len(s.simQ) > 0 {
		if until != nil && until.ev != nil {
			return
		}
		// The host chooses when it is free, or, if no gradient has
		// arrived by then, when the first does.
		first := math.Inf(1)
		for _, t := range s.simQ {
			first = min(first, at(t))
		}
		now := max(sim.HostFree(), first)
		i := pickTask(s.simQ, func(t *hostTask) bool { return at(t) <= now })
		if until == nil && now > limit {
			return
		}
		t := s.simQ[i]
		s.simQ = append(s.simQ[:i], s.simQ[i+1:]...)
		sim.BeginHostAt(now)
		t.run(false)
		t.ev = sim.EndHostAsync()
	}
}
