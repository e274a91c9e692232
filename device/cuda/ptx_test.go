package cuda_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ferry/device/cuda/kernels"
)

// The committed PTX is what the committed sources compile to, and it
// assembles for the GPUs ferry targets without spilling registers.
// TestPTXSourcesUnchanged checks the first from the record go generate
// keeps; TestPTXUpToDate and TestPTXAssemblesWithoutSpills need CUDA
// 11.8's tools (the committed PTX is theirs, see ptx.go) and skip, saying
// why, without them.

// generateCommand is the shell command of ptx.go's go:generate line, as go
// generate runs it.
func generateCommand(t *testing.T) string {
	return strings.ReplaceAll(nvccCommand(t), "${DOLLAR}", "$")
}

// nvccCommand is that command as ptx.go writes it.
func nvccCommand(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("ptx.go")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kernels.GenerateCommand(src)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// No .cu file, and no header one includes, changed since its PTX was
// compiled, and every PTX file is the one compiled (Note [PTX sums] in
// kernels/ptxsum.go). Unlike TestPTXUpToDate this needs no nvcc, so it
// runs everywhere, CI and -short included.
func TestPTXSourcesUnchanged(t *testing.T) {
	files, err := kernels.ReadSources("kernels")
	if err != nil {
		t.Fatal(err)
	}
	record, err := os.ReadFile(filepath.Join("kernels", kernels.PTXSumFile))
	if err != nil {
		t.Fatalf("%v: run go generate ./device/cuda", err)
	}
	for _, p := range kernels.CheckPTXSum(files, nvccCommand(t), record) {
		t.Error(p)
	}
}

func needTool(t *testing.T, name, version string) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s on PATH", name)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Skipf("%s is not CUDA %s (the committed PTX is its output): %s", name, version, bytes.TrimSpace(out))
	}
}

// Regenerating the PTX in a scratch copy of kernels/ gives the committed
// files byte for byte, and every source has its PTX and every PTX its
// source.
func TestPTXUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("short: recompiles every kernel with nvcc")
	}
	needTool(t, "nvcc", "release 11.8")
	dir := t.TempDir()
	kdir := filepath.Join(dir, "kernels")
	if err := os.Mkdir(kdir, 0o755); err != nil {
		t.Fatal(err)
	}
	sources, _ := filepath.Glob("kernels/*.cu")
	headers, _ := filepath.Glob("kernels/*.cuh")
	for _, f := range append(sources, headers...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", generateCommand(t))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go:generate command: %v\n%s", err, out)
	}
	committed, _ := filepath.Glob("kernels/*.ptx")
	if len(committed) != len(sources) {
		t.Errorf("%d .ptx files for %d .cu files", len(committed), len(sources))
	}
	for _, src := range sources {
		ptx := strings.TrimSuffix(src, ".cu") + ".ptx"
		want, err := os.ReadFile(filepath.Join(dir, ptx))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(ptx)
		if err != nil {
			t.Errorf("%s: %v (run go generate ./device/cuda)", ptx, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what %s compiles to: run go generate ./device/cuda", ptx, src)
		}
	}
}

// Every kernel assembles for Ampere (sm_80) and Hopper (sm_90) with no
// spill to local memory.
func TestPTXAssemblesWithoutSpills(t *testing.T) {
	if testing.Short() {
		t.Skip("short: assembles every kernel with ptxas")
	}
	needTool(t, "ptxas", "11.8")
	files, _ := filepath.Glob("kernels/*.ptx")
	entry := regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	spill := regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	for _, f := range files {
		for _, arch := range []string{"sm_80", "sm_90"} {
			out, err := exec.Command("ptxas", "-arch="+arch, "-v", "-o", os.DevNull, f).CombinedOutput()
			if err != nil {
				t.Errorf("ptxas -arch=%s %s: %v\n%s", arch, f, err, out)
				continue
			}
			kernel, n := "", 0
			for _, line := range strings.Split(string(out), "\n") {
				if m := entry.FindStringSubmatch(line); m != nil {
					kernel = m[1]
					n++
				}
				if m := spill.FindStringSubmatch(line); m != nil && (m[1] != "0" || m[2] != "0") {
					t.Errorf("%s: %s spills on %s: %s", f, kernel, arch, strings.TrimSpace(line))
				}
			}
			if n == 0 {
				t.Errorf("ptxas -arch=%s %s compiled no entry function:\n%s", arch, f, out)
			}
		}
	}
}
