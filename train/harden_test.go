package train

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ferry"
	"ferry/nn"
)

// poison sets m's first parameter to v.
func poison(t *testing.T, m nn.Module, v float32) {
	t.Helper()
	fill(m.Parameters()[0], v)
}

func fill(p *ferry.Tensor, v float32) {
	f := ferry.Full(p.Device(), v, p.Shape()...)
	p.CopyFrom(f)
	f.Release()
}

func readLatest(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, latestFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A diverged run's checkpoint is refused: --keep 1 must not delete the
// good one, and latest keeps naming it.
func TestCheckpointRefusesNonFinite(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		m, opt := trained(t, 1)
		c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck"), Keep: 1}
		if _, err := c.Save(m, opt, Meta{Step: 1, Identity: id}); err != nil {
			t.Fatal(err)
		}
		poison(t, m, v)
		_, err := c.Save(m, opt, Meta{Step: 2, Identity: id})
		if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "--lr") || !strings.Contains(err.Error(), "--clip") {
			t.Fatalf("Save of %v weights: %v; want ErrNonFinite saying to lower --lr or set --clip", v, err)
		}
		if got := readLatest(t, c.Dir); got != "step-00000001" {
			t.Fatalf("latest names %s after a refused save", got)
		}
		entries, _ := os.ReadDir(c.Dir)
		if len(entries) != 2 {
			t.Fatalf("directory holds %v, want step-00000001 and latest", entries)
		}
		m2, opt2 := trained(t, 2)
		if _, _, err := c.Resume(m2, opt2, id); err != nil {
			t.Fatalf("the good checkpoint does not resume: %v", err)
		}
	}
}

// Non-finite optimizer state is refused too.
func TestCheckpointRefusesNonFiniteOptimizerState(t *testing.T) {
	m, opt := trained(t, 1)
	for _, st := range opt.State().Tensors {
		fill(st, float32(math.Inf(-1)))
		break
	}
	c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck")}
	_, err := c.Save(m, opt, Meta{Step: 1, Identity: id})
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "optimizer state") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(c.Dir); err == nil {
		if entries, _ := os.ReadDir(c.Dir); len(entries) != 0 {
			t.Fatalf("left %v", entries)
		}
	}
}

// Pruning keeps the newest checkpoint checked finite even when newer,
// unchecked ones (an older ferry's) push it past --keep.
func TestPruneKeepsLastFinite(t *testing.T) {
	m, opt := trained(t, 1)
	c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck"), Keep: 1}
	if _, err := c.Save(m, opt, Meta{Step: 1, Identity: id}); err != nil {
		t.Fatal(err)
	}
	poison(t, m, float32(math.NaN()))
	for step := 2; step <= 3; step++ {
		if _, err := c.save(m, opt, Meta{Step: step, Identity: id}, false, true); err != nil {
			t.Fatal(err)
		}
	}
	steps, _ := c.steps()
	if len(steps) != 2 || steps[0] != 1 || steps[1] != 3 {
		t.Fatalf("kept %v, want [1 3]: the last finite checkpoint and the newest", steps)
	}
}

// trainer.json is covered by a checksum: an edited step is detected.
func TestCheckpointTrainerJSONEdited(t *testing.T) {
	m, opt := trained(t, 1)
	c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck")}
	path, err := c.Save(m, opt, Meta{Step: 5, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(path, metaFile)
	b, _ := os.ReadFile(p)
	edited := strings.Replace(string(b), `"step": 5`, `"step": 50`, 1)
	if edited == string(b) {
		t.Fatal("no step in trainer.json to edit")
	}
	os.WriteFile(p, []byte(edited), 0o644)
	if _, err := ReadMeta(path); err == nil || !strings.Contains(err.Error(), "one of them was changed after it was written") {
		t.Fatalf("edited trainer.json: %v", err)
	}
	os.WriteFile(p, b, 0o644)
	if _, err := ReadMeta(path); err != nil {
		t.Fatalf("restored trainer.json: %v", err)
	}
	os.Remove(filepath.Join(path, metaSumFile))
	if _, err := ReadMeta(path); err == nil || !strings.Contains(err.Error(), "trainer.sha256 is missing") {
		t.Fatalf("missing trainer.sha256: %v", err)
	}
}

// A second writer of a directory fails at once and names the holder.
func TestCheckpointLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	a := &Checkpointer{Dir: dir}
	unlock, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	b := &Checkpointer{Dir: dir}
	start := time.Now()
	_, err = b.Lock()
	want := "checkpoint directory " + dir + " is in use by another ferry run (pid " + strconv.Itoa(os.Getpid()) + ")"
	if !errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second Lock: %v; want %q", err, want)
	}
	if time.Since(start) > time.Second {
		t.Fatal("the second Lock waited")
	}
	unlock()
	unlock() // twice is harmless
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unlock left the empty directory Lock created: %v", err)
	}
	unlock2, err := b.Lock()
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	m, opt := trained(t, 1)
	if _, err := b.Save(m, opt, Meta{Step: 1, Identity: id}); err != nil {
		t.Fatal(err)
	}
	unlock2()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("after unlock the directory holds %v, want the checkpoint and latest", entries)
	}
}

