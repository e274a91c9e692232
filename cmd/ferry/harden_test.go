package main

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
)

// fullWriter fails every write, as /dev/full does.
type fullWriter struct{}

func (fullWriter) Write(p []byte) (int, error) { return 0, syscall.ENOSPC }

// Text output that cannot be written exits 1 with a message on stderr,
// never 0 with nothing written.
func TestTextOutputToAFullDisk(t *testing.T) {
	for _, args := range [][]string{
		{"doctor"},
		{"doctor", "--json"},
		{"demo", "--device", "meta", "--steps", "1"},
		{"plan", "--budget", "3GiB", "--out", ""},
	} {
		var errOut bytes.Buffer
		code := run(args, fullWriter{}, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), "no space left on device") {
			t.Errorf("ferry %s to a full disk: exit %d, stderr %q", strings.Join(args, " "), code, errOut.String())
		}
	}
}
