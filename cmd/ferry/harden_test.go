package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fullWriter fails every write, as /dev/full does.
type fullWriter struct{}

func (fullWriter) Write(p []byte) (int, error) { return 0, syscall.ENOSPC }

// Text output that cannot be written exits 1 with a message on stderr,
// never 0 with nothing written.
func TestTextOutputToAFullDisk(t *testing.T) {
	for _, args := range [][]string{
		{"doctor"},
		{"doctor", "--json"},
		{"demo", "--device", "meta", "--steps", "1"},
		{"plan", "--budget", "3GiB"},
	} {
		var errOut bytes.Buffer
		code := run(args, fullWriter{}, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), "no space left on device") {
			t.Errorf("ferry %s to a full disk: exit %d, stderr %q", strings.Join(args, " "), code, errOut.String())
		}
	}
}

// textCheckpoint trains a small GPT for 2 steps and returns its
// --checkpoint-dir.
func textCheckpoint(t *testing.T) string {
	t.Helper()
	ck := filepath.Join(t.TempDir(), "ck")
	_, errOut, code := runCLI(t, smallText(corpus(t), "--steps", "2", "--checkpoint-dir", ck)...)
	if code != 0 {
		t.Fatalf("train text: exit %d: %s", code, errOut)
	}
	return ck
}

