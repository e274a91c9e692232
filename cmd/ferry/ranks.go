package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"ferry/cmd/ferry/internal/demo"
	"ferry/dist"
	"ferry/dist/mpi"
	"ferry/models"
	"ferry/optim"
	"ferry/train"
)

// What `ferry train` does under mpirun -np N, besides training (the
// Trainer's part is in package train): it joins the ranks, watches every
// collective, makes one run directory for all of them, names the flags
// on which the ranks disagree, and ends the whole job when one rank
// fails.
//
// How a failure ends the job:
//
//   - The ranks were given other settings: every rank gets the same
//     *train.RankMismatchError from train.New, says it, finalizes and
//     exits 1.
//   - One rank fails alone (its data file is missing, a step fails):
//     it reports the error and aborts the job (dist.Abort, MPI_Abort),
//     since the others may wait in a collective it will never join, and
//     MPI_Finalize would wait for them.
//   - A rank dies (kill -9, a crash): mpirun sees it exit and kills the
//     others.
//   - A rank hangs, or a collective never completes: the watchdog
//     (--collective-timeout, FERRY_COLLECTIVE_TIMEOUT; 5 minutes by
//     default) of a rank waiting in it reports which and aborts the job.

// timeoutEnv sets the watchdog's timeout when --collective-timeout is
// not given.
const timeoutEnv = "FERRY_COLLECTIVE_TIMEOUT"

// collectiveTimeout is the --collective-timeout flag: set says it was
// given.
type collectiveTimeout struct {
	d   time.Duration
	set bool
}

func (c *collectiveTimeout) String() string { return c.d.String() }

func (c *collectiveTimeout) Set(s string) error {
	d, err := parseTimeout(s)
	if err != nil {
		return err
	}
	c.d, c.set = d, true
	return nil
}

// parseTimeout reads a duration ("90s", "10m") or a number of seconds;
// 0 turns the watchdog off.
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f > 1e9 {
			return 0, fmt.Errorf("%q is not a duration (90s, 10m) or a number of seconds", s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative; give 0 to wait forever", s)
	}
	return d, nil
}

// registerRanks declares the flags of training under mpirun that are not
// the Trainer's (--zero and --check-every are with the others).
func (o *trainOptions) registerRanks(fs *flag.FlagSet) {
	o.timeout = &collectiveTimeout{d: dist.DefaultTimeout}
	fs.Var(o.timeout, "collective-timeout", "under mpirun: end the job when a collective has waited this long for the other ranks "+
		"(one died or hangs); 0 waits forever (default: "+timeoutEnv+", else "+dist.DefaultTimeout.String()+")")
}

// timeoutFor is the watchdog's timeout: the flag, else the environment,
// else dist.DefaultTimeout.
func (o *trainOptions) timeoutFor() (time.Duration, error) {
	if o.timeout == nil {
		return dist.DefaultTimeout, nil
	}
	if o.timeout.set {
		return o.timeout.d, nil
	}
	if s := os.Getenv(timeoutEnv); s != "" {
		d, err := parseTimeout(s)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", timeoutEnv, err)
		}
		return d, nil
	}
	return o.timeout.d, nil
}

// openComm joins the ranks when mpirun started this process (one rank
// otherwise) and returns where this rank prints: only rank 0 prints.
// What cannot run on several ranks is refused before MPI starts; the
// ranks' collectives are then watched (dist.Watch).
func (o *trainOptions) openComm(out io.Writer) (io.Writer, error) {
	timeout, err := o.timeoutFor()
	if err != nil {
		return nil, err
	}
	if l, ok, err := mpi.Launched(); err != nil {
		return nil, err
	} else if ok {
		how := fmt.Sprintf("mpirun -np %d", l.Size)
		if o.policy != "" {
			how += " (--policy " + o.policy + " planned them)"
		}
		if err := rankStateError(l.Size, how, o.zero == 3, o.optimizerState == "host", o.gradsOnHost, len(o.paramsOnHost) > 0); err != nil {
			return nil, err
		}
	}
	c, err := mpi.Auto()
	if err != nil {
		return nil, err
	}
	if c.Size() > 1 {
		rank := c.Rank()
		c = dist.Watch(c, timeout, func(err error) {
			fmt.Fprintf(os.Stderr, "ferry: %v; ending the job (--collective-timeout or %s sets how long a collective may wait)\n", err, timeoutEnv)
			dist.Abort(c, 1)
		})
		if rank > 0 {
			o.comm = c
			return io.Discard, nil
		}
	}
	o.comm = c
	return out, nil
}

// ranked wraps a train command's work: when it returns, the rank leaves
// the job (endComm) after everything the work deferred has run.
func (o *trainOptions) ranked(do func(out io.Writer, asJSON bool) error) func(out io.Writer, asJSON bool) error {
	return func(out io.Writer, asJSON bool) error {
		err := do(out, asJSON)
		if o.endComm(err) {
			err = saidError{err}
		}
		return err
	}
}

