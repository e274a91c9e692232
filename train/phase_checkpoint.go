package train

import "encoding/json"

// checkpointAt saves a checkpoint after step when it is time: every
// CheckpointEvery steps (0: at every evaluation) and at the last.
func (r *run) checkpointAt(step int) error {
	every := r.cfg.CheckpointEvery
	if every == 0 {
		every = r.cfg.EvalEvery
	}
	if r.ckpt != nil && ((every > 0 && step%every == 0) || step == r.cfg.Steps) {
		return r.save(step)
	}
	return nil
}

// save writes the checkpoint of step, once every update has settled, and
// records it as the result's. On several ranks every rank takes part
// (a sharded state is gathered), rank 0 writes, and no rank goes on
// before the files are whole.
func (r *run) save(step int) error {
	if r.ckpt == nil {
		return nil
	}
	if err := r.settle(); err != nil {
		return err
	}
	st, release, err := r.checkpointState()
	if err != nil {
		return err
	}
	defer release()
	if r.red != nil {
		defer r.cfg.Comm.Barrier()
		if r.rank > 0 {
			r.res.Checkpoint = r.ckpt.PathFor(step)
			return nil
		}
	}
	extra, _ := json.Marshal(r.hist)
	path, err := r.ckpt.Save(r.model, st, Meta{Step: step, Seed: r.cfg.Seed, Identity: r.identity, Extra: extra,
		DataPosition: map[string]any{"step": step, "note": "batches are drawn from generators keyed by (seed, step)"}})
	if err != nil {
		return err
	}
	r.res.Checkpoint = path
	return nil
}
