package train_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"ferry/device"
	"ferry/dist"
	"ferry/nn"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// onRanks runs one Trainer per rank of a group of len(cfgs) ranks, rank r
// under cfgs[r] (Comm set here), and returns each rank's result and error.
// A rank closes its Comm when it returns, as a failed process would leave
// the job.
func onRanks(t *testing.T, task func(dev device.Device, rank int) train.Task, cfgs []train.Config) ([]*train.Result, []error) {
	t.Helper()
	comms := dist.NewGroup(len(cfgs))
	res := make([]*train.Result, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for r := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer comms[r].Close()
			dev, err := device.Open("cpu", device.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			defer dev.Close()
			tk := task(dev, r)
			defer nn.Release(tk.Model())
			cfg := cfgs[r]
			cfg.Comm = comms[r]
			opt := optim.NewAdamW(tk.Model().Parameters(), 1e-2)
			defer opt.Release()
			cfg.Optimizer = opt
			tr, err := train.New(dev, tk, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer tr.Close()
			res[r], errs[r] = tr.Run(context.Background())
		}()
	}
	wg.Wait()
	return res, errs
}

func mlpTask(dev device.Device, rank int) train.Task {
	return sharded{&traintest.MLP{Dev: dev, Layers: 2, Width: 8, Rows: 2, Seed: 5}}
}

// Ranks given other settings fail in New, every one with the same error
// naming each setting and who holds what, instead of training apart or
// waiting for each other forever.
func TestRanksThatDisagreeFailAlike(t *testing.T) {
	cfgs := []train.Config{{Steps: 3, EvalEvery: 1}, {Steps: 3, EvalEvery: 1}, {Steps: 4, EvalEvery: 2}}
	_, errs := onRanks(t, mlpTask, cfgs)
	want := "ranks disagree on eval_every: ranks 0–1 have 1, rank 2 has 2; on steps: ranks 0–1 have 3, rank 2 has 4"
	for r, err := range errs {
		var me *train.RankMismatchError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v\nwant %q", r, err, want)
		}
	}
	if errs[0].Error() != errs[2].Error() {
		t.Errorf("ranks 0 and 2 say different things:\n%v\n%v", errs[0], errs[2])
	}
}

// Other sizes of the model (its parameters' shapes) are a mismatch too.
func TestRanksDisagreeOnTheModel(t *testing.T) {
	_, errs := onRanks(t, func(dev device.Device, rank int) train.Task {
		w := 8 << rank
		return sharded{&traintest.MLP{Dev: dev, Layers: 2, Width: w, Rows: 2, Seed: 5}}
	}, []train.Config{{Steps: 2}, {Steps: 2}})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "ranks disagree on parameters: ") || !strings.Contains(err.Error(), `rank 0 has "4 tensors of 144 elements, shapes `) ||
			!strings.Contains(err.Error(), `rank 1 has "4 tensors of 544 elements, shapes `) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// The same settings: the handshake passes and the ranks train.
func TestRanksThatAgreeTrain(t *testing.T) {
	res, errs := onRanks(t, mlpTask, []train.Config{{Steps: 2}, {Steps: 2}})
	for r, err := range errs {
		if err != nil || res[r].Steps != 2 {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestRankMismatchWording(t *testing.T) {
	e := &train.RankMismatchError{Diffs: []train.RankDiff{
		{Key: "data", Values: []string{`"` + strings.Repeat("a", 64) + `"`, `"` + strings.Repeat("a", 64) + `"`, `"` + strings.Repeat("b", 64) + `"`, ""}},
		{Key: "long", Values: []string{`"` + strings.Repeat("x", 200) + `"`, "1"}},
		{Key: "steps", Values: []string{"1", "2", "3", "4", "5", "6"}},
	}}
	got := e.Describe(func(k string) string { return "--" + k })
	for _, want := range []string{
		`ranks disagree on --data: ranks 0–1 have "aaaaaaaaaaaa…", rank 2 has "bbbbbbbbbbbb…", rank 3 has it unset; `,
		`on --long: rank 0 has "` + strings.Repeat("x", 118) + `…, rank 1 has 1; `,
		"on --steps: rank 0 has 1, rank 1 has 2, rank 2 has 3, rank 3 has 4, and 2 other values",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("%s\nlacks %s", got, want)
		}
	}
}
