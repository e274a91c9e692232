package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"ferry"
	"ferry/data/bpe"
	"ferry/internal/fsx"
	"ferry/nn"
	"ferry/optim"
	"ferry/train"
)

// CheckpointModel finds the family and sizes of a text checkpoint's model
// in its identity (checkpoints from before the model registry are GPTs).
func CheckpointModel(id map[string]any) (LanguageFamily, Sizes, error) {
	if id["task"] != "text" {
		return nil, nil, fmt.Errorf("it was written by `ferry train %v`, not `ferry train text`", id["task"])
	}
	name, _ := id["model"].(string)
	if name == "" {
		name = "gpt"
	}
	f, err := Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	lf, ok := f.(LanguageFamily)
	if !ok {
		return nil, nil, fmt.Errorf("its model %s is not a language model", name)
	}
	s := Sizes{}
	for _, z := range f.Sizes() {
		v, ok := id[z.Name].(json.Number)
		if !ok {
			if z.Name == "dropout" { // not recorded by early checkpoints: it does not change the weights' use
				s[z.Name] = 0
				continue
			}
			return nil, nil, fmt.Errorf("its identity lacks %s", z.Name)
		}
		if s[z.Name], err = v.Float64(); err != nil {
			return nil, nil, fmt.Errorf("its %s is %v", z.Name, v)
		}
	}
	return lf, s, Validate(f, s)
}

// TokenizerOf is a text checkpoint's tokenizer (byte when it records
// none).
func TokenizerOf(id map[string]any) string {
	if s, ok := id["tokenizer"].(string); ok && s != "" {
		return s
	}
	return "byte"
}

// Source is a model to start a run from (ferry train text --init-from):
// its family and sizes, its tokenizer when it records one, and the files
// of its weights.
type Source struct {
	Path, Kind string
	Family     LanguageFamily // nil for a bare safetensors file: the caller's sizes say
	Sizes      Sizes
	Tokenizer  string // "" when the source does not say
	// TokenizerFile is the tokenizer.json of a tokenizer named
	// HFTokenizerPrefix+hash ("" for others).
	TokenizerFile string
	Files         []string
	// OptimizerFile is a ferry checkpoint's optimizer.safetensors ("" for
	// other sources), OptimizerName the optimizer that wrote it.
	OptimizerFile, OptimizerName string
	OptimizerScalars             map[string]float64

	index *nn.HFIndex // a sharded Hugging Face model's, checked on load
}

// OpenSource reads what path holds: a checkpoint (or a directory of
// them: its latest), a Hugging Face model directory, or a safetensors
// file.
func OpenSource(path string) (*Source, error) {
	return OpenSourceContext(context.Background(), path)
}

// OpenSourceContext is OpenSource whose reads stop, with an error
// wrapping context.Cause(ctx), once ctx is done. Every file is read
// through fsx.Open: a FIFO, a device or a link that loops is refused.
func OpenSourceContext(ctx context.Context, path string) (*Source, error) {
	st, err := fsx.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	if !st.IsDir() {
		if !strings.HasSuffix(path, ".safetensors") {
			return nil, fmt.Errorf("%s: a file must be a .safetensors file (or give a checkpoint or Hugging Face model directory)", path)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is %s, not a regular file; give a .safetensors file", path, fsx.Kind(st.Mode()))
		}
		return &Source{Path: path, Kind: "safetensors file", Files: []string{path}}, nil
	}
	cfgPath := filepath.Join(path, "config.json")
	if _, err := os.Lstat(cfgPath); err == nil {
		cfg, err := fsx.ReadFile(ctx, cfgPath, 16<<20)
		if err != nil {
			return nil, fmt.Errorf("%s (a Hugging Face model's config): %w", path, err)
		}
		return openHFSource(path, cfg)
	}
	ck, meta, err := train.ResolveCheckpointContext(ctx, path)
	if errors.Is(err, train.ErrNoCheckpoint) {
		return nil, fmt.Errorf("%s is no checkpoint, Hugging Face model (config.json) or safetensors file: %w", path, err)
	}
	if err != nil {
		return nil, err
	}
	fam, sz, err := CheckpointModel(meta.Identity)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck, err)
	}
	delete(sz, "batch")
	if err := LoadTokenizerOf(meta.Identity); err != nil {
		return nil, fmt.Errorf("%s: %w", ck, err)
	}
	tokFile, _ := meta.Identity["tokenizer_file"].(string)
	optName, _ := meta.Identity["optimizer"].(string)
	return &Source{Path: ck, Kind: fmt.Sprintf("checkpoint at step %d", meta.Step), Family: fam, Sizes: sz,
		Tokenizer: TokenizerOf(meta.Identity), TokenizerFile: tokFile, Files: []string{filepath.Join(ck, "model.safetensors")},
		OptimizerFile: filepath.Join(ck, "optimizer.safetensors"), OptimizerName: optName, OptimizerScalars: meta.OptimizerScalars}, nil
}

