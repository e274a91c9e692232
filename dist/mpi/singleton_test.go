package mpi_test

import (
	"strings"
	"testing"

	"ferry/dist/internal/mpirun"
	"ferry/dist/mpi"
)

// Started without mpirun, MPI runs as a singleton of one rank.
func TestSingleton(t *testing.T) {
	if mpirun.IsChild(t.Name()) {
		c, err := mpi.Open()
		if err != nil {
			t.Fatal(err)
		}
		buf := []float32{1, 2}
		if err := c.AllReduce(buf).Synchronize(); err != nil || buf[1] != 2 {
			t.Fatalf("all_reduce on one rank: %v, %v", buf, err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("singleton: rank %d of %d", c.Rank(), c.Size())
		return
	}
	out, ok := mpirun.Exec(t, t.Name(), "OMPI_COMM_WORLD_RANK=", "OMPI_COMM_WORLD_SIZE=")
	if !ok || !strings.Contains(out, "singleton: rank 0 of 1") {
		t.Fatalf("singleton failed:\n%s", out)
	}
}

// The environment says two ranks but MPI finds one: Open refuses, rather
// than let each process train alone.
func TestWrongLaunch(t *testing.T) {
	if mpirun.IsChild(t.Name()) {
		_, err := mpi.Open()
		t.Logf("Open: %v", err)
		if err == nil {
			t.Fatal("Open succeeded")
		}
		return
	}
	out, ok := mpirun.Exec(t, t.Name(), "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2")
	if want := "mpirun announced rank 0 of 2, but MPI_COMM_WORLD is rank 0 of 1"; !ok || !strings.Contains(out, want) {
		t.Fatalf("want %q:\n%s", want, out)
	}
	t.Log(strings.TrimSpace(out))
}
