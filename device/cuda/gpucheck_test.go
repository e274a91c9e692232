package cuda_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUCheckScriptWithStubs runs scripts/gpu-check.sh run against stub
// binaries: nvidia-smi, ldconfig (no cuBLAS registered), python3 (whose
// torch wheel holds a libcublas.so.12) and the built ferry and cuda.test,
// which record the environment they were started with. Every step must run,
// see the cuBLAS directory on LD_LIBRARY_PATH (the script once lost it in a
// pipeline's subshell), and land in the summary.
func TestGPUCheckScriptWithStubs(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	repo := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	script, err := os.ReadFile("../../scripts/gpu-check.sh")
	must(err)
	must(os.MkdirAll(filepath.Join(repo, "scripts"), 0o755))
	must(os.WriteFile(filepath.Join(repo, "scripts", "gpu-check.sh"), script, 0o755))
	wheel := filepath.Join(repo, "wheel", "torch", "lib")
	must(os.MkdirAll(wheel, 0o755))
	must(os.WriteFile(filepath.Join(wheel, "libcublas.so.12"), nil, 0o644))
	bin := filepath.Join(repo, "bin")
	must(os.MkdirAll(bin, 0o755))
	envLog := filepath.Join(repo, "env.log")
	stub := func(dir, name, body string) {
		must(os.MkdirAll(dir, 0o755))
		must(os.WriteFile(filepath.Join(dir, name), []byte("#!/usr/bin/env bash\n"+body+"\n"), 0o755))
	}
	stub(bin, "nvidia-smi", `echo "NVIDIA H200, 143771 MiB, 550.54"`)
	stub(bin, "ldconfig", `exit 0`)
	// python3: the find_cublas query prints the wheel's directory; torch
	// with CUDA is absent (step c is skipped).
	stub(bin, "python3", `if [ "${1:-}" = "-" ]; then echo "`+wheel+`"; exit 0; fi; exit 1`)
	record := `echo "$(basename "$0") $* LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>` + envLog + `; echo ok`
	stub(filepath.Join(repo, "out"), "ferry", record)
	stub(filepath.Join(repo, "out"), "cuda.test", record)
	cmd := exec.Command("bash", "scripts/gpu-check.sh", "run")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "OUT="+filepath.Join(repo, "result"), "LD_LIBRARY_PATH=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-check.sh run: %v\n%s", err, out)
	}
	log, err := os.ReadFile(envLog)
	must(err)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if len(lines) < 6 {
		t.Fatalf("only %d steps ran:\n%s", len(lines), log)
	}
	for _, l := range lines {
		if !strings.Contains(l, "LD_LIBRARY_PATH="+wheel) {
			t.Errorf("a step ran without the wheel's cuBLAS on LD_LIBRARY_PATH: %s", l)
		}
	}
	summary, err := os.ReadFile(filepath.Join(repo, "result", "summary.txt"))
	must(err)
	for _, want := range []string{"cuBLAS: using " + wheel, "== 0-probe: ok", "== a-correctness: ok", "== b-demo: ok", "c-torch: skipped", "== d-bandwidth: ok"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
}