// openHFSource reads a Hugging Face model directory: config.json (gpt2
// or llama), its safetensors files, and its tokenizer.json if it has one
// (else a GPT-2-sized vocabulary is taken to be GPT-2's BPE).
func openHFSource(dir string, cfg []byte) (*Source, error) {
	cfgPath := filepath.Join(dir, "config.json") // named in the errors it causes
	typ, err := nn.HFModelType(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	files, index, err := nn.HFWeightMap(dir)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	src := &Source{Path: dir, Kind: "Hugging Face " + typ, Files: files, index: index}
	var name string
	switch typ {
	case "gpt2":
		c, err := nn.GPTConfigFromHF(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
		name = "gpt"
		src.Sizes = Sizes{"vocab": float64(c.Vocab), "seq": float64(c.Seq), "layers": float64(c.Layers), "heads": float64(c.Heads), "embd": float64(c.Embd), "dropout": 0}
		if c.Vocab == bpe.VocabSize {
			src.Tokenizer = "bpe" // GPT-2's
		}
	case "llama":
		c, err := nn.LlamaConfigFromHF(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
		name = "llama"
		src.Sizes = Sizes{"vocab": float64(c.Vocab), "seq": float64(c.Seq), "layers": float64(c.Layers), "heads": float64(c.Heads),
			"kv-heads": float64(c.KVHeads), "embd": float64(c.Embd), "hidden": float64(c.Hidden)}
		def := nn.LlamaConfig{Vocab: c.Vocab, Seq: c.Seq, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads, Embd: c.Embd, Hidden: c.Hidden}.WithDefaults()
		if def.RopeTheta != c.RopeTheta || def.NormEps != c.NormEps {
			return nil, fmt.Errorf("%s: rope_theta %v and rms_norm_eps %v; ferry's llama family builds %v and %v", cfgPath, c.RopeTheta, c.NormEps, def.RopeTheta, def.NormEps)
		}
	default:
		return nil, fmt.Errorf("%s: model_type %q; ferry reads gpt2 and llama", cfgPath, typ)
	}
	if p := hfTokenizerBeside(dir); p != "" { // the model's own tokenizer, over the guess of GPT-2's
		tname, t, err := OpenHFTokenizer(p)
		if err != nil {
			return nil, err
		}
		if t.Vocab() > src.Sizes.Int("vocab") {
			return nil, fmt.Errorf("%s has %d token ids, more than the model's vocab_size %d", p, t.Vocab(), src.Sizes.Int("vocab"))
		}
		src.Tokenizer, src.TokenizerFile = tname, p
	}
	f, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	src.Family = f.(LanguageFamily)
	return src, nil
}

// Merge takes the source's model sizes over s (the flags' and defaults'):
// the batch stays the run's, and so does the dropout when its flag is set;
// a size flag that contradicts the source is an error naming both.
//
// The context (seq) may differ, as nanoGPT's crop_block_size lets it: a
// GPT at a shorter one keeps the first rows of its position table (Load
// crops it), and a longer one is refused, since positions past the
// table were never learned; a Llama, whose rotary embeddings are
// computed for any position, runs at any length (ContextNote says what
// that means).
func (src *Source) Merge(f Family, s Sizes, set map[string]bool) (Sizes, error) {
	out := Sizes{}
	for k, v := range s {
		out[k] = v
	}
	var clash []string
	for _, z := range f.Sizes() {
		v, ok := src.Sizes[z.Name]
		if !ok || z.Name == "batch" || (z.Name == "dropout" && set["dropout"]) {
			continue
		}
		if z.Name == "seq" && set["seq"] {
			if f.Name() == "gpt" && s["seq"] > v {
				return nil, fmt.Errorf("--seq %g is longer than %s's context of %g: a GPT's position table (wpe) has one learned row per position, "+
					"and rows past %g do not exist; give --seq %g or less (a shorter context crops the table, as nanoGPT's crop_block_size)", s["seq"], src.Path, v, v, v)
			}
			continue // the run's context: Load crops a GPT's position table
		}
		if set[z.Name] && s[z.Name] != v {
			clash = append(clash, fmt.Sprintf("--%s %g (the source has %g)", z.Name, s[z.Name], v))
		}
		out[z.Name] = v
	}
	where := src.Path
	if strings.HasPrefix(src.Kind, "Hugging Face") {
		where = filepath.Join(src.Path, "config.json") // the sizes came from it
	}
	if len(clash) > 0 {
		return nil, fmt.Errorf("%s fixes the model's sizes, and %s contradicts them: drop those flags", where, strings.Join(clash, ", "))
	}
	if err := Validate(f, out); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return out, nil
}

// ContextNote says how a run's context s["seq"] differs from the
// source's ("" when it does not, or the source does not say).
func (src *Source) ContextNote(s Sizes) string {
	v, ok := src.Sizes["seq"]
	if !ok || src.Family == nil || s["seq"] == v {
		return ""
	}
	switch {
	case src.Family.Name() == "gpt":
		return fmt.Sprintf("context %g of the source's %g: its position table is cropped to the first %g rows (nanoGPT's crop_block_size)", s["seq"], v, s["seq"])
	case s["seq"] < v:
		return fmt.Sprintf("context %g of the source's %g: rotary position embeddings need no table, so the model simply runs shorter", s["seq"], v)
	default:
		return fmt.Sprintf("context %g, longer than the source's %g: rotary embeddings compute every position, but the model has learned none past %g; "+
			"this run teaches it them (its exported config says %g)", s["seq"], v, v, s["seq"])
	}
}

// Load reads the source's weights into m (all or nothing; Hugging Face's
// half-precision tensors converted; NaN or infinite weights refused). A
// GPT built at a shorter context than the source's takes the first rows
// of its position table.
func (src *Source) Load(m nn.Module) error {
	return src.LoadContext(context.Background(), m)
}

// LoadContext is Load whose reads stop once ctx is done (m is then left
// as it was).
func (src *Source) LoadContext(ctx context.Context, m nn.Module) error {
	opts := nn.LoadOptions{ConvertFloats: true, RequireFinite: true, Index: src.index, CropRows: []string{"transformer.wpe.weight"}}
	if err := nn.LoadSafetensorsContext(ctx, src.Files, m, opts); err != nil {
		var le *nn.LoadError
		if strings.HasPrefix(src.Kind, "Hugging Face") && errors.As(err, &le) {
			return fmt.Errorf("%s: the weights do not fit the model its config.json describes: %w", src.Path, err)
		}
		return fmt.Errorf("%s: %w", src.Path, err)
	}
	return nil
}

// LoadOptimizer sets opt's state from the source checkpoint's.
// The shapes must match the model's (SetState checks every entry).
func (src *Source) LoadOptimizer(opt optim.Stateful) error {
	return src.LoadOptimizerContext(context.Background(), opt)
}

// LoadOptimizerContext is LoadOptimizer whose read stops once ctx is done.
func (src *Source) LoadOptimizerContext(ctx context.Context, opt optim.Stateful) error {
	var params []*ferry.Tensor
	if o, ok := opt.(interface{ Params() []*ferry.Tensor }); ok {
		params = o.Params()
	}
	if len(params) == 0 {
		return fmt.Errorf("%T has no parameters to take state for", opt)
	}
	tensors, _, err := nn.LoadTensorsContext(ctx, src.OptimizerFile, params[0].Device())
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	defer func() {
		for _, t := range tensors {
			t.Release()
		}
	}()
	scalars := map[string]float64{}
	for k, v := range src.OptimizerScalars {
		scalars[k] = v
	}
	if err := opt.SetState(optim.State{Tensors: tensors, Scalars: scalars}); err != nil {
		return fmt.Errorf("the state in %s does not fit this model: %w", src.OptimizerFile, err)
	}
	return nil
}
