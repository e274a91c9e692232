package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"ferry/train"
)

// The planned round trip: ferry plan --out p.json, then train text
// --policy p.json --checkpoint-dir D, then eval and sample on D. The
// policy run validates (step 0 and at --eval-every), says "mode policy"
// in its header and its summary, records the same identity as the run
// without --policy (model, data, tokenizer), and eval and sample read
// its checkpoint; eval reproduces its last validation loss.
func TestPolicyRunTrainsEvaluatesAndSamples(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "p.json")
	if _, errOut, code := runCLI(t, "plan", "--model", "gpt", "--vocab", "256", "--seq", "16", "--layers", "2", "--heads", "2",
		"--embd", "32", "--batch", "4", "--dropout", "0.1", "--budget", "900KiB", "--profile", "cpu", "--out", policy); code != 0 {
		t.Fatalf("plan: %s", errOut)
	}
	ckpt := map[string]string{"plain": filepath.Join(dir, "plain"), "policy": filepath.Join(dir, "planned")}
	for name, d := range ckpt {
		args := smallText(data, "--steps", "6", "--eval-every", "3", "--checkpoint-dir", d)
		if name == "policy" {
			args = append(args, "--policy", policy)
		}
		out, errOut, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
		if name != "policy" {
			continue
		}
		for _, want := range []string{"step 0: val loss", "step 3: train loss", "step 6: train loss", "mode policy,", "checkpoint: "} {
			if !strings.Contains(out, want) {
				t.Errorf("policy run: no %q in\n%s", want, out)
			}
		}
		if strings.Contains(out, "mode offload") {
			t.Errorf("policy run says mode offload:\n%s", out)
		}
	}
	// The same run: the same identity, key for key.
	ids := map[string]map[string]any{}
	for name, d := range ckpt {
		path, meta, err := train.ResolveCheckpoint(d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if meta.Identity["model"] != "gpt" || meta.Identity["tokenizer"] != "byte" || meta.Identity["data"] == nil {
			b, _ := json.Marshal(meta.Identity)
			t.Errorf("%s: %s's identity lacks the model, tokenizer or data: %s", name, path, b)
		}
		ids[name] = meta.Identity
	}
	if diffs := train.CompareIdentity(ids["plain"], ids["policy"]); len(diffs) > 0 {
		t.Errorf("the policy run's identity differs from the plain run's: %v", diffs)
	}
	sum := runJSON(t, smallText(data, "--steps", "6", "--eval-every", "3", "--checkpoint-dir", filepath.Join(dir, "planned2"), "--policy", policy)...)
	if sum["mode"] != "policy" || sum["final_val_loss"] == nil || sum["best_val_loss"] == nil {
		t.Errorf("policy run --json: mode %v, final_val_loss %v, best_val_loss %v", sum["mode"], sum["final_val_loss"], sum["best_val_loss"])
	}
	ev := runJSON(t, "eval", "--checkpoint-dir", ckpt["policy"])
	if got, want := num(t, ev, "val_loss"), num(t, sum, "final_val_loss"); got != want {
		t.Errorf("eval of the policy run: val_loss %v, the run's last validation %v", got, want)
	}
	out, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ckpt["policy"], "--n", "20", "--prompt", "func ")
	if code != 0 || !strings.Contains(out, "func ") {
		t.Errorf("sample of the policy run: exit %d\n%s%s", code, out, errOut)
	}
}