// A lock whose holder died is taken over (flock dies with its process).
func TestCheckpointLockOfDeadProcess(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, lockFile), []byte("999999999\n"), 0o644)
	unlock, err := (&Checkpointer{Dir: dir}).Lock()
	if err != nil {
		t.Fatalf("a stale lock file blocked: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, lockFile))
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this pid", b)
	}
	unlock()
}

// A read-only or non-directory --checkpoint-dir fails before training.
func TestCheckpointCheckWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := (&Checkpointer{Dir: file}).Lock(); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file as directory: %v", err)
	}
	// /proc/self is a directory no one, root included, can add a file to.
	if st, err := os.Stat("/proc/self"); err == nil && st.IsDir() {
		if err := (&Checkpointer{Dir: "/proc/self"}).CheckWritable(); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("/proc/self: %v", err)
		}
	}
	if os.Geteuid() == 0 {
		t.Skip("root writes to read-only directories")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o555)
	defer os.Chmod(dir, 0o755)
	c := &Checkpointer{Dir: dir}
	if err := c.CheckWritable(); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("read-only directory: %v", err)
	}
	if _, err := c.Lock(); err == nil {
		t.Fatal("locked a read-only directory")
	}
	if _, err := (&Checkpointer{Dir: filepath.Join(dir, "sub")}).Lock(); err == nil || !strings.Contains(err.Error(), "cannot be created") {
		t.Fatalf("a directory that cannot be made: %v", err)
	}
}

// RemoveTemporaries, called while Saves run (a second Ctrl-C), leaves no
// temporary behind and latest loadable.
func TestRemoveTemporariesDuringSave(t *testing.T) {
	defer func() {
		temporaries.Lock()
		temporaries.closed = false
		temporaries.Unlock()
	}()
	m, opt := trained(t, 1)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 20; i++ {
		temporaries.Lock()
		temporaries.closed = false
		temporaries.Unlock()
		c := &Checkpointer{Dir: filepath.Join(t.TempDir(), "ck"), Keep: 1}
		if _, err := c.Save(m, opt, Meta{Step: 1, Identity: id}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			var err error
			for step := 2; err == nil; step++ {
				_, err = c.Save(m, opt, Meta{Step: step % 3, Identity: id}) // resaves steps too
			}
			done <- err
		}()
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		RemoveTemporaries()
		<-done // a Save caught midway fails, whichever way; later ones say errShuttingDown
		if _, err := c.Save(m, opt, Meta{Step: 9, Identity: id}); !errors.Is(err, errShuttingDown) {
			t.Fatalf("Save after RemoveTemporaries: %v", err)
		}
		entries, _ := os.ReadDir(c.Dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				t.Fatalf("left %s", e.Name())
			}
		}
		m2, opt2 := trained(t, 2)
		if _, _, err := c.Resume(m2, opt2, id); err != nil {
			t.Fatalf("latest does not load: %v", err)
		}
	}
}

// Under the lock, every other process's temporary is swept, even one
// whose pid now belongs to a live process.
func TestSweepUnderLock(t *testing.T) {
	dir := t.TempDir()
	reused := filepath.Join(dir, ".step-00000009-tmp-1-123")
	latestTmp := filepath.Join(dir, ".latest-tmp-1-55")
	os.Mkdir(reused, 0o755)
	os.WriteFile(latestTmp, nil, 0o644)
	c := &Checkpointer{Dir: dir}
	unlock, err := c.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	m, opt := trained(t, 1)
	if _, err := c.Save(m, opt, Meta{Step: 1, Identity: id}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reused, latestTmp} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s survived", filepath.Base(p))
		}
	}
}

