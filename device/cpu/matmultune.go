package cpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"ferry/internal/blas"
	"ferry/internal/gemm"
)

// TuneOptions sets how TuneMatmul measures.
type TuneOptions struct {
	// Rounds is how many timed samples of each library a shape gets, in
	// alternating order (default 7); the median counts.
	Rounds int
	// SampleSeconds is the least time one sample runs, repeating the
	// product as needed (default 2 ms).
	SampleSeconds float64
	// Progress, if set, is called after each shape is timed with how
	// many are done of how many.
	Progress func(done, total int)
}

// TuneMatmul times each shape on the pure-Go kernel and on OpenBLAS, as
// the CPU device runs it (Note [matmul table]): a product alone with every
// core (ferry's parallel kernel against ferry's split of one-thread
// OpenBLAS calls, or OpenBLAS's own threads under
// FERRY_BLAS_THREADS=openblas), or, for per-head products, one product per
// core at once (the time given is then the wall time over the number of
// cores, a product's share). It returns one choice per shape, calls[i]
// (how often a step runs it, 0 if unknown) carried along;
// MatmulTable.Merge decides the classes. Wall time is measured: run it on
// an otherwise idle machine.
func TuneMatmul(shapes []MatmulShape, calls []int, o TuneOptions) ([]MatmulChoice, error) {
	if err := CanTuneMatmul(); err != nil {
		return nil, err
	}
	if calls != nil && len(calls) != len(shapes) {
		return nil, errors.New("tune: calls and shapes differ in length")
	}
	if o.Rounds == 0 {
		o.Rounds = 7
	}
	if o.SampleSeconds == 0 {
		o.SampleSeconds = 0.002
	}
	if o.Rounds < 1 || o.Rounds > 1000 || !(o.SampleSeconds > 0 && o.SampleSeconds <= 10) {
		return nil, fmt.Errorf("tune: rounds %d must be in [1, 1000] and sample seconds %v in (0, 10]", o.Rounds, o.SampleSeconds)
	}
	for _, s := range shapes {
		if err := s.check(); err != nil {
			return nil, err
		}
	}
	out := make([]MatmulChoice, len(shapes))
	for i, s := range shapes {
		g, b := timeShape(s, o)
		out[i] = MatmulChoice{MatmulShape: s, GoSeconds: g, BLASSeconds: b}
		if calls != nil {
			out[i].Calls = calls[i]
		}
		if o.Progress != nil {
			o.Progress(i+1, len(shapes))
		}
	}
	return out, nil
}

// CanTuneMatmul says why there is nothing to tune (OpenBLAS does not
// load), or nil.
func CanTuneMatmul() error {
	if !blas.Available() {
		return fmt.Errorf("there is nothing to choose: OpenBLAS is unavailable because %s, so every product runs in pure Go", blas.Reason())
	}
	return nil
}

// timeShape returns the median wall time of one product of s on each
// library.
func timeShape(s MatmulShape, o TuneOptions) (goS, blasS float64) {
	// One set of operands per goroutine that runs the product at once.
	sets := 1
	if !s.Alone {
		sets = runtime.GOMAXPROCS(0)
	}
	type operands struct{ a, b, c []float32 }
	ops := make([]operands, sets)
	r := rand.New(rand.NewPCG(uint64(s.M), uint64(s.N)<<20|uint64(s.K)))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	ar, br := s.M, s.K
	if s.TransA {
		ar = s.K
	}
	if s.TransB {
		br = s.N
	}
	for i := range ops {
		ops[i] = operands{fill(ar * s.LDA), fill(br * s.LDB), make([]float32, s.M*s.LDC)}
	}
	run := func(onBLAS bool, reps int) float64 {
		one := func(p operands) {
			switch {
			case !onBLAS:
				if s.Alone {
					gemm.Sgemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, p.a, s.LDA, p.b, s.LDB, 0, p.c, s.LDC)
				} else {
					gemm.SgemmSerial(s.TransA, s.TransB, s.M, s.N, s.K, 1, p.a, s.LDA, p.b, s.LDB, 0, p.c, s.LDC)
				}
			case blasOwnThreads():
				blasSgemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, p.a, s.LDA, p.b, s.LDB, 0, p.c, s.LDC)
				blasCalled()
			case s.Alone:
				blasSplit(s.TransA, s.TransB, s.M, s.N, s.K, 1, p.a, s.LDA, p.b, s.LDB, 0, p.c, s.LDC)
			default:
				blasSgemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, p.a, s.LDA, p.b, s.LDB, 0, p.c, s.LDC)
			}
		}
		t0 := time.Now()
		for range reps {
			if sets == 1 {
				one(ops[0])
			} else {
				parallelEach(sets, func(i int) { one(ops[i]) })
			}
		}
		// Per product: sets of them run at once.
		return time.Since(t0).Seconds() / float64(reps*sets)
	}
	// Warm both (OpenBLAS's thread setting, page faults, pools), then size
	// the samples from one product on the slower.
	blasOwnThreads()
	run(false, 1)
	run(true, 1)
	one := max(run(false, 1), run(true, 1), 1e-8)
	reps := int(min(max(o.SampleSeconds/one, 1), 1e6))
	var tg, tb []float64
	for i := range o.Rounds {
		// ABBA order, so that neither library always runs first.
		if i%2 == 0 {
			tg = append(tg, run(false, reps))
			tb = append(tb, run(true, reps))
		} else {
			tb = append(tb, run(true, reps))
			tg = append(tg, run(false, reps))
		}
	}
	return median(tg), median(tb)
}

func median(x []float64) float64 {
	slices.Sort(x)
	n := len(x)
	if n%2 == 1 {
		return x[n/2]
	}
	return (x[n/2-1] + x[n/2]) / 2
}
