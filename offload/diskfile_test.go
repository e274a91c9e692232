package offload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiskDirProblemsAreFoundEarly(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	os.WriteFile(file, nil, 0o644)
	if err := probeDir(file); err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("regular file: %v", err)
	}
	if err := probeDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing directory accepted")
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	if os.Getuid() != 0 { // root writes anywhere
		if err := probeDir(ro); err == nil {
			t.Error("read-only directory accepted")
		}
	}
	if err := probeDir(dir); err != nil {
		t.Errorf("writable directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("the probe left files: %v", ents)
	}
}

func TestStaleFilesOfDeadProcessesAreSwept(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, offloadFilePrefix+"999999999-1.bin") // no such pid
	mine := filepath.Join(dir, offloadFilePrefix+"1-2.bin")         // init lives
	other := filepath.Join(dir, "ferry-offload-notapid.bin")
	for _, p := range []string{dead, mine, other} {
		os.WriteFile(p, nil, 0o600)
	}
	sweepStale(dir)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Error("a dead process's file survived")
	}
	for _, p := range []string{mine, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed", p)
		}
	}
}

func TestDiskFilesHaveNoName(t *testing.T) {
	dir := t.TempDir()
	f, err := createUnlinked(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("an open disk-tier file is visible: %v", ents)
	}
}
