package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestIsVetTool(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-V=full"}, true},
		{[]string{"-flags"}, true},
		{[]string{"go-build1/b001/vet.cfg"}, true},
		{[]string{"-json", "-ferrydiscard", "go-build1/b001/vet.cfg"}, true},
		{nil, false},
		{[]string{"vet"}, false},
		{[]string{"vet", "./..."}, false},
		{[]string{"plan", "--profile", "my.cfg"}, false}, // a person's command line starts with a command
		{[]string{"-h"}, false},
	} {
		if got := isVetTool(c.args); got != c.want {
			t.Errorf("isVetTool(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestVetHelp(t *testing.T) {
	_, errOut, code := runCLI(t, "vet", "--help")
	if code != 0 || !strings.Contains(errOut, "usage: ferry vet") || !strings.Contains(errOut, "offload.New") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	_, errOut, code = runCLI(t, "vet", "--no-such-flag")
	if code != 2 {
		t.Fatalf("unknown flag: exit %d, want 2:\n%s", code, errOut)
	}
}

// TestVetFindsTheOriginMistake builds the ferry binary, writes a module
// that uses ferry (through a replace directive to this checkout) with the
// origin mistake in one package and the right way in another, and runs
// `ferry vet` on each, as a user would.
func TestVetFindsTheOriginMistake(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the ferry binary and runs go vet over a module (about 5-15 s); skipped with -short")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("ferry vet runs go vet, and the go command is not on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ferry")
	build := exec.Command(goCmd, "build", "-o", bin, "./cmd/ferry")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	mod := t.TempDir()
	// The module needs ferry's own requirements and sums: copy them, and
	// point ferry at this checkout.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gomod = regexp.MustCompile(`(?m)^module ferry$`).ReplaceAll(gomod, []byte("module vetprobe"))
	gomod = append(gomod, "\nrequire ferry v0.0.0\n\nreplace ferry => "+root+"\n"...)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod": string(gomod),
		"go.sum": string(gosum),
		"bad/bad.go": `package bad

import (
	"ferry"
	"ferry/device"
)

func Offload(prev *ferry.Tensor, host device.Device) {
	prev.To(host)
}
`,
		"good/good.go": `package good

import (
	"ferry"
	"ferry/device"
)

func Move(x *ferry.Tensor, host device.Device) *ferry.Tensor {
	y := x.To(host)
	x.Release()
	return y.SetName("moved")
}
`,
	}
	for name, text := range files {
		path := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vet := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, append([]string{"vet"}, args...)...)
		cmd.Dir = mod
		// Everything needed is in the module cache already: ferry built.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOTOOLCHAIN=local")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("ferry vet %q: %v", args, err)
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}

	_, errOut, code := vet("./bad")
	if code == 0 {
		t.Errorf("ferry vet ./bad: exit 0, want non-zero\n%s", errOut)
	}
	for _, want := range []string{"bad.go:9:2:", "prev.To returns a copy and does not move prev", "offload.New"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("ferry vet ./bad: output lacks %q:\n%s", want, errOut)
		}
	}

	out, errOut, code := vet("./good")
	if code != 0 || strings.Contains(errOut, "ferrydiscard") || strings.Contains(errOut, ".go:") {
		t.Errorf("ferry vet ./good: exit %d, want 0 and nothing reported\n%s%s", code, out, errOut)
	}

	out, errOut, code = vet("./...", "--json")
	var got map[string]map[string][]struct{ Posn, Message string }
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("ferry vet --json: exit %d, err %v:\n%s%s", code, err, out, errOut)
	}
	if d := got["vetprobe/bad"]["ferrydiscard"]; len(d) != 1 || !strings.Contains(d[0].Message, "prev.To returns a copy") {
		t.Errorf("ferry vet --json: %+v", got)
	}
	if _, ok := got["vetprobe/good"]; ok {
		t.Errorf("ferry vet --json reports the good package: %+v", got)
	}

	out, _, code = vet("--json", "./nosuchdir")
	var failed struct{ Error string }
	if err := json.Unmarshal([]byte(out), &failed); err != nil || code == 0 || failed.Error == "" {
		t.Errorf("ferry vet --json ./nosuchdir: exit %d, want non-zero and an error key:\n%s", code, out)
	}
}
