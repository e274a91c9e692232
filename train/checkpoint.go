package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"ferry"
	"ferry/device"
	"ferry/internal/digest"
	"ferry/internal/fsx"
	"ferry/nn"
	"ferry/optim"
)

// A checkpoint is a directory D/step-NNNNNNNN holding
//
//	model.safetensors      the parameters, under PyTorch's names (tied once)
//	optimizer.safetensors  the optimizer's state tensors ("<param>.exp_avg", ...)
//	trainer.json           step, seed, data position, the run's identity,
//	                       the optimizer's scalars, history, and the size and
//	                       SHA-256 of the two other files
//	trainer.sha256         the SHA-256 of trainer.json, as sha256sum writes
//	                       it (sha256sum -c trainer.sha256 checks it), so
//	                       that every file of a checkpoint is covered
//
// and D/latest names the newest good one: a checkpoint whose weights gave
// a finite loss (see Prove). A directory, rather than one file, so that
// the weights are a plain safetensors file that PyTorch loads.
//
// Writing is atomic: the files go into a temporary directory (.step-…-tmp-
// PID) in D, each fsynced; the directory is fsynced and renamed to its
// name; D is fsynced; then latest is replaced atomically (temporary name,
// fsync, rename, fsync of D). A crash at any point leaves the previous
// checkpoint and latest as they were; a later Save or Resume removes the
// dead process's temporary directory.

// Meta is what a checkpoint records besides tensors.
type Meta struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Step    int    `json:"step"`
	Seed    uint64 `json:"seed"`
	// Identity is what a run must match to resume from the checkpoint:
	// the model's sizes, the task, the data (see Checkpointer.Resume).
	Identity map[string]any `json:"identity"`
	// DataPosition says where the data stream stands. ferry's batches are
	// drawn from generators keyed by (seed, step), so the step is the
	// position; it is recorded for people and other readers.
	DataPosition map[string]any `json:"data_position,omitempty"`
	// OptimizerScalars are the optimizer's scalar state (AdamW's steps).
	OptimizerScalars map[string]float64 `json:"optimizer_scalars"`
	// Extra is the caller's (the train commands keep the loss history).
	Extra json.RawMessage `json:"extra,omitempty"`
	// Files maps each tensor file to its size and SHA-256.
	Files map[string]FileSum `json:"files"`
	// Finite says Save checked that every parameter and optimizer value
	// was finite. prune never removes the newest such checkpoint. Finite
	// weights are not yet good ones (1e37 is finite): a checkpoint is good
	// once a loss computed on its weights was finite, and latest names it
	// only then (Prove).
	Finite bool `json:"finite"`
	// Overrides lists the identity differences accepted on resume
	// (Checkpointer.Overrides), oldest first, carried from checkpoint to
	// checkpoint.
	Overrides []Override `json:"overrides,omitempty"`
}

// FileSum is a file's size and SHA-256, hex.
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

const (
	metaFormat    = "ferry-checkpoint"
	metaVersion   = 1
	modelFile     = "model.safetensors"
	modelBF16File = "model.bf16.safetensors" // Checkpointer.ExportBF16
	optimizerFile = "optimizer.safetensors"
	metaFile      = "trainer.json"
	metaSumFile   = "trainer.sha256"
	latestFile    = "latest"
	maxMetaBytes  = 64 << 20
)

// Checkpointer writes and reads checkpoints in Dir, keeping the newest
// Keep of them (Keep < 1 keeps all), and never the good one latest names,
// nor one just written (see prune). A run holds Dir with Lock for its
// whole length.
type Checkpointer struct {
	Dir  string
	Keep int
	// Overrides are identity keys ("lr", "steps") that Resume and Load let
	// differ between the checkpoint and this run. Each accepted difference
	// is recorded, with OverrideNote, in every checkpoint Save writes
	// afterwards (Meta.Overrides).
	Overrides    []string
	OverrideNote string
	// ExportBF16 also writes the model's parameters rounded to bfloat16
	// (model.bf16.safetensors, half the bytes: for sharing or serving the
	// model) into each checkpoint; model.safetensors stays float32, so a
	// run resumes bit for bit.
	ExportBF16 bool

	mu       sync.Mutex
	locked   bool       // this Checkpointer holds Dir's lock
	accepted []Override // overrides of the resumed checkpoint and this run
}

// PathFor is where the checkpoint of step lives.
func (c *Checkpointer) PathFor(step int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("step-%08d", step))
}

