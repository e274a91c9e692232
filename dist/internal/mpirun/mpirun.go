// Package mpirun runs a test of the calling test binary as the ranks of an
// Open MPI job, for tests of ferry's MPI backend and what is built on it.
package mpirun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ferry/dist"
	"ferry/dist/mpi"
)

// ChildEnv is set, in the ranks' environment, to the name of the test
// they run.
const ChildEnv = "FERRY_MPI_CHILD"

// IsChild reports whether this process is a rank started by Run for the
// test name.
func IsChild(name string) bool { return os.Getenv(ChildEnv) == name }

// Skip skips t, with a message saying why, when Open MPI (its library or
// mpirun) is absent.
func Skip(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skipf("Open MPI is absent (no mpirun on PATH: %v); install the libopenmpi3 and openmpi-bin packages to run this test", err)
	}
	if err := mpi.Available(); err != nil {
		if errors.Is(err, dist.ErrUnavailable) {
			t.Skipf("%v", err)
		}
		t.Fatal(err)
	}
	return path
}

// Run starts np copies of this test binary under mpirun, each running only
// the test name (with ChildEnv set to name), and returns their combined
// output. It fails t if the job fails or takes longer than timeout.
func Run(t *testing.T, np int, name string, timeout time.Duration) string {
	t.Helper()
	out, err := start(t, np, name, timeout)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// RunFailing is Run for a job that must fail: it returns the job's output
// and error, failing t if the job succeeds or hangs past timeout.
func RunFailing(t *testing.T, np int, name string, timeout time.Duration) (string, error) {
	t.Helper()
	out, err := start(t, np, name, timeout)
	if err == nil {
		t.Fatalf("the job succeeded; it should have failed:\n%s", out)
	}
	return out, err
}

func start(t *testing.T, np int, name string, timeout time.Duration) (string, error) {
	t.Helper()
	path := Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"--oversubscribe", "--allow-run-as-root", "-np", fmt.Sprint(np),
		// Shared memory and loopback TCP only: tests run in containers
		// without InfiniBand, and Open MPI would otherwise warn about it.
		"--mca", "btl", "self,vader,tcp", "--mca", "pml", "ob1",
		"-x", ChildEnv + "=" + name,
		os.Args[0], "-test.run=^" + name + "$", "-test.v", "-test.count=1"}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+name)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun %s: no result after %v (a rank hung?)\n%s", strings.Join(args, " "), timeout, out)
	}
	if err != nil {
		return string(out), fmt.Errorf("mpirun %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// Exec runs the test name of this test binary once, without mpirun, with
// ChildEnv and the extra environment variables env ("K=V") set, and returns
// its output and whether it exited with status 0.
func Exec(t *testing.T, name string, env ...string) (string, bool) {
	t.Helper()
	Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), ChildEnv+"="+name), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s: no result after a minute\n%s", name, out)
	}
	return string(out), err == nil
}
