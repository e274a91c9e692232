package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/safetensors"
)

// The checkpoint tree mutator: for a small checkpoint directory of train
// text (float32, and with --save-dtype bf16), of train mnist, and for a
// sharded Hugging Face-style directory, each file in turn (latest and
// every file of every step-* included) is replaced by each of: a FIFO, a
// directory, a symbolic link that loops, an empty file, a truncated copy,
// a copy with one byte flipped in its header and one with a byte flipped
// in its data, and a 1 TiB sparse file. Then eval, sample, train --resume
// and train --init-from run on the tree (those that read it: mnist has no
// sample or --init-from, and a Hugging Face directory is only a source
// for --init-from, beside eval and sample, which must refuse it), each in
// process, under a 10 s limit. Each must end with a clear error naming
// the file (exit 1 or 2) or, where the file is not in the checkpoint that
// latest names (step 1's, while latest names step 2), succeed and say
// which checkpoint it used. Nothing may hang, panic, or leave a file:
// the tree is as it was after a command that only reads it, and holds no
// temporary and no .lock after a resume.
func TestCheckpointTreeMutator(t *testing.T) {
	data := corpus(t)
	root := t.TempDir()
	base := []string{"--data", data, "--layers", "1", "--heads", "1", "--embd", "16", "--seq", "16", "--batch", "2", "--val-batches", "1", "--sample", "0"}
	// --init-from takes the sizes from the source: no size flags, so that
	// a mutated source's sizes are its own error, not a clash.
	initArgs := func(src, out string) []string {
		return []string{"train", "text", "--data", data, "--batch", "2", "--val-batches", "1", "--sample", "0", "--steps", "1", "--init-from", src, "--checkpoint-dir", out}
	}
	textCmds := func(extra ...string) []mutCmd {
		return []mutCmd{
			{"eval", func(d, _ string) []string { return []string{"eval", "--checkpoint-dir", d} }, false},
			{"sample", func(d, _ string) []string { return []string{"sample", "--checkpoint-dir", d, "--n", "2"} }, false},
			{"resume", func(d, _ string) []string {
				return append(append([]string{"train", "text"}, base...), append([]string{"--steps", "3", "--checkpoint-dir", d, "--resume",
					"--override", "steps", "--checkpoint-every", "1", "--keep", "2"}, extra...)...)
			}, true},
			{"init-from", func(d, out string) []string { return initArgs(d, out) }, false},
		}
	}
	var trees []mutTree
	for _, kind := range []struct {
		name  string
		extra []string
	}{{"text-fp32", nil}, {"text-bf16", []string{"--save-dtype", "bf16"}}} {
		d := filepath.Join(root, kind.name)
		args := append(append([]string{"train", "text"}, base...), append([]string{"--steps", "2", "--checkpoint-every", "1", "--keep", "2", "--checkpoint-dir", d}, kind.extra...)...)
		if _, errOut, code := runCLI(t, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", kind.name, code, errOut)
		}
		trees = append(trees, mutTree{kind.name, d, textCmds(kind.extra...), "step-00000002"})
	}
	mdir := tinyMNIST(t)
	md := filepath.Join(root, "mnist")
	mbase := []string{"train", "mnist", "--data", mdir, "--depth", "1", "--width", "8", "--batch", "8", "--eval-every", "1"}
	if _, errOut, code := runCLI(t, append(mbase, "--steps", "2", "--checkpoint-every", "1", "--keep", "2", "--checkpoint-dir", md)...); code != 0 {
		t.Fatalf("mnist: exit %d: %s", code, errOut)
	}
	trees = append(trees, mutTree{"mnist", md, []mutCmd{
		{"eval", func(d, _ string) []string { return []string{"eval", "--checkpoint-dir", d, "--data", mdir} }, false},
		{"resume", func(d, _ string) []string {
			return append(mbase, "--steps", "3", "--checkpoint-dir", d, "--resume", "--override", "steps", "--checkpoint-every", "1", "--keep", "2")
		}, true},
	}, "step-00000002"})
	trees = append(trees, mutTree{"hf", hfShards(t, filepath.Join(root, "hf")), []mutCmd{
		{"eval", func(d, _ string) []string { return []string{"eval", "--checkpoint-dir", d} }, false},
		{"sample", func(d, _ string) []string { return []string{"sample", "--checkpoint-dir", d, "--n", "2"} }, false},
		{"init-from", func(d, out string) []string { return initArgs(d, out) }, false},
	}, ""})

	start := time.Now()
	cases := 0
	var slowest time.Duration
	var slowestCase string
	for _, tr := range trees {
		files := treeFiles(t, tr.dir)
		for _, rel := range files {
			for _, mut := range mutations {
				for _, c := range tr.cmds {
					cases++
					d := filepath.Join(root, "case")
					os.RemoveAll(d)
					copyTree(t, tr.dir, d)
					orig, _ := os.ReadFile(filepath.Join(tr.dir, rel))
					if err := mut.apply(filepath.Join(d, rel), orig); err != nil {
						t.Fatalf("%s %s %s: %v", tr.name, rel, mut.name, err)
					}
					before := listing(d)
					out := filepath.Join(root, "out")
					name := fmt.Sprintf("%s: %s %s, %s", tr.name, rel, mut.name, c.name)
					stdout, stderr, code, took := runLimited(t, name, 10*time.Second, c.args(d, out)...)
					if took > slowest {
						slowest, slowestCase = took, name
					}
					checkMutCase(t, name, tr, rel, c, code, stdout, stderr)
					if !c.writes {
						if after := listing(d); after != before {
							t.Errorf("%s: the tree changed:\n%s\nnow\n%s", name, before, after)
						}
					}
					for _, dir := range []string{d, out} {
						if left := temporariesUnder(dir); len(left) > 0 {
							t.Errorf("%s: left %v in %s", name, left, dir)
						}
					}
					os.RemoveAll(out)
					os.RemoveAll(d)
				}
			}
		}
	}
	t.Logf("%d cases (%d trees) in %v; the slowest, %v: %s", cases, len(trees), time.Since(start).Round(time.Millisecond), slowest.Round(time.Millisecond), slowestCase)
}