// Save writes a checkpoint of model and opt at meta.Step, names it in
// latest and returns its path: the caller vouches that the weights are
// good (a finite loss was computed on them; the Trainer uses SavePending
// and Prove where it has not yet). The previous checkpoint stays valid
// until this one is complete. It refuses (an error wrapping ErrNonFinite)
// a model or optimizer state holding NaN or Inf, writing nothing: the
// previous checkpoint and latest stay as they were.
func (c *Checkpointer) Save(model nn.Module, opt optim.Stateful, meta Meta) (path string, err error) {
	return c.save(model, opt, meta, true, true)
}

// SavePending is Save for weights no finite loss has been computed on
// yet: the checkpoint is written whole, but latest still names the
// previous good one, and pruning keeps that one (so Dir may hold Keep+1).
// Prove names it once its weights are proven: a diverged step that left
// finite but useless weights (1e37) never replaces a good checkpoint.
func (c *Checkpointer) SavePending(model nn.Module, opt optim.Stateful, meta Meta) (path string, err error) {
	return c.save(model, opt, meta, true, false)
}

// Prove names the checkpoint of step, written by SavePending, in latest,
// once a finite loss was computed on its weights (the next step's
// forward, or an evaluation), and prunes what Keep no longer covers.
func (c *Checkpointer) Prove(step int) error {
	path := c.PathFor(step)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if cur, err := c.named(context.Background()); err != nil || cur != path {
		if err := c.writeLatest(filepath.Base(path)); err != nil {
			return fmt.Errorf("checkpoint: naming %s in %s: %w", filepath.Base(path), latestFile, err)
		}
	}
	c.prune(step)
	return nil
}

func (c *Checkpointer) save(model nn.Module, opt optim.Stateful, meta Meta, check, good bool) (path string, err error) {
	if meta.Step < 0 {
		return "", fmt.Errorf("checkpoint: negative step %d", meta.Step)
	}
	st := opt.State()
	if check {
		if err := checkFinite(model, st, meta.Step); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	c.sweep()
	final := c.PathFor(meta.Step)
	tmp, _, err := createTemp(c.Dir, fmt.Sprintf(".step-%08d-tmp-%d-", meta.Step, os.Getpid()), true)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			removeTemp(tmp)
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w (the disk holding %s is full: free space, lower --keep, or give another --checkpoint-dir; "+
					"the previous checkpoint is intact)", err, c.Dir)
			}
		}
	}()
	if err := nn.SaveSafetensors(filepath.Join(tmp, modelFile), model); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := nn.SaveTensors(filepath.Join(tmp, optimizerFile), st.Tensors, nil); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	files := []string{modelFile, optimizerFile}
	if c.ExportBF16 {
		if err := nn.SaveSafetensorsAs(filepath.Join(tmp, modelBF16File), model, device.BFloat16); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		files = append(files, modelBF16File)
	}
	meta.Format, meta.Version = metaFormat, metaVersion
	meta.OptimizerScalars = st.Scalars
	meta.Finite = check
	if meta.Overrides == nil {
		c.mu.Lock()
		meta.Overrides = append([]Override(nil), c.accepted...)
		c.mu.Unlock()
	}
	meta.Files = map[string]FileSum{}
	for _, f := range files {
		s, err := sumFile(context.Background(), filepath.Join(tmp, f), -1)
		if err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		meta.Files[f] = s
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	b = append(b, '\n')
	for _, f := range []struct {
		name string
		data []byte
	}{{metaFile, b}, {metaSumFile, []byte(sumLine(b))}} {
		if err := fsx.WriteAtomic(filepath.Join(tmp, f.name), func(w io.Writer) error {
			_, err := w.Write(f.data)
			return err
		}); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it private
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	// A checkpoint of this step already there (a resumed run saving the
	// step it resumed from) moves aside first: rename cannot replace a
	// directory that has files.
	var aside string
	if _, err := os.Stat(final); err == nil {
		aside = tmp + asideSuffix
		registerTemp(aside)
		if err := renameTemp(final, aside); err != nil {
			removeTemp(aside) // nothing was moved: forget the name
			return "", fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := renameTemp(tmp, final); err != nil {
		if aside != "" && renameTemp(aside, final) == nil {
			removeTemp(aside)
		}
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(c.Dir); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if good {
		if err := c.writeLatest(filepath.Base(final)); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
	}
	if aside != "" {
		removeTemp(aside)
	}
	c.prune(meta.Step)
	return final, nil
}

// writeLatest replaces D/latest atomically through a temporary file that
// carries this process's pid, so that sweep and RemoveTemporaries find it.
func (c *Checkpointer) writeLatest(name string) (err error) {
	tmp, f, err := createTemp(c.Dir, fmt.Sprintf(".latest-tmp-%d-", os.Getpid()), false)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			removeTemp(tmp)
		}
	}()
	if _, err = fmt.Fprintln(f, name); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = renameTemp(tmp, filepath.Join(c.Dir, latestFile)); err != nil {
		return err
	}
	return syncDir(c.Dir)
}

// checkFinite reports the parameters and optimizer state tensors holding
// a NaN or an infinity.
func checkFinite(model nn.Module, st optim.State, step int) error {
	var bad []string
	for _, p := range model.Parameters() {
		if n, first := countNonFinite(p); n > 0 {
			bad = append(bad, fmt.Sprintf("parameter %s (%d of %d values, e.g. %v)", p.Name(), n, p.Numel(), first))
		}
	}
	bad = append(bad, nonFiniteState(st)...)
	if len(bad) == 0 {
		return nil
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
	}
	return fmt.Errorf("checkpoint of step %d refused: %w in %s. The run diverged; nothing was written and "+
		"the previous checkpoint is kept. Lower --lr or set --clip (e.g. --clip 1), then --resume from the previous checkpoint",
		step, ErrNonFinite, strings.Join(bad, ", "))
}

// nonFiniteState names the optimizer state tensors and scalars holding a
// NaN or an infinity.
func nonFiniteState(st optim.State) []string {
	var bad []string
	names := make([]string, 0, len(st.Tensors))
	for k := range st.Tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if n, first := countNonFinite(st.Tensors[k]); n > 0 {
			bad = append(bad, fmt.Sprintf("optimizer state %s (%d of %d values, e.g. %v)", k, n, st.Tensors[k].Numel(), first))
		}
	}
	scalars := make([]string, 0, len(st.Scalars))
	for k := range st.Scalars {
		scalars = append(scalars, k)
	}
	sort.Strings(scalars)
	for _, k := range scalars {
		if v := st.Scalars[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			bad = append(bad, fmt.Sprintf("optimizer scalar %s (%v)", k, v))
		}
	}
	return bad
}

// countNonFinite counts t's NaN and infinite values and returns the first;
// 0 for a tensor of codes (quantised state: every value is a number).
func countNonFinite(t *ferry.Tensor) (n int, first float32) {
	if t.DType() != device.Float32 {
		return 0, 0
	}
	for _, v := range t.Float32s() {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			if n == 0 {
				first = v
			}
			n++
		}
	}
	return n, first
}

