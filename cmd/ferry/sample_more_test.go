package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleRun trains a small byte-level GPT for 3 steps into a checkpoint
// directory and returns it, with its checkpoint's directory.
func sampleRun(t *testing.T) (dir, ck string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "run")
	runJSON(t, smallText(corpus(t), "--steps", "3", "--checkpoint-dir", dir)...)
	return dir, filepath.Join(dir, "step-00000003")
}

func sampleText(t *testing.T, args ...string) string {
	t.Helper()
	m := runJSON(t, append([]string{"sample", "--n", "24"}, args...)...)
	s, _ := m["text"].(string)
	return s
}

// --num-samples draws N samples from one generator, the first being the
// single sample; --top-p near 0 leaves only the likeliest token, which
// is greedy decoding at any temperature; --prompt-file gives the prompt.
func TestSampleNumSamplesTopPPromptFile(t *testing.T) {
	dir, _ := sampleRun(t)
	m := runJSON(t, "sample", "--checkpoint-dir", dir, "--n", "24", "--num-samples", "3", "--temperature", "1.5")
	samples, _ := m["samples"].([]any)
	if len(samples) != 3 || num(t, m, "num_samples") != 3 {
		t.Fatalf("--num-samples 3: %d samples", len(samples))
	}
	one := sampleText(t, "--checkpoint-dir", dir, "--temperature", "1.5")
	texts := map[string]bool{}
	for i, s := range samples {
		text, _ := s.(map[string]any)["text"].(string)
		if !strings.HasPrefix(text, "func ") {
			t.Errorf("sample %d does not continue the prompt: %q", i, text)
		}
		if i == 0 && text != one {
			t.Errorf("the first of 3 samples %q is not the single sample %q", text, one)
		}
		texts[text] = true
	}
	if len(texts) < 2 {
		t.Errorf("3 samples at temperature 1.5 are all %q", one)
	}
	greedy := sampleText(t, "--checkpoint-dir", dir, "--temperature", "0")
	if got := sampleText(t, "--checkpoint-dir", dir, "--temperature", "2", "--top-p", "1e-9"); got != greedy {
		t.Errorf("--top-p 1e-9: %q, greedy %q", got, greedy)
	}
	if got := sampleText(t, "--checkpoint-dir", dir, "--temperature", "2", "--top-p", "1"); got == greedy {
		t.Errorf("--top-p 1 at temperature 2 gave the greedy text %q", got)
	}
	pf := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(pf, []byte("type T struct"), 0o644); err != nil {
		t.Fatal(err)
	}
	m = runJSON(t, "sample", "--checkpoint-dir", dir, "--n", "8", "--prompt-file", pf)
	if text, _ := m["text"].(string); m["prompt"] != "type T struct" || !strings.HasPrefix(text, "type T struct") {
		t.Errorf("--prompt-file: prompt %q, text %q", m["prompt"], text)
	}
}

// sample --init-from reads what train text --init-from reads: a Hugging
// Face directory (ferry export's) and a safetensors file (sized by the
// size flags) give the checkpoint's own greedy text.
func TestSampleInitFrom(t *testing.T) {
	dir, ck := sampleRun(t)
	want := sampleText(t, "--checkpoint-dir", dir, "--temperature", "0")
	hf := filepath.Join(t.TempDir(), "hf")
	runJSON(t, "export", "--checkpoint-dir", dir, "--out", hf)
	if got := sampleText(t, "--init-from", hf, "--temperature", "0"); got != want {
		t.Errorf("--init-from the HF export: %q, the checkpoint's %q", got, want)
	}
	file := filepath.Join(ck, "model.safetensors")
	if got := sampleText(t, "--init-from", file, "--temperature", "0", "--layers", "2", "--heads", "2", "--embd", "32", "--seq", "16"); got != want {
		t.Errorf("--init-from the safetensors file: %q, the checkpoint's %q", got, want)
	}
	// Without its sizes, the file does not fit the default model: refused.
	if _, errOut, code := runCLI(t, "sample", "--init-from", file, "--n", "4"); code == 0 || !strings.Contains(errOut, "records no sizes") {
		t.Errorf("a safetensors file at the wrong sizes: exit %d, %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, "sample", "--init-from", hf, "--layers", "3"); code == 0 || !strings.Contains(errOut, "fixes the model") {
		t.Errorf("--init-from HF with --layers: exit %d, %s", code, errOut)
	}
}

// Hostile values get a clear error naming the flag, exit non-zero, and
// never a panic.
func TestSampleBadInput(t *testing.T) {
	dir, _ := sampleRun(t)
	pf := filepath.Join(t.TempDir(), "p.txt")
	os.WriteFile(pf, []byte("x"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--top-p", "0"}, "--top-p must be in (0, 1]"},
		{[]string{"--top-p", "-0.5"}, "--top-p must be in (0, 1]"},
		{[]string{"--top-p", "1.5"}, "--top-p must be in (0, 1]"},
		{[]string{"--top-p", "NaN"}, "--top-p must be in (0, 1]"},
		{[]string{"--num-samples", "0"}, "--num-samples must be in [1, 1000]"},
		{[]string{"--num-samples", "-3"}, "--num-samples must be in [1, 1000]"},
		{[]string{"--num-samples", "1000000"}, "--num-samples must be in [1, 1000]"},
		{[]string{"--num-samples", "1000", "--n", "100000"}, "more than ferry sample generates"},
		{[]string{"--prompt", "a", "--prompt-file", pf}, "give one"},
		{[]string{"--prompt-file", ""}, "--prompt-file is empty"},
		{[]string{"--prompt-file", filepath.Dir(pf)}, "is a directory"},
		{[]string{"--prompt-file", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--init-from", pf}, "one of them"},
		{[]string{"--layers", "3"}, "apply to --init-from"},
	} {
		args := append([]string{"sample", "--checkpoint-dir", dir, "--n", "4"}, c.args...)
		out, errOut, code := runCLI(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "panic") {
			t.Errorf("%v: exit %d, want an error with %q\n%s%s", c.args, code, c.want, out, errOut)
		}
	}
}
