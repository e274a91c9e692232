package train

// bestOf is each metric's best value among the evaluations in h, by the
// way h.Better says it improves (Lower when unrecorded). A resumed run
// starts its best values from it, so that Result.Best counts the
// evaluations made before the stop, as the history does.
func bestOf(h *History) map[string]Metric {
	best := map[string]Metric{}
	for name, points := range h.Evals {
		for _, p := range points {
			keepBest(best, Metric{Name: name, Value: p.Value, Better: h.Better[name]})
		}
	}
	return best
}

// keepBest records m in best when it improves on the value there (or
// there is none).
func keepBest(best map[string]Metric, m Metric) {
	b, seen := best[m.Name]
	if !seen || (m.Better == Higher && m.Value > b.Value) || (m.Better == Lower && m.Value < b.Value) {
		best[m.Name] = m
	}
}
