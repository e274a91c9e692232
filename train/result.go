package train

import (
	"math"
	"slices"

	"ferry/offload"
)

// Point is one value of a curve: a loss at a step. (Its JSON is a
// checkpoint's history: the names stay.)
type Point struct {
	Step  int     `json:"step"`
	Value float64 `json:"value"`
}

// History is the run's curves; a checkpoint carries it, so a resumed
// run's plots start at step 1.
type History struct {
	Train []Point            `json:"train"`
	Evals map[string][]Point `json:"evals,omitempty"`
	// Better says which way each metric improves.
	Better map[string]Better `json:"better,omitempty"`
}

// Result is what a run did.
type Result struct {
	Steps          int // the last step done
	FirstStep      int // the first step of this run (1 unless resumed)
	ResumedFrom    int
	Interrupted    bool // ctx was cancelled
	Stopped        bool // StopAfter
	WallSeconds    float64
	StepSeconds    float64 // median
	Items          int64   // items trained on by this run
	ItemsPerSecond float64
	LastLoss       float64 // the last step's loss
	SmoothedLoss   float64
	// Metrics are the last evaluation's; Best each metric's best.
	Metrics, Best  []Metric
	PeakBytes      map[string]int64 // device peak by category
	PeakTotalBytes int64
	Offload        *offload.Stats
	Checkpoint     string   // the last checkpoint written
	Plots          []string // the files the Plotter wrote
	History        *History
}

func metricMap(ms []Metric) map[string]float64 {
	m := make(map[string]float64, len(ms))
	for _, x := range ms {
		m[x.Name] = x.Value
	}
	return m
}

// Quantile is the q-quantile of xs (0 ≤ q ≤ 1; linear between the
// two nearest of the sorted values), NaN for none: Quantile(xs, 0.5) is
// Median(xs).
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := q * float64(len(s)-1)
	i := int(at)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (at-float64(i))*(s[i+1]-s[i])
}

// Median is the median of xs (the mean of the middle two for an even
// count), NaN for none: what a run reports as its step time.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
