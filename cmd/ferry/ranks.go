package main

import "fmt"

// ranksNote tells people how a run under mpirun divides its work: how
// many ranks ran, that --batch is each rank's, and the global batch
// (ranks × batch) the optimizer steps on, which is what the learning rate
// is tuned to. It is "" for one rank.
func ranksNote(ranks, batch, accum int, unit string) string {
	if ranks <= 1 {
		return ""
	}
	what := "sequences"
	if unit == "samples" {
		what = "samples"
	}
	s := fmt.Sprintf("data-parallel over %d ranks (mpirun): --batch %d is per rank, a global batch of %d × %d = %d %s per micro-batch",
		ranks, batch, ranks, batch, ranks*batch, what)
	if accum > 1 {
		s += fmt.Sprintf(", %d per step with --accum %d", ranks*batch*accum, accum)
	}
	return s
}
