package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/train"
)

// runJSON runs ferry args --json, which must succeed, and decodes the object.
func runJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out, errOut, code := runCLI(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("ferry %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("ferry %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return m
}

func num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("no number %q in %v", key, m)
	}
	return v
}

// otherCorpus is text of other words than corpus's.
func otherCorpus(t *testing.T) string {
	t.Helper()
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu")
	rng := rand.New(rand.NewPCG(5, 5))
	var b strings.Builder
	for b.Len() < 40_000 {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteString(" ")
	}
	path := filepath.Join(t.TempDir(), "other.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A run given no --checkpoint-dir saves its final model in a new run
// directory under runs/, says where, and ferry eval on it (without
// --data: the run's own data and validation batches) reports the run's
// last validation loss.
func TestTrainSavesFinalModelAndEvalReproducesIt(t *testing.T) {
	data := corpus(t)
	sum := runJSON(t, smallText(data, "--steps", "30", "--eval-every", "10")...)
	dir, _ := sum["checkpoint_dir"].(string)
	if dir == "" || !strings.HasPrefix(dir, runsDir) || sum["run_dir_created"] != true {
		t.Fatalf("checkpoint_dir %q (want one under %s), run_dir_created %v", dir, runsDir, sum["run_dir_created"])
	}
	if sum["tokenizer"] != "byte" {
		t.Errorf("tokenizer %v", sum["tokenizer"])
	}
	ev := runJSON(t, "eval", "--checkpoint-dir", dir)
	want, got := num(t, sum, "final_val_loss"), num(t, ev, "val_loss")
	if math.Abs(got-want) > 0.01 {
		t.Errorf("eval val_loss %v, the run's last validation %v", got, want)
	}
	if p := num(t, ev, "perplexity"); math.Abs(p-math.Exp(got)) > 1e-9*p {
		t.Errorf("perplexity %v for loss %v", p, got)
	}
	if num(t, ev, "step") != 30 || ev["task"] != "text" {
		t.Errorf("eval: %v", ev)
	}
	txt, errOut, code := runCLI(t, "eval", "--checkpoint-dir", dir)
	if code != 0 || !strings.Contains(txt, "validation loss") || !strings.Contains(txt, "perplexity") {
		t.Errorf("eval for people: exit %d\n%s%s", code, txt, errOut)
	}
}

// A run that fails (its loss turns NaN) or is refused leaves no run
// directory behind.
func TestTrainFailedRunLeavesNoRunDirectory(t *testing.T) {
	data := corpus(t)
	count := func() int { ents, _ := os.ReadDir(runsDir); return len(ents) }
	before := count()
	for _, args := range [][]string{
		smallText(data, "--steps", "30", "--lr", "1e30", "--warmup", "0"),
		smallText(data, "--steps", "3", "--plot", "/dev/null/x"),
	} {
		if _, _, code := runCLI(t, args...); code != 1 {
			t.Errorf("ferry %s: exit %d, want 1", strings.Join(args, " "), code)
		}
		if n := count(); n != before {
			t.Fatalf("ferry %s left a directory in %s (%d entries, %d before)", strings.Join(args, " "), runsDir, n, before)
		}
	}
}

// Fine-tuning: --init-from a checkpoint on other text starts at the
// checkpoint's loss on that text (step 0 equals ferry eval --data) and
// improves; sizes that contradict the checkpoint, a tokenizer other than
// its own, and --init-optimizer alone are refused.
func TestTrainInitFromCheckpointFineTunes(t *testing.T) {
	data, other := corpus(t), otherCorpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	runJSON(t, smallText(data, "--steps", "30", "--checkpoint-dir", ck)...)
	ev := runJSON(t, "eval", "--checkpoint-dir", ck, "--data", other)
	ft := runJSON(t, smallText(other, "--init-from", ck, "--steps", "30", "--eval-every", "10", "--checkpoint-dir", filepath.Join(t.TempDir(), "ft"))...)
	start, end := num(t, ft, "initial_val_loss"), num(t, ft, "final_val_loss")
	if math.Abs(start-num(t, ev, "val_loss")) > 1e-6 {
		t.Errorf("fine-tuning starts at %v; eval --data says %v", start, num(t, ev, "val_loss"))
	}
	if !(end < start-0.1) {
		t.Errorf("fine-tuning went from %v to %v", start, end)
	}
	fresh := runJSON(t, smallText(other, "--steps", "1", "--checkpoint-dir", filepath.Join(t.TempDir(), "fresh"))...)
	if math.Abs(num(t, fresh, "initial_val_loss")-start) < 1e-3 {
		t.Errorf("the initialised run starts where a fresh one does (%v)", start)
	}
	if s, _ := ft["init_from"].(string); !strings.HasPrefix(s, ck) {
		t.Errorf("init_from %q", s)
	}
	// The checkpoint's safetensors file alone, the sizes from the flags:
	// the same start.
	latest, _, err := train.ResolveCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	file := runJSON(t, smallText(other, "--init-from", filepath.Join(latest, "model.safetensors"), "--steps", "1")...)
	if num(t, file, "initial_val_loss") != start {
		t.Errorf("from the safetensors file: %v; from the checkpoint: %v", file["initial_val_loss"], start)
	}
	// --init-optimizer takes the AdamW state: the run goes on.
	runJSON(t, smallText(other, "--init-from", ck, "--init-optimizer", "--steps", "2")...)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--init-from", ck, "--layers", "3"}, "--layers 3 (the source has 2)"},
		{[]string{"--init-from", ck, "--tokenizer", "bpe"}, "--tokenizer bpe contradicts"},
		{[]string{"--init-from", ck, "--init-optimizer", "--optimizer", "sgd"}, "trained with --optimizer adamw"},
		{[]string{"--init-optimizer"}, "--init-optimizer applies to --init-from"},
		{[]string{"--init-from", filepath.Join(t.TempDir(), "none")}, "--init-from"},
		{[]string{"--init-from", data}, ".safetensors"},
		{[]string{"--tokenizer", "words"}, "want byte or bpe"},
		{[]string{"--token-cache", t.TempDir()}, "--token-cache applies to --tokenizer bpe"},
	} {
		_, errOut, code := runCLI(t, smallText(other, append(c.args, "--steps", "2")...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q (want %q)", c.args, code, errOut, c.want)
		}
	}
}

// --init-from a Hugging Face GPT-2 directory takes the sizes from its
// config.json and the weights from model.safetensors: step 0's loss is
// the saved model's, whatever the size flags' defaults.
func TestTrainInitFromHuggingFaceDirectory(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cfg := nn.GPTConfig{Vocab: 256, Seq: 16, Layers: 1, Heads: 2, Embd: 24, Bias: true}
	g, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(9, 9)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	hf := t.TempDir()
	if err := nn.SaveSafetensors(filepath.Join(hf, "model.safetensors"), g); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(hf, "config.json"), []byte(`{"model_type": "gpt2", "vocab_size": 256, "n_positions": 16, "n_layer": 1, "n_head": 2, "n_embd": 24}`), 0o644)
	data := corpus(t)
	args := []string{"train", "text", "--data", data, "--batch", "4", "--val-batches", "2", "--sample", "0", "--steps", "2", "--checkpoint-dir"}
	a := runJSON(t, append(args, filepath.Join(t.TempDir(), "a"), "--init-from", hf)...)
	if num(t, a, "parameter_count") != float64(cfg.ParameterCount()) {
		t.Errorf("parameters %v, want the config's %d", a["parameter_count"], cfg.ParameterCount())
	}
	// The file's weights, not the seed's: a fresh model of the same sizes
	// and seed starts elsewhere.
	fresh := runJSON(t, append(args, filepath.Join(t.TempDir(), "f"), "--layers", "1", "--heads", "2", "--embd", "24", "--seq", "16")...)
	if num(t, fresh, "initial_val_loss") == num(t, a, "initial_val_loss") {
		t.Error("the initialised run starts where a fresh one does")
	}
	if _, errOut, code := runCLI(t, append(args, filepath.Join(t.TempDir(), "d"), "--init-from", hf, "--embd", "32")...); code != 1 || !strings.Contains(errOut, "--embd 32 (the source has 24)") {
		t.Errorf("--embd 32 against the config's 24: exit %d, %s", code, errOut)
	}
}

// --tokenizer bpe trains on GPT-2's token ids (vocabulary 50257), caches
// them so that a second run does not tokenize again, and sample and eval
// take the tokenizer from the checkpoint.
func TestTrainTextBPE(t *testing.T) {
	data := corpus(t)
	cache, ck := filepath.Join(t.TempDir(), "tokens"), filepath.Join(t.TempDir(), "ck")
	args := []string{"train", "text", "--data", data, "--tokenizer", "bpe", "--token-cache", cache, "--layers", "1", "--heads", "2",
		"--embd", "16", "--seq", "16", "--batch", "2", "--val-batches", "2", "--sample", "5", "--steps", "2"}
	first := runJSON(t, append(args, "--checkpoint-dir", ck)...)
	if first["tokenizer"] != "bpe" || first["token_cache_hit"] != false {
		t.Errorf("first run: tokenizer %v, cache hit %v", first["tokenizer"], first["token_cache_hit"])
	}
	// GPT-2's vocabulary: the embedding alone is 50257 × 16.
	if num(t, first, "parameter_count") < 50257*16 {
		t.Errorf("parameter_count %v", first["parameter_count"])
	}
	second := runJSON(t, args...)
	if second["token_cache_hit"] != true {
		t.Errorf("second run: cache hit %v", second["token_cache_hit"])
	}
	ev := runJSON(t, "eval", "--checkpoint-dir", ck, "--token-cache", cache)
	if ev["tokenizer"] != "bpe" || math.Abs(num(t, ev, "val_loss")-num(t, first, "final_val_loss")) > 0.01 {
		t.Errorf("eval %v; the run's last validation %v", ev, first["final_val_loss"])
	}
	s := runJSON(t, "sample", "--checkpoint-dir", ck, "--n", "4", "--temperature", "0")
	if s["tokenizer"] != "bpe" || !strings.HasPrefix(s["text"].(string), "func ") {
		t.Errorf("sample %v", s)
	}
}

// --temperature 0 is greedy: the same text every time, drawing nothing,
// so a --seed or --top-k with it (which would be ignored) is refused; a
// negative temperature is refused.
func TestSampleGreedy(t *testing.T) {
	ck := textCheckpoint(t)
	a := runJSON(t, "sample", "--checkpoint-dir", ck, "--n", "20", "--temperature", "0")
	b := runJSON(t, "sample", "--checkpoint-dir", ck, "--n", "20", "--temperature", "0")
	if a["text_base64"] != b["text_base64"] {
		t.Errorf("greedy samples differ: %q, %q", a["text"], b["text"])
	}
	for _, args := range [][]string{{"--temperature", "0", "--seed", "2"}, {"--temperature", "0", "--top-k", "5"}} {
		if _, errOut, code := runCLI(t, append([]string{"sample", "--checkpoint-dir", ck}, args...)...); code != 1 || !strings.Contains(errOut, "greedy") {
			t.Errorf("%s: exit %d, %s", strings.Join(args, " "), code, errOut)
		}
	}
	if _, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ck, "--temperature", "-1"); code != 1 || !strings.Contains(errOut, "--temperature") {
		t.Errorf("--temperature -1: exit %d, %s", code, errOut)
	}
}