// Latest returns the path of the checkpoint latest names: the newest
// good one (see Prove), or, when Dir has no latest yet, the newest
// complete one; "" if Dir holds none.
func (c *Checkpointer) Latest() (string, error) {
	return c.latest(context.Background())
}

func (c *Checkpointer) latest(ctx context.Context) (string, error) {
	path, err := c.named(ctx)
	if err != nil || path != "" {
		return path, err
	}
	// No latest (a crash before the first one was named): the newest
	// complete directory, if any.
	steps, err := c.steps()
	if err != nil || len(steps) == 0 {
		return "", err
	}
	return c.PathFor(steps[len(steps)-1]), nil
}

// named is the path of the checkpoint latest names, "" when there is no
// latest.
func (c *Checkpointer) named(ctx context.Context) (string, error) {
	p := filepath.Join(c.Dir, latestFile)
	b, err := fsx.ReadFile(ctx, p, 4096)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w (%s names the newest good checkpoint; remove it to use the newest step-* directory)", err, latestFile)
	}
	name := strings.TrimSpace(string(b))
	if _, ok := stepOf(name); !ok || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("checkpoint: %s names %q, which is not a checkpoint; restore it, or remove it to use the newest step-* directory", p, clip(name))
	}
	if _, err := os.Lstat(filepath.Join(c.Dir, name)); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("checkpoint: %s names %s, which %s does not hold; restore it, or remove it to use the newest step-* directory", p, name, c.Dir)
	}
	return filepath.Join(c.Dir, name), nil
}

// clip shortens a hostile string for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Resume loads the latest checkpoint in Dir into model and opt, after
// checking that it was written by a run with the same identity. It returns
// nil meta and no error when Dir holds no checkpoint yet. Everything is
// read and checked before the model or optimizer changes.
func (c *Checkpointer) Resume(model nn.Module, opt optim.Stateful, identity map[string]any) (*Meta, string, error) {
	return c.ResumeContext(context.Background(), model, opt, identity)
}

