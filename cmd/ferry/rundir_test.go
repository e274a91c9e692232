package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A run without --checkpoint-dir clears what runs killed before their
// first save left in runs/: a run directory holding only a lock file that
// no process holds, over a minute old. A held lock, a directory with
// anything else in it, a fresh lock and a directory of another name stay.
func TestTrainSweepsDeadRunDirs(t *testing.T) {
	saved := runsDir
	runsDir = filepath.Join(t.TempDir(), "runs")
	defer func() { runsDir = saved }()
	old := time.Now().Add(-2 * time.Minute)
	mk := func(name string, files map[string]time.Time) string {
		dir := filepath.Join(runsDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, mtime := range files {
			p := filepath.Join(dir, f)
			if err := os.WriteFile(p, []byte("12345\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dead := mk("text-20250101-000000", map[string]time.Time{".lock": old})
	dead2 := mk("mnist-20250101-000000-2", map[string]time.Time{".lock": old})
	held := mk("text-20250101-000001", map[string]time.Time{".lock": old})
	f, err := os.OpenFile(filepath.Join(held, ".lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	busy := mk("text-20250101-000002", map[string]time.Time{".lock": old, "notes.txt": old})
	fresh := mk("text-20250101-000003", map[string]time.Time{".lock": time.Now()})
	other := mk("mine", map[string]time.Time{".lock": old})

	if _, errOut, code := runCLI(t, smallText(corpus(t), "--steps", "1")...); code != 0 {
		t.Fatalf("train: %s", errOut)
	}
	for _, d := range []string{dead, dead2} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", filepath.Base(d), err)
		}
	}
	for _, d := range []string{held, busy, fresh, other} {
		if _, err := os.Stat(filepath.Join(d, ".lock")); err != nil {
			t.Errorf("%s was touched: %v", filepath.Base(d), err)
		}
	}
}

// A resume reads the data by content, not by path: the same text moved
// elsewhere resumes without --override; other text is refused, naming it.
func TestResumeAfterMovingTheData(t *testing.T) {
	dir := t.TempDir()
	first := corpus(t)
	ck := filepath.Join(dir, "ck")
	if _, errOut, code := runCLI(t, smallText(first, "--steps", "4", "--stop-after", "2", "--checkpoint-dir", ck)...); code != 0 {
		t.Fatalf("train: %s", errOut)
	}
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "moved.txt")
	if err := os.WriteFile(moved, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, smallText(moved, "--steps", "4", "--stop-after", "1", "--checkpoint-dir", ck, "--resume")...); code != 0 {
		t.Fatalf("resume with the text moved: %s", errOut)
	}
	other := filepath.Join(dir, "other.txt")
	if err := os.WriteFile(other, append(b, []byte("and more text\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, smallText(other, "--steps", "4", "--checkpoint-dir", ck, "--resume")...)
	if code == 0 || !strings.Contains(errOut, "data is") {
		t.Errorf("resume on other text: exit %d: %s", code, errOut)
	}
}
