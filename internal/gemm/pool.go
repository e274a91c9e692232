package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel products are computed by the calling goroutine together with
// helpers from a pool of long-lived goroutines; all of them claim blocks of
// C from the problem's grid (problem.work), so a helper that starts late
// merely finds less (or no) work left.
//
// Waking a parked goroutine costs tens of microseconds (more in a VM),
// which would dominate mid-sized products, so both sides spin for a short
// while before blocking: an idle helper polls for new problems for spinFor
// after finishing one, and the caller polls for completion before sleeping.
// Back-to-back calls (a training loop) therefore hand off work in about a
// microsecond, while an idle process stops spinning quickly.
const spinFor = 200 * time.Microsecond

var (
	taskCh   = make(chan *problem, 256)
	poolMu   sync.Mutex
	poolSize atomic.Int32
)

// submit asks up to helpers pool goroutines to work on p, growing the pool
// if needed. Requests that do not fit in the queue are dropped: the caller
// computes any block nobody claims.
func submit(p *problem, helpers int) {
	if int(poolSize.Load()) < helpers {
		poolMu.Lock()
		for int(poolSize.Load()) < helpers {
			poolSize.Add(1)
			go poolWorker()
		}
		poolMu.Unlock()
	}
	for range helpers {
		select {
		case taskCh <- p:
		default:
			return
		}
	}
}

func poolWorker() {
	for {
		nextTask().work()
	}
}

// nextTask spins for up to spinFor polling taskCh, then blocks on it.
func nextTask() *problem {
	var start time.Time
	for i := 0; ; i++ {
		select {
		case t := <-taskCh:
			return t
		default:
		}
		if i&63 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				return <-taskCh
			}
			runtime.Gosched()
		}
	}
}

// doneGroup is a WaitGroup whose waiter spins before sleeping.
type doneGroup struct {
	pending atomic.Int32
	wg      sync.WaitGroup
}

func (d *doneGroup) add(n int) {
	d.pending.Add(int32(n))
	d.wg.Add(n)
}

func (d *doneGroup) finish() {
	d.pending.Add(-1)
	d.wg.Done()
}

func (d *doneGroup) wait() {
	var start time.Time
	for i := 0; d.pending.Load() > 0; i++ {
		if i&63 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				break
			}
			runtime.Gosched()
		}
	}
	d.wg.Wait()
}