// ResumeContext is Resume whose reads stop, with an error wrapping
// context.Cause(ctx), once ctx is done; the model and optimizer are then
// left as they were.
func (c *Checkpointer) ResumeContext(ctx context.Context, model nn.Module, opt optim.Stateful, identity map[string]any) (*Meta, string, error) {
	c.sweep()
	path, err := c.latest(ctx)
	if err != nil || path == "" {
		return nil, "", err
	}
	meta, err := c.LoadContext(ctx, path, model, opt, identity)
	return meta, path, err
}

// Load reads the checkpoint at path into model and opt (see Resume).
func (c *Checkpointer) Load(path string, model nn.Module, opt optim.Stateful, identity map[string]any) (*Meta, error) {
	return c.LoadContext(context.Background(), path, model, opt, identity)
}

// LoadContext is Load whose reads stop once ctx is done (see
// ResumeContext).
func (c *Checkpointer) LoadContext(ctx context.Context, path string, model nn.Module, opt optim.Stateful, identity map[string]any) (*Meta, error) {
	meta, err := readMeta(ctx, path)
	if err != nil {
		return nil, err
	}
	accepted, err := c.checkIdentity(path, meta, identity)
	if err != nil {
		return nil, err
	}
	if err := verifyFiles(ctx, path, meta); err != nil {
		return nil, err
	}
	params := model.Parameters()
	if len(params) == 0 {
		return nil, fmt.Errorf("checkpoint: the model has no parameters")
	}
	// An optimizer with its state on the host reads it there: on the
	// device, the whole state at once may not fit beside the model.
	stateDev := params[0].Device()
	if h, ok := opt.(optim.HostPlaced); ok && h.StateOnHost() {
		stateDev = stateDev.Host()
	}
	tensors, _, err := nn.LoadTensorsContext(ctx, filepath.Join(path, optimizerFile), stateDev)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer func() {
		for _, t := range tensors {
			t.Release()
		}
	}()
	st := optim.State{Tensors: tensors, Scalars: meta.OptimizerScalars}
	if st.Scalars == nil {
		st.Scalars = map[string]float64{}
	}
	// The model loads all or nothing; the optimizer's state is checked
	// against the parameters before the model changes, so a mismatch
	// there cannot leave the model half-resumed.
	if err := checkOptimizerState(opt, params, st); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if bad := nonFiniteState(st); len(bad) > 0 {
		return nil, fmt.Errorf("checkpoint %s: %s holds values that are not finite: %s (a damaged or crafted file: resume from an earlier checkpoint)",
			path, optimizerFile, strings.Join(bad, ", "))
	}
	if err := nn.LoadSafetensorsContext(ctx, []string{filepath.Join(path, modelFile)}, model, nn.LoadOptions{RequireFinite: true}); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := opt.SetState(st); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	c.mu.Lock()
	c.accepted = accepted
	c.mu.Unlock()
	return meta, nil
}

// Verify reads a checkpoint's trainer.json (ReadMeta) and checks every
// file it lists against its recorded size and SHA-256, for readers that
// load the files themselves (ferry sample).
func Verify(path string) (*Meta, error) {
	return verify(context.Background(), path)
}

