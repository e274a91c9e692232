package train

import (
	"fmt"
	"math"
)

// Cosine is nanoGPT's learning-rate schedule: linear warm-up from 0 to Peak
// over the first Warmup steps, then cosine decay to Min at step Total, and
// Min after that. Steps count from 1.
type Cosine struct {
	Peak, Min     float64
	Warmup, Total int
}

// Validate reports a schedule that cannot be followed.
func (c Cosine) Validate() error {
	switch {
	case !(c.Peak > 0) || math.IsInf(c.Peak, 0):
		return fmt.Errorf("learning rate must be positive and finite, got %v", c.Peak)
	case !(c.Min >= 0) || c.Min > c.Peak:
		return fmt.Errorf("minimum learning rate must be in [0, %v], got %v", c.Peak, c.Min)
	case c.Warmup < 0 || c.Total < 1:
		return fmt.Errorf("warm-up (%d) must be ≥ 0 and total steps (%d) ≥ 1", c.Warmup, c.Total)
	}
	return nil
}

// At returns the learning rate for step (1-based).
func (c Cosine) At(step int) float64 {
	if step <= c.Warmup {
		return c.Peak * float64(step) / float64(c.Warmup)
	}
	if step >= c.Total {
		return c.Min
	}
	progress := float64(step-c.Warmup) / float64(c.Total-c.Warmup)
	return c.Min + 0.5*(c.Peak-c.Min)*(1+math.Cos(math.Pi*progress))
}
