package cpu

import (
	"runtime"
	"sync"
)

// parallelFor runs body over [0, n) split into at most GOMAXPROCS contiguous
// chunks of at least grain items each; the last chunk runs on the caller's
// goroutine. The split depends only on n, grain and GOMAXPROCS, and callers
// never split a sum across chunks, so results are bitwise reproducible.
func parallelFor(n, grain int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := runtime.GOMAXPROCS(0)
	if grain < 1 {
		grain = 1
	}
	if max := n / grain; max < w {
		w = max
	}
	if w <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		if hi == n {
			body(lo, hi)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lo, hi)
		}()
	}
	wg.Wait()
}

// elementGrain is the fewest elements worth a goroutine of elementwise work.
const elementGrain = 1 << 15
