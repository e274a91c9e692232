package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The committed copies are what opgen writes: edit the lists in main.go and
// run `go generate ./device`, never the generated files.
func TestGeneratedFilesUpToDate(t *testing.T) {
	fs, err := files()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range fs {
		got, err := os.ReadFile(filepath.Join("..", "..", path))
		if err != nil {
			t.Errorf("%v (run go generate ./device)", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("device/%s differs from what opgen writes: run go generate ./device", path)
		}
	}
}
