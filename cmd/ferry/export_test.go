package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/models"
	"ferry/nn"
	"ferry/train"
)

// ferry train text → ferry export → the export read back as --init-from
// reads it: the same weights, bit for bit, for a GPT and a Llama.
func TestExportRoundTripsThroughInitFrom(t *testing.T) {
	data := corpus(t)
	for _, model := range []string{"gpt", "llama"} {
		t.Run(model, func(t *testing.T) {
			ck := filepath.Join(t.TempDir(), "run")
			args := []string{"train", "text", "--data", data, "--model", model, "--layers", "2", "--heads", "2", "--embd", "32",
				"--seq", "16", "--batch", "4", "--val-batches", "1", "--sample", "0", "--steps", "3", "--checkpoint-dir", ck}
			runJSON(t, args...)
			out := filepath.Join(t.TempDir(), "hf")
			res := runJSON(t, "export", "--checkpoint-dir", ck, "--out", out)
			want := map[string]string{"gpt": "gpt2", "llama": "llama"}[model]
			if res["model_type"] != want || res["out"] != out {
				t.Fatalf("export: %v", res)
			}
			for _, f := range []string{"config.json", "model.safetensors"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Error(err)
				}
			}
			// What train text --init-from does with the export: OpenSource
			// and Load, into the model its sizes build.
			src, err := models.OpenSource(out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(src.Kind, "Hugging Face") {
				t.Errorf("the export opens as %q", src.Kind)
			}
			dev, err := cpu.New(device.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			build := func(s models.Sizes) models.LanguageModel {
				s["batch"] = 1
				m, err := src.Family.LanguageModel(dev, s, 77)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { nn.Release(m) })
				return m
			}
			fromHF := build(src.Sizes)
			if err := src.Load(fromHF); err != nil {
				t.Fatal(err)
			}
			path, meta, err := train.ResolveCheckpoint(ck)
			if err != nil {
				t.Fatal(err)
			}
			_, sz, err := models.CheckpointModel(meta.Identity)
			if err != nil {
				t.Fatal(err)
			}
			fromCk := build(sz)
			if err := nn.LoadSafetensors(filepath.Join(path, "model.safetensors"), fromCk); err != nil {
				t.Fatal(err)
			}
			a, b := nn.NamedParameters(fromCk), nn.NamedParameters(fromHF)
			if len(a) != len(b) || len(a) == 0 {
				t.Fatalf("%d parameters in the checkpoint, %d in the export", len(a), len(b))
			}
			for i := range a {
				x, y := a[i].Tensor.Float32s(), b[i].Tensor.Float32s()
				if a[i].Name != b[i].Name || len(x) != len(y) {
					t.Fatalf("%s %d, %s %d", a[i].Name, len(x), b[i].Name, len(y))
				}
				for j := range x {
					if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
						t.Fatalf("%s[%d]: checkpoint %v, export %v", a[i].Name, j, x[j], y[j])
					}
				}
			}
		})
	}
}

// Bad input is refused with a clear error and leaves nothing behind;
// the human output says what was written and how to read it.
func TestExportRefusesAndLeavesNothing(t *testing.T) {
	data := corpus(t)
	ck := filepath.Join(t.TempDir(), "run")
	runJSON(t, smallText(data, "--steps", "1", "--checkpoint-dir", ck)...)
	base := t.TempDir()
	full := filepath.Join(base, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(base, "ro")
	if err := os.MkdirAll(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", filepath.Join(base, "x")}, "give --checkpoint-dir"},
		{[]string{"--checkpoint-dir", "", "--out", filepath.Join(base, "x")}, "--checkpoint-dir is empty"},
		{[]string{"--checkpoint-dir", ck}, "give --out"},
		{[]string{"--checkpoint-dir", ck, "--out", ""}, "--out is empty"},
		{[]string{"--checkpoint-dir", ck, "--out", filepath.Join(base, "x"), "--format", ""}, "--format is empty"},
		{[]string{"--checkpoint-dir", ck, "--out", filepath.Join(base, "x"), "--format", "gguf"}, "ferry exports hf"},
		{[]string{"--checkpoint-dir", filepath.Join(base, "missing"), "--out", filepath.Join(base, "x")}, "no such file or directory: give a checkpoint directory"},
		{[]string{"--checkpoint-dir", ck, "--out", full}, "exists and is not empty"},
		{[]string{"--checkpoint-dir", ck, "--out", file}, "not a directory"},
		{[]string{"--checkpoint-dir", ck, "--out", filepath.Join(base, "no", "such", "x")}, "does not exist: create it first"},
	} {
		out, errOut, code := runCLI(t, append([]string{"export"}, c.args...)...)
		wantCode := 1
		if strings.HasSuffix(c.want, "is empty") { // a usage error, refused before the command runs
			wantCode = 2
		}
		if code != wantCode || !strings.Contains(errOut, c.want) {
			t.Errorf("ferry export %q: exit %d, %q; want %d and %q\n%s", c.args, code, errOut, wantCode, c.want, out)
		}
	}
	if os.Geteuid() != 0 { // root writes anywhere
		_, errOut, code := runCLI(t, "export", "--checkpoint-dir", ck, "--out", filepath.Join(ro, "x"))
		if code != 1 || !strings.Contains(errOut, "permission denied") {
			t.Errorf("a read-only parent: exit %d, %q", code, errOut)
		}
		_, errOut, code = runCLI(t, "export", "--checkpoint-dir", ck, "--out", ro)
		if code != 1 || !strings.Contains(errOut, "is not writable") {
			t.Errorf("a read-only empty --out: exit %d, %q", code, errOut)
		}
	} else {
		t.Log("running as root: the read-only cases are not checked (root writes anywhere)")
	}
	ents, _ := os.ReadDir(base)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "file full ro" {
		t.Errorf("refused exports left %v in %s", names, base)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "keep.txt")); string(b) != "mine" {
		t.Error("a refused export touched a file in --out")
	}
	// An empty --out is taken; the human output names the files and the
	// byte-level model's missing tokenizer.
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "export", "--checkpoint-dir", ck, "--out", empty)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"a Hugging Face gpt2 (GPT2LMHeadModel", "config.json", "model.safetensors", "no tokenizer: the model reads bytes",
		"GPT2LMHeadModel.from_pretrained"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Exporting again into it is refused: it is not empty now.
	if _, errOut, code := runCLI(t, "export", "--checkpoint-dir", ck, "--out", empty); code != 1 || !strings.Contains(errOut, "not empty") {
		t.Errorf("a second export: exit %d, %q", code, errOut)
	}
}