// ferry sample --json keeps every byte (text_base64), though JSON strings
// cannot hold invalid UTF-8; its text output to a full disk exits 1; a
// damaged weights file is refused.
func TestSample(t *testing.T) {
	ck := textCheckpoint(t)
	prompt := "\xff\xfe func"
	out, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ck, "--prompt", prompt, "--n", "30", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Text      string `json:"text"`
		Base64    string `json:"text_base64"`
		ValidUTF8 *bool  `json:"valid_utf8"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(r.Base64)
	if err != nil || !strings.HasPrefix(string(b), prompt) || len(b) != len(prompt)+30 {
		t.Fatalf("text_base64 %q (%v): want the prompt's exact bytes and 30 more", b, err)
	}
	if r.ValidUTF8 == nil || *r.ValidUTF8 {
		t.Fatalf("valid_utf8 %v for a text starting with 0xff", r.ValidUTF8)
	}
	// The same text in text mode, byte for byte.
	txt, _, _ := runCLI(t, "sample", "--checkpoint-dir", ck, "--prompt", prompt, "--n", "30")
	if !strings.Contains(txt, string(b)) {
		t.Fatalf("text mode and --json differ:\n%q\n%q", txt, b)
	}
	var errBuf bytes.Buffer
	if code := run([]string{"sample", "--checkpoint-dir", ck, "--n", "5"}, fullWriter{}, &errBuf); code != 1 {
		t.Fatalf("sample to a full disk: exit %d, %s", code, errBuf.String())
	}
	latest, _ := os.ReadFile(filepath.Join(ck, "latest"))
	model := filepath.Join(ck, strings.TrimSpace(string(latest)), "model.safetensors")
	w, _ := os.ReadFile(model)
	w[len(w)-2] ^= 1
	os.WriteFile(model, w, 0o644)
	if _, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ck); code != 1 || !strings.Contains(errOut, "damaged") {
		t.Fatalf("damaged weights: exit %d: %s", code, errOut)
	}
}

// A profile with an extreme, non-finite or misspelt field is refused with
// every bad field named; ferry plan never prints NaN.
func TestPlanRefusesExtremeProfiles(t *testing.T) {
	good := `"matmul_flops": 5e13, "memory_bytes_per_sec": 3e12, "kernel_seconds": 5e-6, "h2d_bytes_per_sec": 5e10,
		"disk_write_bytes_per_sec": 5e9, "disk_read_bytes_per_sec": 7e9`
	for _, tc := range []struct{ body, want string }{
		{`{` + good + `, "d2h_bytes_per_sec": 1e-300}`, "d2h_bytes_per_sec is 1e-300"},
		{`{` + good + `, "d2h_bytes_per_sec": 1e300}`, "d2h_bytes_per_sec is 1e+300"},
		{`{` + good + `, "d2h_bytes_per_sec": 5e10, "kernel_seconds": 1e9}`, "kernel_seconds"},
		{`{` + good + `, "d2h_bytes_per_sec": 5e10, "copy_compute_share": -1}`, "copy_compute_share"},
		{`{` + good + `, "d2h_bytes_per_sec": 5e10, "memory_bytes": -5}`, "memory_bytes is -5"},
		{`{` + good + `, "d2h_bytes_per_second": 5e10}`, "unknown field"},
		{`{"matmul_flops": 0, "memory_bytes_per_sec": -1}`, "memory_bytes_per_sec is -1"},
		{`null`, "matmul_flops is 0"},
	} {
		p := filepath.Join(t.TempDir(), "p.json")
		os.WriteFile(p, []byte(tc.body), 0o644)
		out, errOut, code := runCLI(t, "plan", "--budget", "3GiB", "--profile", p)
		if code != 1 || !strings.Contains(errOut, tc.want) || strings.Contains(out+errOut, "NaN") {
			t.Errorf("%s: exit %d, %s%s; want an error saying %q", tc.body, code, out, errOut, tc.want)
		}
	}
}

// ferry plan writes a policy file only when --out names one, and says
// where.
func TestPlanWritesOnlyWithOut(t *testing.T) {
	t.Chdir(t.TempDir())
	out, errOut, code := runCLI(t, "plan", "--budget", "3GiB")
	if code != 0 || !strings.Contains(out, "give --out FILE") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Fatalf("ferry plan without --out wrote %v", entries)
	}
	out, _, code = runCLI(t, "plan", "--budget", "3GiB", "--out", "p.json")
	if _, err := os.Stat("p.json"); code != 0 || err != nil || !strings.Contains(out, "policy written to p.json") {
		t.Fatalf("--out p.json: exit %d, %v:\n%s", code, err, out)
	}
}

// child runs ferry args in a child process with env added.
func child(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "FERRY_TEST_ARGS="+string(b)), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Run()
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// A library FERRY_BLAS names that does not load is an error naming it,
// from ferry doctor and from every command that opens the CPU device;
// FERRY_BLAS=off still forces the pure-Go kernel.
func TestFerryBLASThatDoesNotLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	bad := []string{"FERRY_BLAS=/nonexistent/libopenblas.so"}
	for _, args := range [][]string{{"doctor"}, {"doctor", "--json"}, {"demo", "--device", "cpu", "--layers", "2", "--width", "16", "--batch", "4", "--steps", "1"}} {
		out, errOut, code := child(t, bad, args...)
		if code != 1 || !strings.Contains(errOut, "FERRY_BLAS=/nonexistent/libopenblas.so does not load") {
			t.Errorf("ferry %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	out, errOut, code := child(t, []string{"FERRY_BLAS=off"}, "doctor")
	if code != 0 || !strings.Contains(out, "pure Go") {
		t.Errorf("FERRY_BLAS=off: exit %d\n%s%s", code, out, errOut)
	}
}

// Help names each flag's type, not a backquoted word of its usage, and
// does not add "(default -1)" after a usage that says what -1 means.
func TestHelpText(t *testing.T) {
	for _, cmd := range [][]string{{"train", "text", "-h"}, {"train", "mnist", "-h"}, {"demo", "-h"}, {"sample", "-h"}} {
		_, help, code := runCLI(t, cmd...)
		if code != 0 {
			t.Fatalf("%v: exit %d", cmd, code)
		}
		for _, bad := range []string{"(default -1)", "-policy ferry", "-checkpoint-dir ferry"} {
			if strings.Contains(help, bad) {
				t.Errorf("ferry %s: help says %q:\n%s", strings.Join(cmd, " "), bad, help)
			}
		}
	}
	_, help, _ := runCLI(t, "demo", "-h")
	for _, want := range []string{"-policy string", "(default 40)", "-capacity size"} {
		if !strings.Contains(help, want) {
			t.Errorf("ferry demo -h lacks %q:\n%s", want, help)
		}
	}
}

// A --policy that no chosen mode applies is an error, not silence.
func TestDemoPolicyNeedsAMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(p, []byte(`{"version":1,"default":"host"}`), 0o644)
	_, errOut, code := runCLI(t, "demo", "--device", "meta", "--steps", "1", "--modes", "none", "--policy", p)
	if code != 1 || !strings.Contains(errOut, "has none") {
		t.Fatalf("--modes none --policy: exit %d: %s", code, errOut)
	}
	out, errOut, code := runCLI(t, "demo", "--device", "meta", "--steps", "1", "--modes", "none,policy", "--policy", p)
	if code != 0 || !strings.Contains(out, "policy") {
		t.Fatalf("--modes none,policy --policy: exit %d: %s%s", code, out, errOut)
	}
}
