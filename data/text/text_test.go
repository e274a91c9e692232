package text

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLoadFileAndDirectory(t *testing.T) {
	d := t.TempDir()
	for i, name := range []string{"a.go", "b.txt", "c.bin", "d.md"} {
		os.WriteFile(filepath.Join(d, name), []byte(strings.Repeat(string(rune('a'+i)), 100)), 0o644)
	}
	tx, err := Load(d, Options{Limit: 1000, ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tx.Train) + string(tx.Val); got != strings.Repeat("a", 100)+strings.Repeat("b", 100)+strings.Repeat("d", 100) {
		t.Fatalf("read %q", got)
	}
	if len(tx.Val) != 30 {
		t.Fatalf("held out %d bytes, want 30", len(tx.Val))
	}
	tx, err = Load(d, Options{Limit: 1000, ValFraction: 0.1, Stride: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tx.Train) + string(tx.Val); got != strings.Repeat("a", 100)+strings.Repeat("d", 100) {
		t.Fatalf("stride 2 read %q", got)
	}
}

// Special files are refused by type, before anything blocks on them, and
// NUL-filled input is refused as not text.
func TestRefusesSpecialAndBinary(t *testing.T) {
	d := t.TempDir()
	fifo := filepath.Join(d, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	sparse := filepath.Join(d, "sparse")
	f, _ := os.Create(sparse)
	f.Truncate(1 << 20)
	f.Close()
	empty := filepath.Join(d, "empty")
	os.WriteFile(empty, nil, 0o644)
	for path, want := range map[string]string{fifo: "named pipe", "/dev/zero": "character device", sparse: "NUL", empty: "no text",
		filepath.Join(d, "missing"): "no such file"} {
		_, err := Load(path, Options{Limit: 1 << 20, ValFraction: 0.1})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", path, err, want)
		}
	}
	for _, o := range []Options{{Limit: 0, ValFraction: 0.1}, {Limit: 10, ValFraction: 0}, {Limit: 10, ValFraction: 1}} {
		if _, err := Load(sparse, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TokenEntropy is ln 4 for four equally common ids, 0 for one id, and
// UnigramEntropy's value on the same symbols.
func TestTokenEntropy(t *testing.T) {
	if h := TokenEntropy([]int32{7, 9, 50000, 3, 3, 9, 7, 50000}); math.Abs(h-math.Log(4)) > 1e-12 {
		t.Errorf("four ids: %v", h)
	}
	if h := TokenEntropy([]int32{5, 5, 5}); h != 0 {
		t.Errorf("one id: %v", h)
	}
	b := []byte("hello, world")
	ids := make([]int32, len(b))
	for i, c := range b {
		ids[i] = int32(c)
	}
	if a, u := TokenEntropy(ids), UnigramEntropy(b); math.Abs(a-u) > 1e-12 {
		t.Errorf("TokenEntropy %v, UnigramEntropy %v", a, u)
	}
}
