package train

import (
	"encoding/json"
	"fmt"
	"math"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/optim"
)

// A checkpoint is good once a finite loss has been computed on its
// weights: finite weights alone are not enough (a learning rate of 1e30
// leaves weights of 1e37, all finite, whose loss is NaN). The loop knows
// three proofs, in the order they come:
//
//   - the evaluation at the checkpoint's step, which runs before the
//     save (evaluate refuses a metric that is not finite);
//   - for the run's last checkpoint (its last step, or an interrupted or
//     stopped run's), a forward pass of the next step's first micro-batch
//     on the weights, before they are saved (proveWeights);
//   - otherwise the next step's own forward: the checkpoint is written
//     with SavePending, and provePending names it in latest once that
//     step's loss was finite.
//
// Until then latest names the previous good checkpoint, and pruning keeps
// it: a run that diverges never costs the last good checkpoint.

// checkpointAt saves a checkpoint after step when it is time: every
// CheckpointEvery steps (0: at every evaluation) and at the last.
func (r *run) checkpointAt(step int) error {
	every := r.cfg.CheckpointEvery
	if every == 0 {
		every = r.cfg.EvalEvery
	}
	if r.ckpt != nil && ((every > 0 && step%every == 0) || step == r.cfg.Steps) {
		return r.save(step, step == r.cfg.Steps)
	}
	return nil
}

// save writes the checkpoint of step, once every update has settled, and
// records it as the result's. On several ranks every rank takes part
// (a sharded state is gathered), rank 0 writes, and no rank goes on
// before the files are whole. The run's last checkpoint (last) is proven
// before it is written; any other not proven by an evaluation at step is
// written pending (see above).
func (r *run) save(step int, last bool) error {
	if r.ckpt == nil {
		return nil
	}
	if err := r.settle(); err != nil {
		return err
	}
	good := r.evaluated == step
	if !good && last {
		if err := r.proveWeights(step); err != nil {
			return err
		}
		good = true
	}
	st, release, err := r.checkpointState()
	if err != nil {
		return err
	}
	defer release()
	return r.onHost(func() error { return r.write(step, good, st) }) // ZeRO-3: the parameters gathered into rank 0's host memory
}

// write is save's second half, on every rank: rank 0 writes the
// checkpoint of step with the optimizer state st (good: proven).
func (r *run) write(step int, good bool, st optim.Stateful) error {
	if r.red != nil {
		defer r.cfg.Comm.Barrier()
		if r.rank > 0 {
			// Every rank knows the checkpoint is pending: finish proves
			// it (proveWeights) on all of them, a collective.
			r.pending = 0
			if !good {
				r.pending = step
			}
			r.res.Checkpoint = r.ckpt.PathFor(step)
			return nil
		}
	}
	extra, _ := json.Marshal(r.hist)
	meta := Meta{Step: step, Seed: r.cfg.Seed, Identity: r.identity, Extra: extra,
		DataPosition: map[string]any{"step": step, "note": "batches are drawn from generators keyed by (seed, step)"}}
	save := r.ckpt.SavePending
	if good {
		save = r.ckpt.Save
	}
	path, err := save(r.model, st, meta)
	if err != nil {
		return err
	}
	r.pending = 0
	if !good {
		r.pending = step
	}
	r.res.Checkpoint = path
	return nil
}

// provePending names the pending checkpoint in latest (Checkpointer.
// Prove) now that a step's forward on its weights gave a finite loss.
func (r *run) provePending() error {
	if r.pending == 0 || r.ckpt == nil || r.rank != 0 {
		return nil
	}
	step := r.pending
	r.pending = 0
	return r.ckpt.Prove(step)
}

// proveWeights computes the loss of the first micro-batch of step+1 on
// the current weights, forward only and in evaluation mode, on every
// rank, and fails (ErrNonFinite) unless it is finite on all of them.
func (r *run) proveWeights(step int) error {
	loss, err := r.forwardLoss(step + 1)
	if err != nil {
		return fmt.Errorf("checking the weights after step %d: %w", step, err)
	}
	bad, err := r.agreeStop(math.IsNaN(loss) || math.IsInf(loss, 0))
	if err != nil {
		return fmt.Errorf("checking the weights after step %d: %w", step, err)
	}
	if bad {
		return fmt.Errorf("the weights after step %d give a loss of %v (%w): the run diverged; they were not saved, "+
			"and latest still names the last good checkpoint. Lower --lr or set --clip (e.g. --clip 1), then --resume", step, loss, ErrNonFinite)
	}
	return nil
}

// forwardLoss is the loss of micro-batch 0 of step on the model as it is,
// forward only, in evaluation mode, under the run's precision and the
// memory mode's hooks that must see every op (parameters streamed from
// host memory); what it brought to the device is settled back. It is 0
// on the meta device, which holds no values.
func (r *run) forwardLoss(step int) (float64, error) {
	x, y, _, err := r.batch(step, 0)
	if err != nil {
		return 0, err
	}
	defer x.Release()
	defer y.Release()
	nn.SetTraining(r.model, false)
	defer nn.SetTraining(r.model, true)
	var loss float64
	err = ferry.Step(func(tape *ferry.Tape) error {
		r.attach(tape) // ZeRO-3: every rank runs this forward, gathering
		var l *ferry.Tensor
		tape.NoGrad(func() {
			var out *ferry.Tensor
			tape.Autocast(r.cfg.Precision, func() { out = r.task.Forward(tape, tape.Input(x), false) })
			l = r.task.Loss(out, tape.Input(y))
			out.Release()
		})
		if device.HasData(l.Device()) {
			loss = float64(l.Item())
		}
		return nil
	})
	if serr := r.settleGathered(); err == nil {
		err = serr
	}
	if serr := r.settle(); err == nil {
		err = serr
	}
	return loss, err
}
