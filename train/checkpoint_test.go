package train

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
)

// trained returns a small model and an AdamW with state after one step.
func trained(t *testing.T, seed uint64) (*nn.Sequential, *optim.AdamW) {
	t.Helper()
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	a, _ := nn.NewLinear(dev, 8, 16, true, rng)
	b, _ := nn.NewLinear(dev, 16, 4, true, rng)
	m := nn.NewSequential(a, nn.ReLU{}, b)
	opt := optim.NewAdamW(m.Parameters(), 1e-2)
	x, y := ferry.Randn(dev, rng, 5, 8), ferry.Randn(dev, rng, 5, 4)
	err = ferry.Step(func(tape *ferry.Tape) error {
		if err := ferry.MSELoss(m.Forward(tape.Input(x)), tape.Input(y)).Backward(); err != nil {
			return err
		}
		return opt.Step()
	})
	if err != nil {
		t.Fatal(err)
	}
	opt.ZeroGrad()
	return m, opt
}

func values(m nn.Module) [][]float32 {
	var out [][]float32
	for _, p := range m.Parameters() {
		out = append(out, p.Float32s())
	}
	return out
}

func equalValues(a, b [][]float32) bool {
	for i := range a {
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

var id = map[string]any{"task": "test", "width": 16}

func TestCheckpointRoundTrip(t *testing.T) {
	m, opt := trained(t, 1)
	c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck"), Keep: 2}
	for step := 1; step <= 3; step++ {
		if _, err := c.Save(m, opt, Meta{Step: step, Seed: 7, Identity: id}); err != nil {
			t.Fatal(err)
		}
	}
	steps, _ := c.steps()
	if len(steps) != 2 || steps[0] != 2 || steps[1] != 3 {
		t.Fatalf("kept %v, want [2 3]", steps)
	}
	m2, opt2 := trained(t, 2)
	meta, path, err := c.Resume(m2, opt2, id)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Step != 3 || meta.Seed != 7 || filepath.Base(path) != "step-00000003" {
		t.Fatalf("resumed %+v from %s", meta, path)
	}
	if !equalValues(values(m), values(m2)) {
		t.Fatal("parameters differ after resume")
	}
	if got, want := opt2.State().Scalars, opt.State().Scalars; len(got) != len(want) {
		t.Fatalf("optimizer scalars %v, want %v", got, want)
	}
}

// Damaged or foreign checkpoints are refused with the file and the fault
// named, and the model is left as it was.
func TestCheckpointDamage(t *testing.T) {
	m, opt := trained(t, 1)
	for _, tc := range []struct {
		name, want string
		damage     func(dir string)
	}{
		{"flipped byte in the weights", "model.safetensors is damaged", func(d string) {
			p := filepath.Join(d, "model.safetensors")
			b, _ := os.ReadFile(p)
			b[len(b)-3] ^= 0x40
			os.WriteFile(p, b, 0o644)
		}},
		{"truncated optimizer state", "optimizer.safetensors is damaged", func(d string) {
			p := filepath.Join(d, "optimizer.safetensors")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}},
		{"truncated trainer.json", "trainer.json is not valid", func(d string) {
			p := filepath.Join(d, "trainer.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}},
		{"foreign trainer.json", "format", func(d string) {
			os.WriteFile(filepath.Join(d, "trainer.json"), []byte(`{"hello": "world"}`), 0o644)
		}},
		{"missing weights", "model.safetensors", func(d string) { os.Remove(filepath.Join(d, "model.safetensors")) }},
		{"a file instead of a directory", "not a directory", func(d string) {
			os.RemoveAll(d)
			os.WriteFile(d, []byte("\x89PNG\r\n"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck")}
			path, err := c.Save(m, opt, Meta{Step: 5, Identity: id})
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(path)
			m2, opt2 := trained(t, 2)
			before := values(m2)
			_, _, err = c.Resume(m2, opt2, id)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "step-00000005") {
				t.Fatalf("error %v; want it to name the checkpoint and say %q", err, tc.want)
			}
			if !equalValues(before, values(m2)) {
				t.Fatal("a refused checkpoint changed the model")
			}
		})
	}
}

// Save into a read-only directory fails clearly and leaves nothing.
func TestCheckpointReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to read-only directories")
	}
	m, opt := trained(t, 1)
	dir := t.TempDir()
	os.Chmod(dir, 0o555)
	defer os.Chmod(dir, 0o755)
	c := &Checkpointer{Dir: dir}
	if _, err := c.Save(m, opt, Meta{Step: 1, Identity: id}); err == nil {
		t.Fatal("saved into a read-only directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left %v", entries)
	}
}

// A temporary directory of a process that died is swept; one of a live
// process is not.
func TestCheckpointSweepsDeadWriters(t *testing.T) {
	m, opt := trained(t, 1)
	dir := t.TempDir()
	dead := filepath.Join(dir, ".step-00000009-tmp-999999999-123")
	live := filepath.Join(dir, ".step-00000009-tmp-1-123") // pid 1 lives
	os.Mkdir(dead, 0o755)
	os.Mkdir(live, 0o755)
	c := &Checkpointer{Dir: dir}
	if _, err := c.Save(m, opt, Meta{Step: 1, Identity: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("a dead writer's temporary directory survived")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("a live writer's temporary directory was removed")
	}
}
