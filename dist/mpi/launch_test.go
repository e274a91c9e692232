package mpi

import (
	"errors"
	"strings"
	"testing"

	"ferry/dist"
)

func TestLaunched(t *testing.T) {
	for _, c := range []struct {
		rank, size string
		ok, err    bool
	}{
		{"", "", false, false},
		{"1", "2", true, false},
		{"2", "2", false, true},
		{"x", "2", false, true},
		{"0", "", false, true},
	} {
		t.Setenv("OMPI_COMM_WORLD_RANK", c.rank)
		t.Setenv("OMPI_COMM_WORLD_SIZE", c.size)
		l, ok, err := Launched()
		if ok != c.ok || (err != nil) != c.err {
			t.Errorf("rank %q size %q: Launched() = %+v, %v, %v", c.rank, c.size, l, ok, err)
		}
		if ok && (l.Rank != 1 || l.Size != 2) {
			t.Errorf("Launched() = %+v", l)
		}
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "")
	c, err := Auto()
	if err != nil || c.Size() != 1 || c.Rank() != 0 {
		t.Fatalf("Auto() without mpirun = %v, %v; want the local communicator", c, err)
	}
	c.Close()
}

func TestMissingLibrary(t *testing.T) {
	t.Setenv(libEnv, "libmpi-that-is-not-there.so.40")
	_, err := loadLib()
	if !errors.Is(err, dist.ErrUnavailable) || !strings.Contains(err.Error(), "dist/mpi unavailable because libmpi-that-is-not-there.so.40 could not be loaded") {
		t.Fatalf("loading a missing library: %v", err)
	}
	t.Log(err)
}

func TestNotOpenMPI(t *testing.T) {
	t.Setenv(libEnv, "libc.so.6") // loads, but is no MPI
	_, err := loadLib()
	if !errors.Is(err, dist.ErrUnavailable) || !strings.Contains(err.Error(), "has no symbol MPI_Init_thread: ferry needs Open MPI 4 or later") {
		t.Fatalf("loading libc as MPI: %v", err)
	}
}
