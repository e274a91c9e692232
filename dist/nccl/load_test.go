package nccl

import (
	"errors"
	"strings"
	"testing"

	"ferry/dist"
)

func TestMissingLibrary(t *testing.T) {
	t.Setenv(libEnv, "libnccl-that-is-not-there.so.2")
	_, err := load()
	if !errors.Is(err, dist.ErrUnavailable) || !strings.HasPrefix(err.Error(), "dist/nccl unavailable because libnccl-that-is-not-there.so.2 could not be loaded") {
		t.Fatalf("loading a missing library: %v", err)
	}
	t.Log(err)
}
