package models

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"ferry/data/bpe"
	"ferry/data/hftok"
	"ferry/internal/fsx"
)

// A model's own tokenizer: a Hugging Face tokenizer.json beside its
// weights (data/hftok). A run records it as GPT-2's BPE is recorded, by
// name in its identity ("tokenizer"): "hf:" and the first 16 hex digits
// of the file's SHA-256, so that a resumed run, ferry eval and ferry
// sample use the very file the run trained with, or refuse; and where
// the file was read, "tokenizer_file", from which they read it again.

// HFTokenizerPrefix starts the name of a tokenizer read from a
// tokenizer.json.
const HFTokenizerPrefix = "hf:"

var hfTokenizers sync.Map // name → *hftok.Tokenizer

// OpenHFTokenizer reads the tokenizer.json at path and returns its name
// (HFTokenizerPrefix and its hash), under which HFTokenizer finds it.
func OpenHFTokenizer(path string) (string, *hftok.Tokenizer, error) {
	t, err := hftok.Load(path)
	if err != nil {
		return "", nil, err
	}
	name := HFTokenizerPrefix + t.SHA256()[:16]
	v, _ := hfTokenizers.LoadOrStore(name, t)
	return name, v.(*hftok.Tokenizer), nil
}

// HFTokenizer is the tokenizer.json tokenizer of that name, when this
// process has read it (OpenHFTokenizer, LoadTokenizerOf).
func HFTokenizer(name string) (*hftok.Tokenizer, bool) {
	v, ok := hfTokenizers.Load(name)
	if !ok {
		return nil, false
	}
	return v.(*hftok.Tokenizer), true
}

// LoadTokenizerOf reads the tokenizer a text checkpoint's identity
// records, when it is a tokenizer.json (byte and bpe need nothing), from
// the recorded tokenizer_file, and checks it is the same file (every
// call reads it again: a file changed since is refused).
func LoadTokenizerOf(id map[string]any) error {
	name := TokenizerOf(id)
	if !strings.HasPrefix(name, HFTokenizerPrefix) {
		return nil
	}
	path, _ := id["tokenizer_file"].(string)
	if path == "" {
		return fmt.Errorf("the run's tokenizer %s does not record its file", name)
	}
	got, _, err := OpenHFTokenizer(path)
	if err != nil {
		return fmt.Errorf("the run's tokenizer %s: %w (put the tokenizer.json it trained with back there)", name, err)
	}
	if got != name {
		return fmt.Errorf("%s is %s now, not the %s the run trained with: put that tokenizer.json back", path, got, name)
	}
	return nil
}

// tokenizerFiles are the files a Hugging Face directory holds for the
// tokenizer name (a run's, or a source's), read from file for a
// tokenizer.json one; ok is false when the model reads bytes.
func tokenizerFiles(name, file string, seq int) (files map[string][]byte, bos, eos any, ok bool, err error) {
	var tokJSON []byte
	config := map[string]any{"model_max_length": seq, "clean_up_tokenization_spaces": false}
	switch {
	case name == "bpe":
		if tokJSON, err = hftok.ByteLevelJSON(bpe.Pieces(), map[int32]string{bpe.EndOfText: "<|endoftext|>"}); err != nil {
			return nil, nil, nil, false, err
		}
		config["tokenizer_class"] = "GPT2Tokenizer"
		config["bos_token"], config["eos_token"], config["unk_token"] = "<|endoftext|>", "<|endoftext|>", "<|endoftext|>"
		bos, eos = int(bpe.EndOfText), int(bpe.EndOfText)
	case strings.HasPrefix(name, HFTokenizerPrefix):
		if tokJSON, err = fsx.ReadLimited(file, hftok.MaxFileBytes); err != nil {
			return nil, nil, nil, false, fmt.Errorf("the tokenizer: %w", err)
		}
		t, err := hftok.Parse(tokJSON)
		if err != nil || HFTokenizerPrefix+t.SHA256()[:16] != name {
			return nil, nil, nil, false, fmt.Errorf("%s is no longer the tokenizer %s the model trained with: put it back", file, name)
		}
		config["tokenizer_class"] = "PreTrainedTokenizerFast"
	default:
		return nil, nil, nil, false, nil
	}
	cfg, err := jsonIndent(config)
	if err != nil {
		return nil, nil, nil, false, err
	}
	return map[string][]byte{"tokenizer.json": tokJSON, "tokenizer_config.json": cfg}, bos, eos, true, nil
}

// hfTokenizerBeside is the tokenizer.json in a Hugging Face directory, ""
// when there is none.
func hfTokenizerBeside(dir string) string {
	p := filepath.Join(dir, "tokenizer.json")
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}

func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