// CompareIdentity lists every difference, not the first.
func TestCompareIdentity(t *testing.T) {
	var saved map[string]any
	json.Unmarshal([]byte(`{"lr": 0.002, "steps": 100, "clip": 0, "layers": 4, "old": true}`), &saved)
	current := map[string]any{"lr": 2e-3, "steps": 200, "clip": 1.0, "layers": 4, "new": "x"}
	diffs := CompareIdentity(saved, current)
	var keys []string
	for _, d := range diffs {
		keys = append(keys, d.Key)
	}
	if strings.Join(keys, ",") != "clip,new,old,steps" {
		t.Fatalf("differences %v", diffs)
	}
	if s := diffs[3].String(); s != "steps is 100 there, 200 here" {
		t.Fatalf("%q", s)
	}
}

// Resuming under changed settings fails and names each; --override
// accepts the named ones and records them in the next checkpoint.
func TestResumeOverride(t *testing.T) {
	m, opt := trained(t, 1)
	dir := filepath.Join(t.TempDir(), "ck")
	c := &Checkpointer{Dir: dir}
	saved := map[string]any{"task": "test", "lr": 0.002, "steps": 100, "clip": 0.0}
	if _, err := c.Save(m, opt, Meta{Step: 4, Identity: saved}); err != nil {
		t.Fatal(err)
	}
	now := map[string]any{"task": "test", "lr": 0.001, "steps": 200, "clip": 0.0}
	m2, opt2 := trained(t, 2)
	_, _, err := (&Checkpointer{Dir: dir}).Resume(m2, opt2, now)
	if err == nil || !strings.Contains(err.Error(), "lr is 0.002 there, 0.001 here") ||
		!strings.Contains(err.Error(), "steps is 100 there, 200 here") || !strings.Contains(err.Error(), "--override") {
		t.Fatalf("changed settings: %v", err)
	}
	if _, _, err := (&Checkpointer{Dir: dir, Overrides: []string{"lr"}}).Resume(m2, opt2, now); err == nil ||
		strings.Contains(err.Error(), "lr is") || !strings.Contains(err.Error(), "steps is") {
		t.Fatalf("lr overridden, steps not: %v", err)
	}
	if _, _, err := (&Checkpointer{Dir: dir, Overrides: []string{"nosuch"}}).Resume(m2, opt2, now); err == nil ||
		!strings.Contains(err.Error(), "no such setting") {
		t.Fatalf("unknown override: %v", err)
	}
	keys, _ := ParseOverrides("lr, steps")
	c2 := &Checkpointer{Dir: dir, Overrides: keys, OverrideNote: "longer run"}
	if _, _, err := c2.Resume(m2, opt2, now); err != nil {
		t.Fatal(err)
	}
	path, err := c2.Save(m2, opt2, Meta{Step: 5, Identity: now})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := ReadMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Overrides) != 2 || meta.Overrides[0].Key != "lr" || meta.Overrides[0].Step != 4 ||
		meta.Overrides[1].Saved != "100" || meta.Overrides[1].Note != "longer run" {
		t.Fatalf("recorded overrides %+v", meta.Overrides)
	}
	if _, _, err := (&Checkpointer{Dir: dir}).Resume(m2, opt2, now); err != nil {
		t.Fatalf("resuming the overridden run with its new settings: %v", err)
	}
}

// HashPath identifies content, not names.
func TestHashPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	os.WriteFile("small.txt", []byte("hello\n"), 0o644)
	a, err := HashPath("small.txt")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := HashPath("./small.txt"); a != b {
		t.Fatal("./small.txt and small.txt hash differently")
	}
	if b, _ := HashPath(filepath.Join(dir, "small.txt")); a != b {
		t.Fatal("absolute and relative paths hash differently")
	}
	os.WriteFile("small.txt", []byte("hellO\n"), 0o644)
	if b, _ := HashPath("small.txt"); a == b {
		t.Fatal("other content, same hash")
	}
	os.Mkdir("d", 0o755)
	os.WriteFile("d/a.txt", []byte("x"), 0o644)
	d1, _ := HashPath("d")
	os.Rename("d/a.txt", "d/b.txt")
	if d2, _ := HashPath("d/"); d1 == d2 {
		t.Fatal("a renamed file in a directory, same hash")
	}
	syscall.Mkfifo("fifo", 0o644)
	if _, err := HashPath("fifo"); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Fatalf("FIFO: %v", err)
	}
	if HashBytes([]byte("ab"), []byte("c")) == HashBytes([]byte("a"), []byte("bc")) {
		t.Fatal("HashBytes ignores the parts' boundaries")
	}
}