// endComm leaves the job. Every rank finalizes after a success, or when
// the ranks stop together for the same reason (they disagree on their
// settings, or were interrupted); after an error of its own, a rank of
// several reports it and aborts the job (it does not return), since the
// others may be waiting in a collective it will never join. said is
// whether it wrote err to standard error.
func (o *trainOptions) endComm(err error) (said bool) {
	c := o.comm
	if c == nil {
		return false
	}
	o.comm = nil
	var mismatch *train.RankMismatchError
	switch {
	case err == nil || c.Size() == 1 || errors.Is(err, demo.ErrInterrupted):
	case errors.As(err, &mismatch):
		// Said now, before MPI_Finalize: once the first rank exits
		// non-zero, mpirun kills the others, which then say nothing.
		fmt.Fprintf(os.Stderr, "ferry: rank %d of %d: %v\n", c.Rank(), c.Size(), err)
		said = true
	default:
		fmt.Fprintf(os.Stderr, "ferry: rank %d of %d: %v; ending the job\n", c.Rank(), c.Size(), err)
		dist.Abort(c, 1)
	}
	c.Close()
	return said
}

// saidError is an error a rank has written to standard error already:
// run does not write it again.
type saidError struct{ error }

func (e saidError) Unwrap() error { return e.error }

// runDirFor is the run directory of a run given no --checkpoint-dir ("",
// made false, when it has one): made here (newRunDir) in one process;
// under mpirun made by rank 0, which sends every rank its name, so that
// all ranks save to it as one process would. made says this process
// made it (and removes it if the run saves nothing). Every rank takes
// part in the broadcast, with or without --checkpoint-dir, so that no
// rank waits for it alone; a rank whose --checkpoint-dir differs from
// rank 0's is refused when the ranks compare their settings.
func (o *trainOptions) runDirFor(task string) (dir string, made bool, err error) {
	want := o.checkpointDir == ""
	c := o.comm
	if c == nil || c.Size() == 1 {
		if !want {
			return "", false, nil
		}
		dir, err = newRunDir(task)
		return dir, err == nil, err
	}
	if c.Rank() == 0 && want {
		if dir, err = newRunDir(task); err != nil {
			return "", false, err // endComm aborts the job: the others wait in the broadcast
		}
		made = true
	}
	b, err := dist.BroadcastBytes(c, []byte(dir), 0)
	if err != nil {
		return "", false, fmt.Errorf("sharing the run directory: %w", err)
	}
	if !want {
		return "", false, nil
	}
	return string(b), made, nil
}

// rankStateError is the rule ferry plan and ferry train share: with more
// than one rank, the gradients and the parameters stay in device memory,
// where ZeRO (--zero) shares them, but at ZeRO-3 with the optimizer's
// state on the host, where each rank's shards may live in host memory
// (--parameters host: ZeRO-3 offload) and each rank's share of the
// gradients lands there (--gradients host says so, and changes nothing). The
// optimizer's state may be in host memory at every stage (each rank's
// share of it at ZeRO 1 to 3: where ZeRO-Offload puts it). how names the
// ranks ("--ranks 4", "mpirun -np 4"); zero3 says the run is, or may be,
// at ZeRO-3, and stateHost that its optimizer's state is, or may be, on
// the host.
func rankStateError(ranks int, how string, zero3, stateHost, gradsOnHost, paramsOnHost bool) error {
	switch {
	case ranks <= 1:
		return nil
	case gradsOnHost && (!zero3 || !stateHost):
		return fmt.Errorf("--gradients host with %s: across ranks the gradients are reduced on the device; each rank's share lands in host memory under ZeRO-3 with the optimizer's state there: use --zero 3 --optimizer-state host", how)
	case paramsOnHost && (!zero3 || !stateHost):
		return fmt.Errorf("--parameters host with %s: across ranks, the parameters in host memory are ZeRO-3's shards, stepped where the optimizer's state is: use --zero 3 --optimizer-state host", how)
	}
	return nil
}

// rankFlagError names the flags behind a *train.RankMismatchError
// ("ranks disagree on --steps: rank 0 has 100, rank 1 has 200"); other
// errors pass as they are.
func rankFlagError(err error) error {
	var e *train.RankMismatchError
	if !errors.As(err, &e) {
		return err
	}
	return rankMismatch{e}
}

// rankMismatch is a RankMismatchError described with flag names; it
// still matches *train.RankMismatchError (errors.As).
type rankMismatch struct{ e *train.RankMismatchError }

func (r rankMismatch) Error() string { return r.e.Describe(settingFlag) }
func (r rankMismatch) Unwrap() error { return r.e }

// settingFlag names, for people, the flag (or else the thing) behind a
// key of the ranks' settings (train.Trainer's rankIdentity).
func settingFlag(key string) string {
	switch key {
	case "shard":
		return "--zero"
	case "parameters":
		return "the model's parameters (the model's flags)"
	case "ferry_version":
		return "ferry's build"
	case "device":
		return "the kind of --device"
	case "data":
		return "--data (the content's SHA-256)"
	case "task":
		return "the command (ferry train mnist or text)"
	case "ranks":
		return "the number of ranks"
	case "bucket_bytes":
		return "the gradient buckets' size"
	case "policy":
		return "--policy (the file's content)"
	case "schedule":
		return "the learning-rate schedule"
	case "lr", "weight_decay", "momentum":
		return "--" + strings.ReplaceAll(key, "_", "-")
	}
	for _, n := range optim.Names() { // a hyperparameter without a flag of its own
		if r, err := optim.Lookup(n); err == nil && slices.Contains(optim.HyperNames(r), key) {
			return "--optimizer-args " + key
		}
	}
	for _, n := range models.Names(nil) { // a model size: its flag is its name
		if f, err := models.Lookup(n); err == nil && slices.ContainsFunc(f.Sizes(), func(z models.Size) bool { return z.Name == key }) {
			return "--" + key
		}
	}
	return "--" + strings.ReplaceAll(key, "_", "-") // the others are named as their flags
}

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
