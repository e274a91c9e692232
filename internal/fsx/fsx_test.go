package fsx

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadLimited(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := ReadLimited("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "character device") {
			t.Errorf("/dev/zero: %v", err)
		}
	}
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("abc"), 0o644)
	if b, err := ReadLimited(p, 3); err != nil || string(b) != "abc" {
		t.Errorf("got %q, %v", b, err)
	}
	if _, err := ReadLimited(filepath.Dir(p), 3); err == nil {
		t.Error("a directory was read")
	}
}

func TestWriteAtomicKeepsOldFileOnError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.json")
	if err := WriteAtomic(p, func(w io.Writer) error { _, err := w.Write([]byte("old")); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	err := WriteAtomic(p, func(w io.Writer) error { w.Write([]byte("partial")); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("file now %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

func TestWriteAtomicToADevice(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	err := WriteAtomic("/dev/full", func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
	if err == nil {
		t.Error("writing to /dev/full succeeded")
	}
	if st, err := os.Stat("/dev/full"); err != nil || st.Mode().IsRegular() {
		t.Fatalf("/dev/full was replaced by a file (%v); restore it with mknod -m 666 /dev/full c 1 7", err)
	}
}

// A FIFO is refused at once, not waited on.
func TestReadLimitedFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadLimited(p, 100); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "named pipe") {
			t.Fatalf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadLimited waited on a FIFO")
	}
}

// CheckWritableDir accepts a new directory and removes it again, refuses
// a file and (unless root) a read-only directory.
func TestCheckWritableDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritableDir(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory made for the check stayed: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if err := CheckWritableDir(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file: %v", err)
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	if err := CheckWritableDir(ro); os.Geteuid() != 0 && (err == nil || !strings.Contains(err.Error(), "not writable")) {
		t.Errorf("a read-only directory: %v", err)
	}
	if ents, _ := os.ReadDir(ro); len(ents) != 0 {
		t.Errorf("left in %s: %v", ro, ents)
	}
}

// While WriteAtomic's data is written and synced, the directory holds
// no new name where the file system has files without one: a kill then
// leaves nothing behind. The result is the data, readable by others.
func TestWriteAtomicNamesNothingWhileWriting(t *testing.T) {
	dir := t.TempDir()
	skipWithoutUnnamed(t, dir)
	p := filepath.Join(dir, "out.json")
	var seen []string
	err := WriteAtomic(p, func(w io.Writer) error {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			seen = append(seen, e.Name())
		}
		_, err := w.Write([]byte("data"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 0 {
		t.Errorf("named while writing: %v", seen)
	}
	checkWrittenAlone(t, p, "data")
}

// ProbeWritable leaves nothing in a writable directory and refuses a
// read-only one.
func TestProbeWritableLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := ProbeWritable(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	if os.Geteuid() != 0 {
		if err := ProbeWritable(ro); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only directory: %v", err)
		}
	}
}

// Where the unnamed file cannot be linked (no /proc), WriteAtomic copies
// it into a named temporary and still leaves only the result.
func TestWriteAtomicWithoutLinking(t *testing.T) {
	dir := t.TempDir()
	skipWithoutUnnamed(t, dir)
	linked := link
	link = func(*os.File, string) error { return errors.New("no /proc") }
	defer func() { link = linked }()
	p := filepath.Join(dir, "out.json")
	if err := WriteAtomic(p, func(w io.Writer) error { _, err := w.Write([]byte("copied")); return err }); err != nil {
		t.Fatal(err)
	}
	checkWrittenAlone(t, p, "copied")
}

// skipWithoutUnnamed skips a test where dir's file system has no files
// without a name (O_TMPFILE).
func skipWithoutUnnamed(t *testing.T, dir string) {
	t.Helper()
	f, err := OpenUnnamed(dir)
	if err != nil {
		t.Skipf("no files without a name here: %v", err)
	}
	f.Close()
}

// checkWrittenAlone checks that p holds want, readable by others, and is
// the only file in its directory.
func checkWrittenAlone(t *testing.T, p, want string) {
	t.Helper()
	if b, _ := os.ReadFile(p); string(b) != want {
		t.Errorf("file is %q, want %q", b, want)
	}
	if st, _ := os.Stat(p); st == nil || st.Mode().Perm() != 0o644 {
		t.Errorf("stat %v", st)
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}
