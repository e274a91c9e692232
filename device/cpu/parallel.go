package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"ferry/internal/blas"
)

// Parallel loops run on the calling goroutine together with helpers from a
// pool of long-lived goroutines (GOMAXPROCS-1 of them), so that a kernel
// neither starts goroutines nor waits for the scheduler to create them.
//
// Note [chunks]. parallelFor cuts [0, n) into chunks whose boundaries
// depend only on n, grain and GOMAXPROCS. The caller and the helpers claim
// chunks one at a time from a shared counter; a helper that wakes late
// finds fewer chunks (or none) left, and the caller never waits for a
// helper that has not started. Which goroutine computes a chunk varies from
// run to run; what a chunk computes does not, and callers never split one
// floating-point sum across chunks, so results are bitwise reproducible.
//
// Note [spinning]. Waking a parked goroutine costs tens of microseconds on
// a virtual machine, as long as an elementwise kernel over a megabyte. So a
// helper that finished a job polls for the next one for helperSpin before
// parking: back-to-back kernels (a training step) reach a running helper.
// The spin is kept short because between kernels the cores usually belong
// to OpenBLAS's own threads, running a matrix product; a helper spinning
// through a product would take a core from it.

// helperSpin is how long an idle helper polls for work before parking.
const helperSpin = 20 * time.Microsecond

// job is one parallelFor call. It is allocated per call and never reused,
// so a helper that picks it up after the call returned only finds every
// chunk claimed.
type job struct {
	body   func(lo, hi int)
	n      int
	chunk  int
	chunks int32
	next   atomic.Int32 // next chunk to claim
	active atomic.Int32 // helpers inside run
}

// run claims and runs chunks until none is left.
func (j *job) run() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := int(c) * j.chunk
		j.body(lo, min(lo+j.chunk, j.n))
	}
}

var (
	poolMu   sync.Mutex
	poolSize atomic.Int32
	poolJobs = make(chan *job, 64)
	// queued counts jobs sent to poolJobs and not yet received, so that
	// spinning helpers poll one word instead of the channel.
	queued atomic.Int32
)

// ensureHelpers starts helpers until there are n.
func ensureHelpers(n int) {
	if int(poolSize.Load()) >= n {
		return
	}
	poolMu.Lock()
	for int(poolSize.Load()) < n {
		poolSize.Add(1)
		go helper()
	}
	poolMu.Unlock()
}

func helper() {
	for {
		j := nextJob()
		j.active.Add(1)
		j.run()
		j.active.Add(-1)
	}
}

// nextJob polls for a job for helperSpin, then blocks (Note [spinning]).
// The poll is a plain load: runtime.Gosched here would wake idle Ps
// (futex calls) thousands of times a step.
func nextJob() *job {
	start := time.Now()
	for i := 1; ; i++ {
		if queued.Load() > 0 {
			select {
			case j := <-poolJobs:
				queued.Add(-1)
				return j
			default:
			}
		}
		if i%256 == 0 && time.Since(start) > helperSpin {
			j := <-poolJobs
			queued.Add(-1)
			return j
		}
	}
}

// parallelFor runs body over [0, n) in chunks of at least grain items
// (the last may be shorter), on the caller's goroutine and pool helpers.
// Chunk boundaries depend only on n, grain and GOMAXPROCS (Note [chunks]).
// body must be safe to run concurrently on disjoint ranges.
func parallelFor(n, grain int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := runtime.GOMAXPROCS(0)
	grain = max(grain, 1)
	// Up to 4 chunks per goroutine, so that a helper descheduled by the
	// system (other processes) delays the whole by a fraction of its share.
	chunks := min(n/grain, 4*w)
	if w <= 1 || chunks <= 1 {
		body(0, n)
		return
	}
	chunk := (n + chunks - 1) / chunks
	if n/grain < parallelMin || blasSpinning() { // the same chunks, here (Note [OpenBLAS threads])
		for lo := 0; lo < n; lo += chunk {
			body(lo, min(lo+chunk, n))
		}
		return
	}
	runJob(&job{body: body, n: n, chunk: chunk, chunks: int32((n + chunk - 1) / chunk)}, w)
}

// parallelEach runs body(i) for i in [0, n), one item per chunk, on the
// caller's goroutine and pool helpers, however little the work: for items
// of known weight such as blocks of a matrix product.
func parallelEach(n int, body func(i int)) {
	w := runtime.GOMAXPROCS(0)
	if w <= 1 || n <= 1 {
		for i := range n {
			body(i)
		}
		return
	}
	runJob(&job{body: func(lo, hi int) {
		for i := lo; i < hi; i++ {
			body(i)
		}
	}, n: n, chunk: 1, chunks: int32(n)}, w)
}

// runJob runs j's chunks on the caller and up to w-1 helpers.
func runJob(j *job, w int) {
	helpers := min(w-1, int(j.chunks)-1)
	ensureHelpers(w - 1)
	for range helpers {
		queued.Add(1)
		select {
		case poolJobs <- j:
		default: // the queue is full (other callers): do more here
			queued.Add(-1)
		}
	}
	j.run()
	// Every chunk is claimed; wait for helpers still running one (at most
	// a chunk's time, unless the system took their thread away).
	for i := 1; j.active.Load() > 0; i++ {
		if i%1024 == 0 {
			runtime.Gosched()
		}
	}
}

// Note [OpenBLAS threads]. After a product, OpenBLAS's worker threads
// do not sleep at once: they poll for the next product, yielding the core
// between polls, for about 2^28 cycles (THREAD_TIMEOUT; some 64 ms). In a
// training step the next product always comes sooner, so while OpenBLAS
// runs the products its threads hold every core. Helpers woken for an
// elementwise kernel then fight them for the cores: measured on the origin
// model (2 cores), steps took 5-13% longer with elementwise work on two
// goroutines than on one (docs/perf.md). So parallelFor runs its chunks on
// the calling goroutine alone while OpenBLAS's threads may be polling, and
// spreads them again once they have gone to sleep. Results do not change:
// the chunks are the same (Note [chunks]). This applies only with
// FERRY_BLAS_THREADS=openblas: by default OpenBLAS runs on one thread and
// has no threads polling (Note [OpenBLAS on one thread], gemm.go).

// blasPoll is how long OpenBLAS's threads poll after a product.
const blasPoll = 64 * time.Millisecond

var (
	epoch         = time.Now()
	blasPollUntil atomic.Int64 // time.Since(epoch) until which they may poll
	blasThreads   = sync.OnceValue(blas.Threads)
)

// blasCalled notes that a product just ran in OpenBLAS.
func blasCalled() {
	if blasThreads() > 1 {
		blasPollUntil.Store(int64(time.Since(epoch) + blasPoll))
	}
}

// blasSpinning reports whether OpenBLAS's threads may still be polling.
func blasSpinning() bool {
	until := blasPollUntil.Load()
	return until != 0 && int64(time.Since(epoch)) < until
}

// parallelMin is the fewest grains of work worth waking helpers for.
// Below it, the caller runs every chunk: an elementwise kernel over a
// layer's activations (256×1024 floats, 8 grains) runs from the caches
// as fast on one core as on two, and a helper descheduled by the system
// (other processes) would make the caller wait. Tests lower it to run
// small inputs concurrently.
var parallelMin = 16

// elementGrain is the smallest chunk of elementwise work, in elements.
const elementGrain = 1 << 15
