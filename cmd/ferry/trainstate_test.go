package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// ferry train with the parameters streamed from host memory, the
// gradients sent there and the optimizer stepping there trains bit for
// bit as with all of it on the device (dropout, accumulation, clipping):
// the same losses and the same checkpoint files; a run stopped with the
// state on the host resumes with it on the device (and the reverse) to
// the same files.
func TestTrainStateOnHost(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	onHost := []string{"--optimizer-state", "host", "--gradients", "host", "--parameters", "host"}
	args := func(ck string, host bool, extra ...string) []string {
		a := smallText(data, append([]string{"--steps", "4", "--eval-every", "2", "--accum", "2", "--clip", "0.5",
			"--checkpoint-dir", ck, "--log", ck + ".jsonl"}, extra...)...)
		if host {
			a = append(a, onHost...)
		}
		return a
	}
	ref, host := filepath.Join(dir, "device"), filepath.Join(dir, "host")
	for _, c := range []struct {
		ck   string
		host bool
	}{{ref, false}, {host, true}} {
		if out, errOut, code := runCLI(t, args(c.ck, c.host)...); code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", c.ck, code, out, errOut)
		}
	}
	sameBits(t, "host", logLosses(t, ref+".jsonl"), logLosses(t, host+".jsonl"), 4)
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		sameFile(t, filepath.Join(ref, "step-00000004", f), filepath.Join(host, "step-00000004", f))
	}
	for _, c := range [][2]bool{{true, false}, {false, true}} {
		ck := filepath.Join(dir, strings.ReplaceAll(strings.Trim(strings.Join([]string{where(c[0]), where(c[1])}, "-then-"), " "), " ", ""))
		if out, errOut, code := runCLI(t, args(ck, c[0], "--stop-after", "2")...); code != 0 {
			t.Fatalf("%v first half: exit %d\n%s%s", c, code, out, errOut)
		}
		if out, errOut, code := runCLI(t, args(ck, c[1], "--resume")...); code != 0 || !strings.Contains(out, "resumed from") {
			t.Fatalf("%v resumed half: exit %d\n%s%s", c, code, out, errOut)
		}
		for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
			sameFile(t, filepath.Join(ref, "step-00000004", f), filepath.Join(ck, "step-00000004", f))
		}
	}
	for _, bad := range [][]string{{"--gradients", "gpu"}, {"--parameters", "host"}} {
		_, errOut, code := runCLI(t, smallText(data, bad...)...)
		if code == 0 || !strings.Contains(errOut, "--") {
			t.Errorf("%v: exit %d, %s", bad, code, errOut)
		}
	}
}
