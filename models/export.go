package models

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"ferry/device"
	"ferry/internal/fsx"
	"ferry/nn"
)

// HFExport is what ExportHF wrote.
type HFExport struct {
	Dir        string // the Hugging Face directory
	From, Kind string // the source read (a checkpoint's path) and what it is
	ModelType  string // config.json's model_type: gpt2 or llama
	Class      string // the transformers class that reads it: GPT2LMHeadModel, LlamaForCausalLM
	Parameters int64
	// Tokenizer is the tokenizer written beside the model ("" when the
	// model reads bytes: Hugging Face has no tokenizer for that);
	// TokenizerNote says why none was.
	Tokenizer, TokenizerNote string
	Files                    []ExportedFile
}

// ExportedFile is one file of the directory and its size.
type ExportedFile struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// ExportHF writes the model at from (a ferry checkpoint, a run directory
// of them: its latest, or a Hugging Face directory) as a Hugging Face
// directory at out, as transformers' save_pretrained lays one out:
// config.json, model.safetensors (nn.SaveHF: Hugging Face's names and
// layouts) and the tokenizer's files when the model has a tokenizer
// (tokenizer.json and tokenizer_config.json). The model is built on dev
// (its host memory holds the weights once more while they are written).
//
// out must not exist, or be an empty directory; its parent must exist.
// The files are written into a temporary directory beside out, which is
// renamed to out when all are written: on any error nothing is left
// behind, and an empty out stays as it was.
func ExportHF(dev device.Device, from, out string) (*HFExport, error) {
	if from == "" {
		return nil, fmt.Errorf("no model to export: give a checkpoint directory")
	}
	if out == "" {
		return nil, fmt.Errorf("no output directory: give a new directory to write")
	}
	if _, err := os.Stat(from); err != nil {
		return nil, fmt.Errorf("%s: %w: give a checkpoint directory (ferry train text --checkpoint-dir D writes one)", from, errors.Unwrap(err))
	}
	parent, err := checkExportDir(out)
	if err != nil {
		return nil, err
	}
	src, err := OpenSource(from)
	if err != nil {
		return nil, err
	}
	if src.Family == nil {
		return nil, fmt.Errorf("%s is a bare safetensors file: its sizes are unknown; export the checkpoint that holds it", from)
	}
	s := Sizes{"batch": 1}
	for k, v := range src.Sizes {
		s[k] = v
	}
	lm, err := src.Family.LanguageModel(dev, s, 1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Path, err)
	}
	defer nn.Release(lm)
	if err := src.Load(lm); err != nil {
		return nil, err
	}
	cfg, err := nn.HFConfig(lm)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Path, err)
	}
	tokFiles, bos, eos, hasTok, err := tokenizerFiles(src.Tokenizer, src.TokenizerFile, lm.Context())
	if err != nil {
		return nil, err
	}
	tokName, tokNote := src.Tokenizer, ""
	var extra map[string]any
	switch {
	case hasTok:
		extra = map[string]any{"bos_token_id": bos, "eos_token_id": eos}
	case src.Tokenizer == "" || src.Tokenizer == "byte":
		tokName, tokNote = "", "the model reads bytes (ids 0–255); Hugging Face has no tokenizer for that: feed it list(text.encode())"
	default:
		tokName, tokNote = "", fmt.Sprintf("ferry cannot write the %s tokenizer", src.Tokenizer)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write beside %s: %w", out, err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	if err := nn.SaveHF(tmp, lm, extra); err != nil {
		return nil, err
	}
	for name, b := range tokFiles {
		if err := writeSynced(filepath.Join(tmp, name), b); err != nil {
			return nil, err
		}
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	// rename(2) would replace an empty directory, but Go's os.Rename
	// refuses any existing one: remove the empty out first (os.Remove
	// removes no directory that holds anything), and make it again if
	// the rename fails.
	hadOut := false
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		if err := os.Remove(out); err != nil {
			return nil, fmt.Errorf("%s: %w (is it still empty?)", out, err)
		}
		hadOut = true
	}
	if err := os.Rename(tmp, out); err != nil {
		if hadOut {
			os.Mkdir(out, 0o755)
		}
		return nil, fmt.Errorf("moving the export into place at %s: %w", out, err)
	}
	done = true
	if err := syncDir(parent); err != nil {
		return nil, err
	}
	e := &HFExport{Dir: out, From: src.Path, Kind: src.Kind, ModelType: cfg["model_type"].(string),
		Class: cfg["architectures"].([]string)[0], Tokenizer: tokName, TokenizerNote: tokNote}
	for _, p := range lm.Parameters() {
		e.Parameters += int64(p.Numel())
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	for _, d := range ents {
		if info, err := d.Info(); err == nil {
			e.Files = append(e.Files, ExportedFile{Name: d.Name(), Bytes: info.Size()})
		}
	}
	sort.Slice(e.Files, func(i, j int) bool { return e.Files[i].Name < e.Files[j].Name })
	return e, nil
}

// checkExportDir refuses an out that exists and is not an empty directory,
// or whose parent is missing, and returns the parent.
func checkExportDir(out string) (string, error) {
	if st, err := os.Stat(out); err == nil {
		if !st.IsDir() {
			return "", fmt.Errorf("%s exists and is not a directory: give a new directory to write", out)
		}
		ents, err := os.ReadDir(out)
		if err != nil {
			return "", fmt.Errorf("%s: %w", out, err)
		}
		if len(ents) > 0 {
			return "", fmt.Errorf("%s exists and is not empty: give a new directory (ferry export replaces nothing)", out)
		}
		// An empty but read-only out is the user's "do not write here".
		if err := fsx.ProbeWritable(out); err != nil {
			return "", err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", out, err)
	}
	parent := filepath.Dir(filepath.Clean(out))
	st, err := os.Stat(parent)
	if err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s: its parent directory %s does not exist: create it first", out, parent)
	}
	return parent, nil
}

// writeSynced writes b to a new file at path and syncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// syncDir syncs a directory's entries to disk (where the system can).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