func verify(ctx context.Context, path string) (*Meta, error) {
	meta, err := readMeta(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := verifyFiles(ctx, path, meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// verifyFiles checks every file trainer.json lists (the model and the
// optimizer's state at least) against its recorded size, before reading
// it, and SHA-256.
func verifyFiles(ctx context.Context, path string, meta *Meta) error {
	for _, f := range []string{modelFile, optimizerFile} {
		if _, ok := meta.Files[f]; !ok {
			return fmt.Errorf("checkpoint %s: %s does not list %s", path, metaFile, f)
		}
	}
	names := make([]string, 0, len(meta.Files))
	for f := range meta.Files {
		if f != filepath.Base(f) || strings.HasPrefix(f, ".") {
			return fmt.Errorf("checkpoint %s: %s lists %q, not a file of the checkpoint", path, metaFile, clip(f))
		}
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		want := meta.Files[f]
		got, err := sumFile(ctx, filepath.Join(path, f), want.Size)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if got != want {
			sum := "not read"
			if got.SHA256 != "" {
				sum = "SHA-256 " + got.SHA256[:12] + "…"
			}
			return fmt.Errorf("checkpoint %s: %s is damaged (%d bytes, %s; %s recorded %d bytes, SHA-256 %.12s…): "+
				"restore it, or use an earlier checkpoint", path, filepath.Join(path, f), got.Size, sum, metaFile, want.Size, want.SHA256)
		}
	}
	return nil
}

// ReadMeta reads and checks a checkpoint's trainer.json.
func ReadMeta(path string) (*Meta, error) {
	return readMeta(context.Background(), path)
}

func readMeta(ctx context.Context, path string) (*Meta, error) {
	st, err := fsx.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s is not a directory (a checkpoint is a directory holding %s, %s and %s)",
			path, modelFile, optimizerFile, metaFile)
	}
	b, err := fsx.ReadFile(ctx, filepath.Join(path, metaFile), maxMetaBytes)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var meta Meta
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&meta); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s is not valid: %v", path, filepath.Join(path, metaFile), err)
	}
	if meta.Format != metaFormat || meta.Version != metaVersion {
		return nil, fmt.Errorf("checkpoint %s: %s is format %q version %d; this ferry reads %q version %d",
			path, filepath.Join(path, metaFile), clip(meta.Format), meta.Version, metaFormat, metaVersion)
	}
	if err := checkMetaSum(ctx, path, b); err != nil {
		return nil, err
	}
	if meta.Step < 0 {
		return nil, fmt.Errorf("checkpoint %s: negative step %d", path, meta.Step)
	}
	for k, v := range meta.OptimizerScalars {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("checkpoint %s: optimizer scalar %q is %v", path, k, v)
		}
	}
	return &meta, nil
}