// ferry eval refuses what it cannot evaluate, with the reason.
func TestEvalBadInput(t *testing.T) {
	ck := textCheckpoint(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give --checkpoint-dir"},
		{[]string{"--checkpoint-dir", t.TempDir()}, "holds no checkpoint"},
		{[]string{"--checkpoint-dir", ck, "--batches", "0"}, "--batches"},
		{[]string{"--checkpoint-dir", ck, "--data", filepath.Join(t.TempDir(), "none")}, "no such file"},
	} {
		out, errOut, code := runCLI(t, append([]string{"eval", "--json"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || !strings.Contains(out, `"error"`) {
			t.Errorf("eval %v: exit %d, %q %q (want %q)", c.args, code, out, errOut, c.want)
		}
	}
}

// ferry eval on an MNIST run reports its test accuracy and loss.
func TestEvalMNIST(t *testing.T) {
	if _, err := mnistDir(); err != nil {
		t.Skip(err)
	}
	ck := filepath.Join(t.TempDir(), "ck")
	sum := runJSON(t, "train", "mnist", "--depth", "1", "--width", "16", "--steps", "20", "--eval-every", "20", "--checkpoint-dir", ck)
	ev := runJSON(t, "eval", "--checkpoint-dir", ck)
	if math.Abs(num(t, ev, "accuracy")-num(t, sum, "test_accuracy")) > 1e-9 || math.Abs(num(t, ev, "test_loss")-num(t, sum, "test_loss")) > 1e-5 {
		t.Errorf("eval %v; the run's %v, %v", ev, sum["test_accuracy"], sum["test_loss"])
	}
}

// --init-from a Hugging Face Llama directory builds --model llama at its
// config's sizes, GQA and SwiGLU width included, with its weights.
func TestTrainInitFromHuggingFaceLlama(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cfg := nn.LlamaConfig{Vocab: 256, Seq: 16, Layers: 1, Heads: 4, KVHeads: 2, Embd: 32, Hidden: 48}.WithDefaults()
	g, err := nn.NewLlama(dev, cfg, rand.New(rand.NewPCG(9, 9)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	hf := t.TempDir()
	if err := nn.SaveSafetensors(filepath.Join(hf, "model.safetensors"), g); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(hf, "config.json"), []byte(`{"model_type": "llama", "vocab_size": 256, "max_position_embeddings": 16,
		"num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32, "intermediate_size": 48,
		"tie_word_embeddings": false}`), 0o644)
	args := []string{"train", "text", "--data", corpus(t), "--batch", "4", "--val-batches", "2", "--sample", "0", "--steps", "2"}
	a := runJSON(t, append(args, "--init-from", hf)...)
	if num(t, a, "parameter_count") != float64(cfg.ParameterCount()) || !strings.Contains(a["model"].(string), "llama") {
		t.Errorf("model %v, %v parameters (want %d)", a["model"], a["parameter_count"], cfg.ParameterCount())
	}
	if _, errOut, code := runCLI(t, append(args, "--init-from", hf, "--model", "gpt")...); code != 1 || !strings.Contains(errOut, "--model gpt contradicts") {
		t.Errorf("--model gpt against a llama: exit %d, %s", code, errOut)
	}
}

// Two runs started in the same second get a run directory each, and
// removeRunDir removes only one that holds no checkpoint.
func TestTrainRunDirectoriesAreDistinct(t *testing.T) {
	a, err := newRunDir("text")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newRunDir("text")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("run directories %s and %s", a, b)
	}
	removeRunDir(a)
	removeRunDir(b)
	for _, d := range []string{a, b} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is still there", d)
		}
	}
}

// A run whose summary cannot be written (stdout on a full disk) exits 1
// and leaves no run directory: nobody was told where it is.
func TestTrainFullStdoutLeavesNoRunDirectory(t *testing.T) {
	data := corpus(t)
	count := func() int { ents, _ := os.ReadDir(runsDir); return len(ents) }
	before := count()
	for _, extra := range [][]string{nil, {"--json"}} {
		var errBuf strings.Builder
		args := smallText(data, append([]string{"--steps", "2"}, extra...)...)
		if code := run(args, fullWriter{}, &errBuf); code != 1 || !strings.Contains(errBuf.String(), "no space left") {
			t.Errorf("%v: exit %d, %s", extra, code, errBuf.String())
		}
		if n := count(); n != before {
			t.Errorf("%v: a run directory was left (%d entries, %d before)", extra, n, before)
		}
	}
}
