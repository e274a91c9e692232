package plan

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bench/cpu_clock.sh's logic, against a stub ferry that prints canned
// steps: rounds alternate predicted and measured kind by kind, the table
// gives each kind's medians over the rounds of the runs' fast steps and
// their ratio, marks a ratio outside 0.9 to 1.1, and gives the ratio to
// the runs' median steps beside. No timing: the figures are the stub's.
func TestCPUClockScript(t *testing.T) {
	// Measured steps in call order: round by round, none then recompute.
	out, calls := runClockScript(t, `case " $* " in
*" --device meta "*" --modes none "*) s=0.10 ;;
*" --device meta "*" --modes recompute "*) s=0.25 ;;
*)
	n=$(grep -c -- "--device cpu" CALLS)
	s=$(echo "0.10 0.20 0.11 0.22 0.09 0.18" | cut -d' ' -f"$n") ;;
esac`, "KINDS=none recompute")
	none, recompute := clockRow(out, "none"), clockRow(out, "recompute")
	// none: measured 0.10, 0.11, 0.09; recompute: 0.20, 0.22, 0.18.
	// The ratio to the runs' median steps (twice their fast steps in the
	// stub) comes last.
	if want := "3 0.1000 0.1000 1.000 0.0900–0.1100 0.500"; none != want {
		t.Errorf("none: %q, want %q\n%s", none, want, out)
	}
	if want := "3 0.2500 0.2000 1.250 * 0.1800–0.2200 0.625"; recompute != want {
		t.Errorf("recompute: %q, want %q\n%s", recompute, want, out)
	}
	if len(calls) != 12 {
		t.Fatalf("%d runs, want 12 (3 rounds × 2 kinds × predicted and measured):\n%s", len(calls), strings.Join(calls, "\n"))
	}
	for i, l := range calls {
		dev := "--device meta"
		if i%2 == 1 {
			dev = "--device cpu"
		}
		if !strings.Contains(l, dev) || !strings.Contains(l, "--layers 16 --width 1024 --batch 128") {
			t.Errorf("run %d: %q, want %s and the MLP's flags (alternating)", i, l, dev)
		}
	}
}

// With FIT=round the script fits the model's profile again before each
// round (ferry calibrate … --save FILE) and predicts that round with it;
// the ratio is the median of the rounds' ratios, each measurement against
// the prediction made beside it.
func TestCPUClockScriptFitsEachRound(t *testing.T) {
	// A fit writes a profile; the n-th fit's predictions are 0.10 × n.
	out, calls := runClockScript(t, `if [ "$1" = calibrate ]; then
	while [ $# -gt 0 ]; do [ "$1" = --save ] && out=$2; shift; done
	echo '{"matmul_flops": 1e11, "memory_bytes_per_sec": 1e10, "host_optimizer_bytes_per_sec": 1e10, "copy_compute_share": 0.5}' >"$out"
	exit 0
fi
case " $* " in
*" --device meta "*)
	n=$(grep -c "^calibrate" CALLS)
	s=$(echo "0.10 0.20 0.30" | cut -d' ' -f"$n") ;;
*)
	n=$(grep -c -- "--device cpu" CALLS)
	s=$(echo "0.10 0.11 0.09" | cut -d' ' -f"$n") ;;
esac`, "KINDS=none", "FIT=round")
	// Rounds' ratios 0.10/0.10, 0.20/0.11, 0.30/0.09: median 1.818 (the
	// ratio of the medians would be 2.000).
	if want, none := "3 0.2000 0.1000 1.818 * 0.0900–0.1100 0.909", clockRow(out, "none"); none != want {
		t.Errorf("none: %q, want %q\n%s", none, want, out)
	}
	var kinds []string
	for _, l := range calls {
		switch {
		case strings.HasPrefix(l, "calibrate"):
			kinds = append(kinds, "fit")
		case strings.Contains(l, "--device meta"):
			kinds = append(kinds, "predict")
		default:
			kinds = append(kinds, "measure")
		}
	}
	if got, want := strings.Join(kinds, " "), "fit predict measure fit predict measure fit predict measure"; got != want {
		t.Errorf("runs: %s, want %s", got, want)
	}
}

// runClockScript runs bench/cpu_clock.sh on the MLP for 3 rounds, with
// env besides, against a stub ferry: body, a bash fragment in which CALLS
// names the file of the calls so far (each logged before body runs),
// sets s to the step the call prints (or prints and exits itself). It
// returns the script's output and the stub's calls, in order.
func runClockScript(t *testing.T, body string, env ...string) (string, []string) {
	t.Helper()
	for _, tool := range []string{"bash", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	stub := "#!/usr/bin/env bash\necho \"$*\" >>" + calls + "\n" + strings.ReplaceAll(body, "CALLS", calls) + "\n" +
		`m=$(awk "BEGIN { print 2 * $s }")` + "\n" +
		`echo "{\"runs\": [{\"step_seconds_fast\": $s, \"step_seconds\": $m}]}"` + "\n"
	bin := filepath.Join(dir, "ferry")
	if err := os.WriteFile(bin, []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join("..", "bench", "cpu_clock.sh"), bin)
	cmd.Env = append(append(os.Environ(), "ROUNDS=3", "MODELS=mlp", "FERRY_CLOCK_QUIET=0"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), strings.Split(strings.TrimSpace(string(b)), "\n")
}

// clockRow is the MLP's row of kind in the script's table, after the
// model and kind: rounds, predicted, measured, ratio (and mark), range.
func clockRow(out, kind string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 7 && f[0] == "mlp" && f[1] == kind {
			return strings.Join(f[2:], " ")
		}
	}
	return ""
}
