package train

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"ferry/optim"
)

// resume is the first phase: it takes the checkpoint directory (rank 0,
// for the whole run: unlock gives it back) and, with Config.Resume, loads
// the latest checkpoint there, history included, so that the run goes on
// from the step after it. Without Resume a directory that holds
// checkpoints is refused, so that a new run does not mix with an old one.
// On several ranks every rank then takes rank 0's weights.
func (r *run) resume(ctx context.Context) (unlock func(), err error) {
	unlock = func() {}
	if r.ckpt != nil && r.rank == 0 {
		// One writer per checkpoint directory, for the whole run.
		if unlock, err = r.ckpt.Lock(); err != nil {
			return nil, err
		}
	}
	if err := r.findFirst(ctx); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// findFirst finds the run's first step: after the checkpoint it resumes,
// or 1.
func (r *run) findFirst(ctx context.Context) error {
	if r.ckpt != nil {
		var err error
		if r.cfg.Resume {
			err = r.load(ctx)
		} else {
			err = r.refuseOldCheckpoints()
		}
		if err != nil {
			return err
		}
	}
	if r.first > r.cfg.Steps {
		return fmt.Errorf("the checkpoint is at step %d, and this run has %d steps: nothing left to train (give more steps)", r.first-1, r.cfg.Steps)
	}
	if err := r.broadcastWeights(); err != nil {
		return err
	}
	r.res.FirstStep = r.first
	return nil
}

// load resumes from the latest checkpoint, if there is one yet.
func (r *run) load(ctx context.Context) error {
	st, _ := r.opt.(optim.Stateful)
	meta, path, err := r.ckpt.ResumeContext(ctx, r.model, st, r.identity)
	if err != nil {
		return err
	}
	if meta == nil {
		r.say("no checkpoint in %s yet; starting at step 1", r.cfg.CheckpointDir)
		return nil
	}
	r.first = meta.Step + 1
	r.res.ResumedFrom = meta.Step
	// latest names it already, unless Dir had no latest (Resume took the
	// newest directory): the first step's forward proves it either way.
	r.pending = meta.Step
	if len(meta.Extra) > 0 {
		if err := json.Unmarshal(meta.Extra, r.hist); err != nil {
			return fmt.Errorf("checkpoint %s: its history: %w", path, err)
		}
		if r.hist.Evals == nil {
			r.hist.Evals = map[string][]Point{}
		}
		if r.hist.Better == nil {
			r.hist.Better = map[string]Better{}
		}
	}
	r.say("resumed from %s (step %d of %d)", path, meta.Step, r.cfg.Steps)
	return nil
}

// refuseOldCheckpoints fails when the directory already holds a run's
// checkpoints and this run does not resume it.
func (r *run) refuseOldCheckpoints() error {
	latest, err := r.ckpt.Latest()
	if err != nil {
		return err
	}
	if latest != "" {
		return fmt.Errorf("checkpoint directory %s already holds checkpoints (latest %s); resume to continue that run, "+
			"or give another directory to start afresh (nothing was changed)", r.cfg.CheckpointDir, filepath.Base(latest))
	}
	return nil
}