// checkOptimizerState checks st against opt and params without changing
// anything: through the optimizer's own CheckState where it has one
// (optim.Engine's: every name, shape and dtype of its layout), otherwise
// st's names and shapes against params.
func checkOptimizerState(opt optim.Stateful, params []*ferry.Tensor, st optim.State) error {
	if c, ok := opt.(interface{ CheckState(optim.State) error }); ok {
		return c.CheckState(st)
	}
	shapes := map[string][]int{}
	for _, p := range params {
		shapes[p.Name()] = p.Shape()
	}
	var problems []string
	for k, t := range st.Tensors {
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			problems = append(problems, fmt.Sprintf("optimizer state %q names no parameter", k))
			continue
		}
		s, ok := shapes[k[:i]]
		if !ok {
			problems = append(problems, fmt.Sprintf("optimizer state %q is for a parameter the model lacks", k))
		} else if fmt.Sprint(s) != fmt.Sprint(t.Shape()) {
			problems = append(problems, fmt.Sprintf("optimizer state %q has shape %v, the parameter %v", k, t.Shape(), s))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// steps lists the complete checkpoints' steps, ascending.
func (c *Checkpointer) steps() ([]int, error) {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var steps []int
	for _, e := range entries {
		if s, ok := stepOf(e.Name()); ok && e.IsDir() {
			steps = append(steps, s)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

func stepOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "step-")
	if !ok || len(rest) < 1 {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// prune removes all but the newest Keep checkpoints, never the one just
// written, never the good one latest names, and never the newest one
// whose state was checked finite: a checkpoint written before its proof,
// one of an older ferry, or a damaged one does not push the last good
// state out. A latest that cannot be read prunes nothing.
func (c *Checkpointer) prune(current int) {
	if c.Keep < 1 {
		return
	}
	steps, err := c.steps()
	if err != nil {
		return
	}
	keep := map[int]bool{current: true}
	latest, err := c.latest(context.Background())
	if err != nil {
		return
	}
	if s, ok := stepOf(filepath.Base(latest)); ok && latest != "" {
		keep[s] = true
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if m, err := ReadMeta(c.PathFor(steps[i])); err == nil && m.Finite {
			keep[steps[i]] = true
			break
		}
	}
	for i := 0; i < len(steps)-c.Keep; i++ {
		if !keep[steps[i]] {
			os.RemoveAll(c.PathFor(steps[i]))
		}
	}
}

// sweep removes temporary files and directories left by processes that
// died while writing a checkpoint: those whose pid is gone, and, while
// this Checkpointer holds Dir's lock (no other ferry writes there), every
// one that is not this process's.
func (c *Checkpointer) sweep() {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return
	}
	c.mu.Lock()
	locked := c.locked
	c.mu.Unlock()
	temporaries.Lock()
	defer temporaries.Unlock()
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(c.Dir, name)
		if temporaries.paths[path] {
			continue
		}
		var rest string
		switch {
		case strings.HasPrefix(name, ".step-"):
			i := strings.Index(name, "-tmp-")
			if i < 0 {
				continue
			}
			rest = name[i+len("-tmp-"):]
		case strings.HasPrefix(name, ".latest-tmp-"):
			rest = name[len(".latest-tmp-"):]
		case strings.HasPrefix(name, "."+latestFile+".tmp-") || strings.HasPrefix(name, ".write-test-"):
			// An older ferry's temporary latest, or CheckWritable's probe:
			// no pid, so only under the lock.
			if locked {
				os.RemoveAll(path)
			}
			continue
		default:
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if locked || syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(path)
		}
	}
}

// sumLine is trainer.sha256's content for trainer.json's bytes b.
func sumLine(b []byte) string {
	return hexSHA256(b) + "  " + metaFile + "\n"
}

// checkMetaSum checks trainer.json's bytes b against trainer.sha256.
func checkMetaSum(ctx context.Context, path string, b []byte) error {
	s, err := fsx.ReadFile(ctx, filepath.Join(path, metaSumFile), 4096)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checkpoint %s: %s is missing, so %s cannot be checked (a checkpoint of an older ferry? "+
			"resume it with that version, or start afresh with a new --checkpoint-dir)", path, metaSumFile, metaFile)
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	want, _, _ := strings.Cut(strings.TrimSpace(string(s)), " ")
	got := hexSHA256(b)
	if want != got {
		return fmt.Errorf("checkpoint %s: %s and %s do not match: one of them was changed after it was written "+
			"(the SHA-256 of %s is %.12s…, %s records %q); restore it, or resume from another checkpoint",
			path, filepath.Join(path, metaFile), filepath.Join(path, metaSumFile), metaFile, got, metaSumFile, clip(want))
	}
	if string(s) != sumLine(b) { // the sum is right, the line around it is not
		return fmt.Errorf("checkpoint %s: %s is damaged: it holds %q, and sha256sum writes %q; restore it",
			path, filepath.Join(path, metaSumFile), clip(string(s)), sumLine(b))
	}
	return nil
}

// sumFile is the size and SHA-256 of the file at path. A file of another
// size than want (want ≥ 0) is not read: its sum is its size alone, which
// differs from any recorded one.
func sumFile(ctx context.Context, path string, want int64) (FileSum, error) {
	f, err := fsx.Open(ctx, path, -1)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	if want >= 0 && f.Size() != want {
		return FileSum{Size: f.Size()}, nil
	}
	h := digest.NewSHA256()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Size: n, SHA256: digest.Hex(h.Sum(nil))}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// ErrNoCheckpoint is wrapped by ResolveCheckpoint's error for a directory
// that holds no checkpoint at all (rather than a damaged one).
var ErrNoCheckpoint = errors.New("no checkpoint found")

// ResolveCheckpoint is dir itself when it is a checkpoint, else the
// latest checkpoint in it; its files are verified.
func ResolveCheckpoint(dir string) (string, *Meta, error) {
	return ResolveCheckpointContext(context.Background(), dir)
}

// ResolveCheckpointContext is ResolveCheckpoint whose reads stop, with an
// error wrapping context.Cause(ctx), once ctx is done.
func ResolveCheckpointContext(ctx context.Context, dir string) (string, *Meta, error) {
	path := dir
	st, err := fsx.Stat(dir)
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !st.IsDir() {
		kind := "a file"
		if !st.Mode().IsRegular() {
			kind = fsx.Kind(st.Mode())
		}
		return "", nil, fmt.Errorf("%s is %s, not a directory: give a --checkpoint-dir of `ferry train`, or one checkpoint's directory", dir, kind)
	}
	if _, err := os.Lstat(filepath.Join(dir, metaFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	} else if err != nil {
		// A checkpoint directory's parent: take its latest.
		latest, lerr := (&Checkpointer{Dir: dir}).latest(ctx)
		if lerr != nil {
			return "", nil, lerr
		}
		if latest == "" {
			return "", nil, fmt.Errorf("%s holds no checkpoint of `ferry train` (no %s, no %s, no step-* directory): %w", dir, metaFile, latestFile, ErrNoCheckpoint)
		}
		path = latest
	}
	meta, err := verify(ctx, path)
	if err != nil {
		return "", nil, err
	}
	return path, meta, nil
}
