package main

import (
	"encoding/json"
	"strings"
	"testing"
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
	two := run("--ranks", "2")
	four := run("--ranks", "4", "--zero", "2")
	if one.Ranks != 0 || two.Ranks != 2 || two.Stage != 1 || four.Ranks != 4 || four.Stage != 2 {
		t.Fatalf("ranks/stages %d/%d, %d/%d, %d/%d", one.Ranks, one.Stage, two.Ranks, two.Stage, four.Ranks, four.Stage)
	}
	if !(four.Unlimited.PeakBytes < two.Unlimited.PeakBytes && two.Unlimited.PeakBytes < one.Unlimited.PeakBytes) {
		t.Errorf("unlimited peaks: 1 rank %d, 2 ranks %d, 4 ranks %d", one.Unlimited.PeakBytes, two.Unlimited.PeakBytes, four.Unlimited.PeakBytes)
	}
	if !strings.Contains(two.Model, "rank") {
		t.Errorf("model %q does not say which rank", two.Model)
	}
	for _, c := range []struct {
		args []string
		want string
	}{{[]string{"--ranks", "0"}, "--ranks must be"}, {[]string{"--ranks", "2", "--zero", "3"}, "--zero must be"}} {
		_, errOut, code := runCLI(t, append(append([]string{}, gpt...), c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q", c.args, code, errOut)
		}
	}
}