type mutTree struct {
	name, dir string
	cmds      []mutCmd
	used      string // the step-* directory latest names ("" for a Hugging Face directory)
}

type mutCmd struct {
	name   string
	args   func(dir, out string) []string
	writes bool // writes into the tree (resume)
}

// mutations replace the file at p, whose content was orig.
var mutations = []struct {
	name  string
	apply func(p string, orig []byte) error
}{
	{"fifo", func(p string, _ []byte) error { os.Remove(p); return syscall.Mkfifo(p, 0o644) }},
	{"directory", func(p string, _ []byte) error { os.Remove(p); return os.Mkdir(p, 0o755) }},
	{"symlink-loop", func(p string, _ []byte) error { os.Remove(p); return os.Symlink(filepath.Base(p), p) }},
	{"empty", func(p string, _ []byte) error { return os.WriteFile(p, nil, 0o644) }},
	{"truncated", func(p string, b []byte) error { return os.WriteFile(p, b[:len(b)/2], 0o644) }},
	{"header-flip", func(p string, b []byte) error { return os.WriteFile(p, flip(p, b, true), 0o644) }},
	{"data-flip", func(p string, b []byte) error { return os.WriteFile(p, flip(p, b, false), 0o644) }},
	{"sparse-1TiB", func(p string, _ []byte) error {
		os.Remove(p)
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Truncate(1 << 40)
	}},
}

// flip is b with one bit flipped: in the header (a safetensors file's
// JSON header, the first byte of any other) or in the data (a
// safetensors file's last byte; the middle of a JSON file; the last
// character of a one-line file such as latest or trainer.sha256).
func flip(p string, b []byte, header bool) []byte {
	b = bytes.Clone(b)
	i := 0
	switch {
	case strings.HasSuffix(p, ".safetensors") && header:
		i = 8 + int(binary.LittleEndian.Uint64(b))/2
	case strings.HasSuffix(p, ".safetensors"):
		i = len(b) - 1
	case header:
		i = 0
	case strings.HasSuffix(p, ".json"):
		i = len(b) / 2
	default:
		i = len(bytes.TrimRight(b, "\n")) - 1
	}
	b[i] ^= 1
	return b
}

