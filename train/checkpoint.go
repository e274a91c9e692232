package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
	"syscall"

	"ferry"
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
//
// and D/latest names the newest one. A directory, rather than one file,
// so that the weights are a plain safetensors file that PyTorch loads.
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
	optimizerFile = "optimizer.safetensors"
	metaFile      = "trainer.json"
	latestFile    = "latest"
	maxMetaBytes  = 64 << 20
)

// Checkpointer writes and reads checkpoints in Dir, keeping the newest
// Keep of them (Keep < 1 keeps all).
type Checkpointer struct {
	Dir  string
	Keep int
}

// PathFor is where the checkpoint of step lives.
func (c *Checkpointer) PathFor(step int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("step-%08d", step))
}

// Save writes a checkpoint of model and opt at meta.Step and returns its
// path. The previous checkpoint stays valid until this one is complete.
func (c *Checkpointer) Save(model nn.Module, opt optim.Stateful, meta Meta) (path string, err error) {
	if meta.Step < 0 {
		return "", fmt.Errorf("checkpoint: negative step %d", meta.Step)
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	c.sweep()
	final := c.PathFor(meta.Step)
	tmp, err := os.MkdirTemp(c.Dir, fmt.Sprintf(".step-%08d-tmp-%d-", meta.Step, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w (the disk holding %s is full: free space, lower --keep, or give another --checkpoint-dir; "+
					"the previous checkpoint is intact)", err, c.Dir)
			}
		}
	}()
	if err := nn.SaveSafetensors(filepath.Join(tmp, modelFile), model); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	st := opt.State()
	if err := nn.SaveTensors(filepath.Join(tmp, optimizerFile), st.Tensors, nil); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	meta.Format, meta.Version = metaFormat, metaVersion
	meta.OptimizerScalars = st.Scalars
	meta.Files = map[string]FileSum{}
	for _, f := range []string{modelFile, optimizerFile} {
		s, err := sumFile(filepath.Join(tmp, f))
		if err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		meta.Files[f] = s
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := fsx.WriteAtomic(filepath.Join(tmp, metaFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
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
		aside = tmp + "-old"
		if err := os.Rename(final, aside); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if aside != "" {
			os.Rename(aside, final)
		}
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(c.Dir); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := fsx.WriteAtomic(filepath.Join(c.Dir, latestFile), func(w io.Writer) error {
		_, err := fmt.Fprintln(w, filepath.Base(final))
		return err
	}); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if aside != "" {
		os.RemoveAll(aside)
	}
	c.prune(meta.Step)
	return final, nil
}

// Latest returns the path of the newest complete checkpoint, or "" if Dir
// holds none.
func (c *Checkpointer) Latest() (string, error) {
	b, err := fsx.ReadLimited(filepath.Join(c.Dir, latestFile), 4096)
	if err == nil {
		name := strings.TrimSpace(string(b))
		if _, ok := stepOf(name); !ok {
			return "", fmt.Errorf("checkpoint: %s names %q, which is not a checkpoint", filepath.Join(c.Dir, latestFile), name)
		}
		return filepath.Join(c.Dir, name), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	// No latest (a crash before the first one was named): the newest
	// complete directory, if any.
	steps, err := c.steps()
	if err != nil || len(steps) == 0 {
		return "", err
	}
	return c.PathFor(steps[len(steps)-1]), nil
}

// Resume loads the latest checkpoint in Dir into model and opt, after
// checking that it was written by a run with the same identity. It returns
// nil meta and no error when Dir holds no checkpoint yet. Everything is
// read and checked before the model or optimizer changes.
func (c *Checkpointer) Resume(model nn.Module, opt optim.Stateful, identity map[string]any) (*Meta, string, error) {
	c.sweep()
	path, err := c.Latest()
	if err != nil || path == "" {
		return nil, "", err
	}
	meta, err := c.Load(path, model, opt, identity)
	return meta, path, err
}

// Load reads the checkpoint at path into model and opt (see Resume).
func (c *Checkpointer) Load(path string, model nn.Module, opt optim.Stateful, identity map[string]any) (*Meta, error) {
	meta, err := ReadMeta(path)
	if err != nil {
		return nil, err
	}
	if diff := identityDiff(meta.Identity, identity); diff != "" {
		return nil, fmt.Errorf("checkpoint %s was written by a different run: %s; "+
			"resume with the checkpoint's settings, or give a new --checkpoint-dir", path, diff)
	}
	for _, f := range []string{modelFile, optimizerFile} {
		want, ok := meta.Files[f]
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: %s does not list %s", path, metaFile, f)
		}
		got, err := sumFile(filepath.Join(path, f))
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if got != want {
			return nil, fmt.Errorf("checkpoint %s: %s is damaged (%d bytes, SHA-256 %.12s…; %s recorded %d bytes, %.12s…)",
				path, f, got.Size, got.SHA256, metaFile, want.Size, want.SHA256)
		}
	}
	params := model.Parameters()
	if len(params) == 0 {
		return nil, fmt.Errorf("checkpoint: the model has no parameters")
	}
	tensors, _, err := nn.LoadTensors(filepath.Join(path, optimizerFile), params[0].Device())
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
	if err := checkOptimizerState(params, st); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := nn.LoadSafetensors(filepath.Join(path, modelFile), model); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := opt.SetState(st); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return meta, nil
}

// ReadMeta reads and checks a checkpoint's trainer.json.
func ReadMeta(path string) (*Meta, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s is not a directory (a checkpoint is a directory holding %s, %s and %s)",
			path, modelFile, optimizerFile, metaFile)
	}
	b, err := fsx.ReadLimited(filepath.Join(path, metaFile), maxMetaBytes)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var meta Meta
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&meta); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s is not valid: %v", path, metaFile, err)
	}
	if meta.Format != metaFormat || meta.Version != metaVersion {
		return nil, fmt.Errorf("checkpoint %s: %s is format %q version %d; this ferry reads %q version %d",
			path, metaFile, meta.Format, meta.Version, metaFormat, metaVersion)
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

// checkOptimizerState checks st's names and shapes against params without
// changing anything.
func checkOptimizerState(params []*ferry.Tensor, st optim.State) error {
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

// identityDiff describes how got (the checkpoint's) differs from want (this
// run's), or returns "".
func identityDiff(got, want map[string]any) string {
	norm := func(m map[string]any) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			b, _ := json.Marshal(v)
			out[k] = string(b)
		}
		return out
	}
	g, w := norm(got), norm(want)
	keys := map[string]bool{}
	for k := range g {
		keys[k] = true
	}
	for k := range w {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var diffs []string
	for _, k := range names {
		gv, gok := g[k]
		wv, wok := w[k]
		switch {
		case !gok:
			diffs = append(diffs, fmt.Sprintf("%s is unset there, %s here", k, wv))
		case !wok:
			diffs = append(diffs, fmt.Sprintf("%s is %s there, unset here", k, gv))
		case gv != wv:
			diffs = append(diffs, fmt.Sprintf("%s is %s there, %s here", k, gv, wv))
		}
	}
	return strings.Join(diffs, ", ")
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
// written.
func (c *Checkpointer) prune(current int) {
	if c.Keep < 1 {
		return
	}
	steps, err := c.steps()
	if err != nil {
		return
	}
	for i := 0; i < len(steps)-c.Keep; i++ {
		if steps[i] != current {
			os.RemoveAll(c.PathFor(steps[i]))
		}
	}
}

// sweep removes temporary directories left by processes that died while
// writing a checkpoint.
func (c *Checkpointer) sweep() {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, ".step-") {
			continue
		}
		i := strings.Index(name, "-tmp-")
		if i < 0 {
			continue
		}
		pidStr, _, _ := strings.Cut(name[i+len("-tmp-"):], "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(c.Dir, name))
		}
	}
}

func sumFile(path string) (FileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return FileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
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
