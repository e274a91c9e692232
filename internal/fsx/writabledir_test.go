package fsx

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// CheckWritableDir leaves no directory it made, parents included, whether
// the check passes or fails, and names what a non-directory is.
func TestCheckWritableDirLeavesNoParents(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritableDir(filepath.Join(dir, "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind after a passing check: %v", ents)
	}
	// A failing check: a/b made, then c cannot be, since "x" below it is a file.
	os.MkdirAll(filepath.Join(dir, "keep"), 0o755)
	os.WriteFile(filepath.Join(dir, "keep", "x"), nil, 0o644)
	if err := CheckWritableDir(filepath.Join(dir, "keep", "x", "y")); err == nil {
		t.Error("a directory under a file: no error")
	}
	if err := CheckWritableDir(filepath.Join(dir, "p", "q")); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "keep" {
		t.Errorf("left behind: %v (want only keep, which was there before)", ents)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	if err := CheckWritableDir(fifo); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("a FIFO: %v", err)
	}
}
