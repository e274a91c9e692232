package bpe

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where the cache file of a text goes is refused at once, naming
// it: reading it, or writing the ids into it, would block.
func TestCachedEncodeRefusesAFIFO(t *testing.T) {
	body := []byte("package main\n")
	cacheDir := t.TempDir()
	fifo := filepath.Join(cacheDir, CacheKey(body))
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := CachedEncodeBytes(body, cacheDir); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "named pipe") {
			t.Fatalf("got %v; want an error naming the FIFO", err)
		}
	case <-time.After(5 * time.Second):
		os.Remove(fifo)
		t.Fatal("blocked on the FIFO")
	}
}
