package offload

import (
	"sync"
	"testing"

	"ferry/device"
)

// flag is an event the test completes by hand.
type flag struct {
	once sync.Once
	ch   chan struct{}
}

func newFlag() *flag { return &flag{ch: make(chan struct{})} }
func (f *flag) set() { f.once.Do(func() { close(f.ch) }) }
func (f *flag) Done() bool {
	select {
	case <-f.ch:
		return true
	default:
		return false
	}
}
func (f *flag) Synchronize() error { <-f.ch; return nil }

var _ device.Event = (*flag)(nil)

// The worker runs, among the updates whose gradients have arrived, the one
// the next forward needs first, and waits for the first gradient sent when
// none has arrived: gradients arriving last layer first are updated first
// layer first once they are all there.
func TestBesideQueueRunsWhatForwardNeedsFirst(t *testing.T) {
	q := newBesideQueue()
	var mu sync.Mutex
	var ran []int
	started, gate := make(chan struct{}), newFlag() // hold the worker in the first task
	arrived := newFlag()                            // the other gradients' copies
	var tasks []*hostTask
	for i, prio := range []int{9, 3, 1, 0, 2} {
		after := device.Event(arrived)
		if i == 0 {
			after = doneEvent{}
		}
		p := prio
		task := &hostTask{after: after, prio: prio, seq: i, done: make(chan struct{}), work: func() {
			if p == 9 {
				close(started)
				<-gate.ch
			}
			mu.Lock()
			ran = append(ran, p)
			mu.Unlock()
		}}
		tasks = append(tasks, task)
		if !q.push(task) {
			t.Fatal("push refused")
		}
		if i == 0 {
			<-started
		}
	}
	gate.set() // the worker finds nothing arrived and waits for the first sent
	arrived.set()
	q.close()
	for _, task := range tasks {
		<-task.done
	}
	want := []int{9, 0, 1, 2, 3}
	for i := range want {
		if i >= len(ran) || ran[i] != want[i] {
			t.Fatalf("ran %v, want %v", ran, want)
		}
	}
	if q.push(&hostTask{}) {
		t.Error("push after close accepted")
	}
}

type doneEvent struct{}

func (doneEvent) Done() bool         { return true }
func (doneEvent) Synchronize() error { return nil }

// pickTask prefers the earliest use among ready tasks, queue order
// breaking ties, and reports when none is ready.
func TestPickTask(t *testing.T) {
	ts := []*hostTask{{prio: 5, seq: 1}, {prio: 2, seq: 2}, {prio: 2, seq: 3}, {prio: 0, seq: 4}}
	if i := pickTask(ts, func(t *hostTask) bool { return t.seq != 4 }); i != 1 {
		t.Errorf("picked %d, want 1", i)
	}
	if i := pickTask(ts, func(*hostTask) bool { return true }); i != 3 {
		t.Errorf("picked %d, want 3", i)
	}
	if i := pickTask(ts, func(*hostTask) bool { return false }); i != -1 {
		t.Errorf("picked %d with nothing ready", i)
	}
}
