package cu

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDriverBuffersAreOnTheHeap asks the compiler's escape analysis
// (go build -gcflags=-m) about the buffers whose addresses reach the driver
// only as uintptrs inside other arrays: they must be heap memory, or the
// driver may write into a stack that has moved.
func TestDriverBuffersAreOnTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with -gcflags=-m")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go build -gcflags=-m: %v", err)
	}
	found := false
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "context.go") && strings.Contains(l, "make([]byte, 16384)") {
			found = true
			if !strings.Contains(l, "escapes to heap") {
				t.Errorf("the JIT log buffer is not on the heap: %s", l)
			}
		}
	}
	if !found {
		t.Error("escape analysis said nothing of the JIT log buffer (make([]byte, 16384) in context.go); update this test")
	}
}
