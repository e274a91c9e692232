package train

import "fmt"

// ShardEvaluator is an Evaluator whose held-out set can be split among
// the ranks of data-parallel training (Config.Comm of several ranks), so
// that N ranks at batch B measure exactly what one process at batch N·B
// measures, each rank evaluating only its share. Without it every rank
// evaluates the whole set by itself.
type ShardEvaluator interface {
	Evaluator
	// EvaluateShard measures rank's share of the held-out set that
	// Evaluate measures in one process at size times the batch: for
	// each metric, in the same order on every rank, its sum over the
	// share and the share's weight (items, or batches of equal size),
	// so that over all ranks the total of Sum over the total of Count
	// is that process's value. Shares split the set: none overlap, and
	// together they are the whole.
	EvaluateShard(rank, size int) ([]MetricSum, error)
}

// MetricSum is one rank's share of a held-out metric (ShardEvaluator).
type MetricSum struct {
	Name       string
	Sum, Count float64
	Better     Better
}

// evaluateTask runs ev: on several ranks, when ev is a ShardEvaluator,
// this rank's share, with every rank's sums and counts added by one
// all-reduce, so that every rank gets the same metrics.
func (r *run) evaluateTask(ev Evaluator) ([]Metric, error) {
	se, ok := ev.(ShardEvaluator)
	if !ok || r.red == nil {
		return ev.Evaluate()
	}
	c := r.cfg.Comm
	sums, err := se.EvaluateShard(r.rank, c.Size())
	if err != nil {
		return nil, err
	}
	// The sums travel as float32: their rounding, a few parts in 10^8,
	// is all that separates the metrics from one process's.
	buf := make([]float32, 2*len(sums))
	for i, s := range sums {
		buf[2*i], buf[2*i+1] = float32(s.Sum), float32(s.Count)
	}
	if err := c.AllReduce(buf).Synchronize(); err != nil {
		return nil, err
	}
	ms := make([]Metric, len(sums))
	for i, s := range sums {
		if !(buf[2*i+1] > 0) {
			return nil, fmt.Errorf("metric %s: the ranks' shares hold no items", s.Name)
		}
		ms[i] = Metric{Name: s.Name, Value: float64(buf[2*i]) / float64(buf[2*i+1]), Better: s.Better}
	}
	return ms, nil
}