// checkMutCase checks one case's outcome: a clear error naming the file,
// or, for a file outside the checkpoint the commands use, a success that
// names the checkpoint used.
func checkMutCase(t *testing.T, name string, tr mutTree, rel string, c mutCmd, code int, stdout, stderr string) {
	t.Helper()
	all := stdout + stderr
	if strings.Contains(all, "panic:") || strings.Contains(all, "goroutine ") {
		t.Errorf("%s: panicked:\n%s", name, all)
		return
	}
	unused := tr.used != "" && rel != "latest" && !strings.HasPrefix(rel, tr.used+"/")
	if unused {
		if code != 0 || !strings.Contains(all, tr.used) {
			t.Errorf("%s: exit %d; want a success naming %s, the checkpoint latest names:\n%s", name, code, tr.used, firstLines(all, 3))
		}
		return
	}
	if tr.used == "" && c.name != "init-from" {
		// eval and sample of a Hugging Face directory: refused, as no
		// checkpoint of ferry train.
		if code != 1 || !strings.Contains(stderr, "holds no checkpoint") {
			t.Errorf("%s: exit %d; want exit 1, no checkpoint:\n%s", name, code, firstLines(all, 3))
		}
		return
	}
	if (code != 1 && code != 2) || !strings.Contains(stderr, rel) {
		t.Errorf("%s: exit %d; want exit 1 or 2 and an error naming %s:\n%s", name, code, rel, firstLines(all, 3))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// runLimited runs ferry in process and fails the test (without waiting)
// when it takes longer than limit: a hang.
func runLimited(t *testing.T, name string, limit time.Duration, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	type result struct {
		out, err string
		code     int
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		done <- result{out.String(), errOut.String(), code}
	}()
	select {
	case r := <-done:
		return r.out, r.err, r.code, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("%s: still running after %v (a hang): ferry %s", name, limit, strings.Join(args, " "))
	}
	return "", "", 0, 0
}

// treeFiles lists the files under dir, relative and sorted.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	for _, rel := range treeFiles(t, from) {
		b, err := os.ReadFile(filepath.Join(from, rel))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(to, rel)), 0o755)
		if err := os.WriteFile(filepath.Join(to, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// listing is every path under dir with its kind and size.
func listing(dir string) string {
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v %d\n", rel, info.Mode().Type(), info.Size())
		return nil
	})
	return b.String()
}

// temporariesUnder lists what a command must not leave under dir: temporaries
// of checkpoints and writes, and the lock.
func temporariesUnder(dir string) []string {
	var left []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		n := d.Name()
		if n == ".lock" || strings.Contains(n, "-tmp-") || strings.Contains(n, ".tmp-") || strings.HasSuffix(n, "-removing") ||
			strings.HasPrefix(n, ".write-test-") || strings.HasPrefix(n, ".ferry-write-test-") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

// tinyMNIST writes MNIST's four files with 64 training and 32 test
// images of 28×28 random pixels: the layout of the real set, loaded in
// milliseconds.
func tinyMNIST(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(4, 4))
	write := func(name string, header []uint32, n int) {
		var raw bytes.Buffer
		for _, h := range header {
			binary.Write(&raw, binary.BigEndian, h)
		}
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(rng.IntN(256))
			if header[0] == 0x801 {
				body[i] %= 10
			}
		}
		raw.Write(body)
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(raw.Bytes())
		w.Close()
		if err := os.WriteFile(filepath.Join(dir, name), z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("train-images-idx3-ubyte.gz", []uint32{0x803, 64, 28, 28}, 64*28*28)
	write("train-labels-idx1-ubyte.gz", []uint32{0x801, 64}, 64)
	write("t10k-images-idx3-ubyte.gz", []uint32{0x803, 32, 28, 28}, 32*28*28)
	write("t10k-labels-idx1-ubyte.gz", []uint32{0x801, 32}, 32)
	return dir
}

// hfShards writes a Hugging Face-style directory of a small GPT:
// config.json, model.safetensors.index.json and two shards.
func hfShards(t *testing.T, dir string) string {
	t.Helper()
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	g, err := nn.NewGPT(dev, nn.GPTConfig{Vocab: 256, Seq: 16, Layers: 1, Heads: 1, Embd: 16, Bias: true}, rand.New(rand.NewPCG(5, 5)))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	os.MkdirAll(dir, 0o755)
	whole := filepath.Join(t.TempDir(), "whole.safetensors")
	if err := nn.SaveSafetensors(whole, g); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(whole, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := len(f.Tensors) / 2
	index := map[string]string{}
	for i, part := range [][]safetensors.Tensor{f.Tensors[:half], f.Tensors[half:]} {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
		if err := safetensors.WriteFile(filepath.Join(dir, name), part, nil); err != nil {
			t.Fatal(err)
		}
		for _, x := range part {
			index[x.Name] = name
		}
	}
	b, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": index}, "", "  ")
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gpt2", "vocab_size": 256, "n_positions": 16, "n_layer": 1, "n_head": 1, "n_embd": 16}`+"\n"), 0o644)
	return dir
}
