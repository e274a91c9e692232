package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"ferry/offload"
)

// ferry plan --ranks N plans one rank: its peak without the state other
// ranks hold, the ranks and stage in the JSON, and no replay command (ferry
// demo replays one process).
func TestPlanRanks(t *testing.T) {
	gpt := []string{"plan", "--model", "gpt", "--vocab", "512", "--seq", "64", "--layers", "4", "--heads", "4", "--embd", "128", "--batch", "4",
		"--budget", "1GiB", "--json"}
	type planOut struct {
		Model     string `json:"model"`
		Ranks     int    `json:"ranks"`
		Stage     int    `json:"zero_stage"`
		Unlimited struct {
			PeakBytes int64 `json:"peak_bytes"`
		} `json:"unlimited"`
		Replay string `json:"replay_command"`
	}
	run := func(extra ...string) planOut {
		out, errOut, code := runCLI(t, append(append([]string{}, gpt...), extra...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errOut)
		}
		var p planOut
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one := run()
	two := run("--ranks", "2", "--zero", "1")
	four := run("--ranks", "4", "--zero", "2")
	if one.Ranks != 0 || two.Ranks != 2 || two.Stage != 1 || four.Ranks != 4 || four.Stage != 2 {
		t.Fatalf("ranks/stages %d/%d, %d/%d, %d/%d", one.Ranks, one.Stage, two.Ranks, two.Stage, four.Ranks, four.Stage)
	}
	if !(four.Unlimited.PeakBytes < two.Unlimited.PeakBytes && two.Unlimited.PeakBytes < one.Unlimited.PeakBytes) {
		t.Errorf("unlimited peaks: 1 rank %d, 2 ranks %d, 4 ranks %d", one.Unlimited.PeakBytes, two.Unlimited.PeakBytes, four.Unlimited.PeakBytes)
	}
	// --zero auto (the default with --ranks) plans each stage and keeps
	// the fastest that fits; the policy records the ranks and the stage.
	policy := filepath.Join(t.TempDir(), "p.json")
	var auto struct {
		planOut
		Fits      bool `json:"fits"`
		Predicted struct {
			StepSeconds float64 `json:"step_seconds"`
		} `json:"predicted"`
		StagesTried []struct {
			Zero        int     `json:"zero_stage"`
			Fits        bool    `json:"fits"`
			StepSeconds float64 `json:"predicted_step_seconds"`
		} `json:"zero_stages_tried"`
	}
	out, errOut, code := runCLI(t, append(append([]string{}, gpt...), "--ranks", "4", "--profile", "h100-sxm", "--out", policy)...)
	if code != 0 {
		t.Fatalf("--zero auto: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &auto); err != nil {
		t.Fatal(err)
	}
	if len(auto.StagesTried) != 4 || !auto.Fits {
		t.Fatalf("--zero auto tried %+v, fits %v", auto.StagesTried, auto.Fits)
	}
	for i, s := range auto.StagesTried {
		if s.Zero != i || s.Fits && s.StepSeconds < auto.Predicted.StepSeconds {
			t.Errorf("stage %+v fits and is faster than the chosen ZeRO-%d (%g s)", s, auto.Stage, auto.Predicted.StepSeconds)
		}
	}
	pol, err := offload.LoadPolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	if pol.Ranks != 4 || pol.Zero != auto.Stage {
		t.Errorf("policy records %d ranks at ZeRO %d, the plan %d at %d", pol.Ranks, pol.Zero, auto.Ranks, auto.Stage)
	}
	if !strings.Contains(two.Model, "rank") {
		t.Errorf("model %q does not say which rank", two.Model)
	}
	for _, c := range []struct {
		args []string
		want string
	}{{[]string{"--ranks", "0"}, "--ranks must be"}, {[]string{"--ranks", "2", "--zero", "4"}, `--zero "4": want 0, 1, 2, 3 or auto`}} {
		_, errOut, code := runCLI(t, append(append([]string{}, gpt...), c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q", c.args, code, errOut)
		}
	}
}
