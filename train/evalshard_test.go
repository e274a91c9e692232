package train_test

import (
	"testing"

	"ferry/device"
	"ferry/train"
)

// shardEval is a task whose held-out metric rank r measures as r+1 over
// 3 items; Evaluate, the whole set, must not run on several ranks.
type shardEval struct {
	sharded
	whole *int
}

func (s shardEval) Evaluate() ([]train.Metric, error) {
	*s.whole++
	return []train.Metric{{Name: "val", Value: -1}}, nil
}

func (s shardEval) EvaluateShard(rank, size int) ([]train.MetricSum, error) {
	return []train.MetricSum{{Name: "val", Sum: 3 * float64(rank+1), Count: 3}}, nil
}

// On several ranks a ShardEvaluator measures each rank's share, and every
// rank reports the whole set's metric: the sums over the counts.
func TestShardedEvaluation(t *testing.T) {
	wholes := make([]int, 3)
	res, errs := onRanks(t, func(dev device.Device, rank int) train.Task {
		return shardEval{mlpTask(dev, rank).(sharded), &wholes[rank]}
	}, []train.Config{{Steps: 2}, {Steps: 2}, {Steps: 2}})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if m := res[r].Metrics; len(m) != 1 || m[0].Value != 2 { // (3+6+9)/9
			t.Errorf("rank %d: metrics %v, want val 2", r, m)
		}
		if wholes[r] != 0 {
			t.Errorf("rank %d evaluated the whole set %d times", r, wholes[r])
		}
	}
}
