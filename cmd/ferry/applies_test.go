package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A flag that does not apply to the chosen mode, optimizer, tokenizer or
// process is an error, not ignored; a flag that contradicts a policy is
// refused whichever way round; nonsense values of plan and demo are
// refused. Each case exits 1 or 2 (a value the flag parser refuses) with
// a message that names what to change.
func TestFlagsThatDoNotApplyAreRefused(t *testing.T) {
	dir := t.TempDir()
	data := corpus(t)
	ck := textCheckpoint(t)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keep := write("keep.json", `{"version":1,"default":"keep"}`)                    // records no precision, no state: fp32, device
	bf16 := write("bf16.json", `{"version":1,"default":"keep","precision":"bf16"}`) // the reverse
	host := write("host.json", `{"version":1,"default":"keep","optimizer_state":"host"}`)
	ranks := write("ranks.json", `{"version":1,"default":"keep","ranks":2,"zero":1}`) // one rank of two (ferry plan --ranks 2)
	badRanks := write("bad-ranks.json", `{"version":1,"default":"keep","ranks":1,"zero":1}`)
	text := func(extra ...string) []string { return smallText(data, append([]string{"--steps", "1"}, extra...)...) }
	meta := func(extra ...string) []string {
		return append([]string{"demo", "--device", "meta", "--steps", "1"}, extra...)
	}
	cases := []struct {
		args []string
		want string
		code int
	}{
		// train: mode, policy, optimizer, tokenizer, process
		{text("--disk-dir", dir), "--disk-dir is the disk tier of mode offload-disk", 1},
		{text("--mode", "recompute", "--disk-dir", dir), "mode recompute writes nothing to disk", 1},
		{text("--mode", "offload", "--disk-dir", dir), "mode offload writes nothing to disk", 1},
		{text("--mode", "offload", "--policy", keep), "cannot be combined with --mode offload", 1},
		{text("--offload", "--policy", keep), "cannot be combined", 1},
		{text("--mode", "none", "--policy", keep), "cannot be combined with --mode none", 1},
		{text("--policy", keep, "--precision", "bf16"), "was planned at --precision fp32; drop --precision bf16", 1},
		{text("--policy", ranks), "is one rank of 2 at ZeRO stage 1 (ferry plan --ranks 2 --zero 1), and this run is 1 at stage 0", 1},
		{text("--policy", badRanks), "ranks 1 at zero 1", 1},
		{text("--policy", bf16, "--precision", "fp32"), "was planned at --precision bf16; drop --precision fp32", 1},
		{text("--policy", keep, "--optimizer-state", "host"), "planned with the optimizer state on the device", 1},
		{text("--policy", host, "--optimizer-state", "device"), "planned with the optimizer state on the host", 1},
		{text("--policy", keep, "--disk-dir", dir), "places nothing on disk", 1},
		{text("--momentum", "0.5"), "adamw takes no momentum", 1},
		{text("--token-cache", dir), "--token-cache applies to --tokenizer bpe", 1},
		{text("--prompt", "x"), "--sample 0 draws none", 1},
		{[]string{"train", "mnist", "--depth", "1", "--width", "8", "--steps", "1", "--disk-dir", dir}, "mode none writes nothing to disk", 1},
		// eval, tune
		{[]string{"eval", "--checkpoint-dir", ck, "--token-cache", dir}, "is a byte-level model", 1},
		{[]string{"tune", "--dry-run", "--save", filepath.Join(dir, "t.json")}, "--dry-run writes nothing", 1},
		// demo
		{meta("--modes", "none", "--keep-last", "1"), "--keep-last tunes the offloader", 1},
		{meta("--modes", "none,recompute", "--min-bytes", "1KiB"), "--min-bytes tunes the offloader", 1},
		{meta("--modes", "offload", "--disk-dir", dir), "--disk-dir is for offload-disk", 1},
		{meta("--poison"), "the meta device holds none", 1},
		{meta("--policy", keep, "--precision", "bf16"), "was planned at --precision fp32", 1},
		{meta("--policy", keep, "--optimizer-state", "host"), "on the device", 1},
		{meta("--capacity", "0"), "--capacity 0", 1},
		{meta("--steps", "100000"), "at most 1000 timed steps", 1},
		{meta("--lookahead", "2147483648"), "--lookahead 2147483648: at most 65536", 1},
		{meta("--max-in-flight", "100000"), "at most 65536", 1},
		{meta("--device-param", "copy_delay=-1s"), "want a delay in [0, 1m]", 1},
		{meta("--device-param", "copy_delay=1000h"), "want a delay in [0, 1m]", 1},
		{meta("--min-bytes", "1.5"), "not a whole number of bytes", 2},
		// plan
		{[]string{"plan", "--budget", "3GiB", "--zero", "1"}, "--ranks 1 has nothing to share it with", 1},
		{[]string{"plan", "--budget", "3GiB", "--host-budget", "0"}, "--host-budget 0", 1},
		{[]string{"plan", "--budget", "3GiB", "--ranks", "100000"}, "--ranks must be in [1, 65536]", 1},
		{[]string{"plan", "--budget", "1.5"}, "not a whole number of bytes", 2},
	}
	for _, c := range cases {
		_, errOut, code := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("ferry %s: exit %d, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 5 { // the policies written above, no more
		t.Errorf("left in %s: %v", dir, ents)
	}
}

// A run with --policy says mode policy where it starts and in its summary
// (it said mode offload, then mode policy); a plain number of bytes with a
// unit may still be fractional.
func TestPolicyRunNamesItsMode(t *testing.T) {
	data := corpus(t)
	keep := filepath.Join(t.TempDir(), "keep.json")
	os.WriteFile(keep, []byte(`{"version":1,"default":"keep"}`), 0o644)
	out, errOut, code := runCLI(t, smallText(data, "--steps", "2", "--policy", keep)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "on cpu, 2 steps, mode policy\n") || !strings.Contains(out, "on cpu, mode policy, optimizer") {
		t.Errorf("the start line and the summary disagree on the mode:\n%s", out)
	}
	if n, err := parseBytes("1.5KiB"); err != nil || n != 1536 {
		t.Errorf("1.5KiB: %d, %v", n, err)
	}
}

// --zero and --check-every apply to mpirun's ranks: a process that runs
// alone says in one line that they do nothing, and runs (one command line
// serves both).
func TestRankFlagsWarnAlone(t *testing.T) {
	data := corpus(t)
	for _, f := range [][]string{{"--zero", "1"}, {"--check-every", "2"}} {
		_, errOut, code := runCLI(t, smallText(data, append([]string{"--steps", "1"}, f...)...)...)
		if code != 0 || !strings.Contains(errOut, "ferry: warning: "+f[0]) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s alone: exit %d, stderr %q; want exit 0 and one line of warning", strings.Join(f, " "), code, errOut)
		}
	}
}
