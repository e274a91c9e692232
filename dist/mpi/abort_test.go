package mpi_test

import (
	"strings"
	"testing"
	"time"

	"ferry/dist"
	"ferry/dist/internal/mpirun"
	"ferry/dist/mpi"
)

// A collective that never completes ends the job through the watchdog:
// of 3 ranks, ranks 0 and 1 all-reduce and rank 2 never joins (it
// sleeps, outside MPI). Rank 1's watchdog fires after a second and
// aborts from its own goroutine while rank 1's MPI thread is still
// blocked in the all-reduce; mpirun then kills rank 0 (blocked, not
// watched) and rank 2 (asleep). The job ends within seconds, non-zero,
// saying which collective waited.
func TestWatchdogAbortsTheJob(t *testing.T) {
	if mpirun.IsChild("TestWatchdogAbortsChild") {
		t.Skip("a rank does not start ranks")
	}
	t0 := time.Now()
	out, err := mpirun.RunFailing(t, 3, "TestWatchdogAbortsChild", time.Minute)
	took := time.Since(t0)
	t.Logf("the job ended after %v: %v\n%s", took.Round(time.Millisecond), err, out)
	// mpirun prints MPI_Abort's help text ("MPI_ABORT was invoked");
	// now and then, with ranks dying at once, Open MPI's mpirun fails to
	// unpack that message and logs the failure from show_help.c instead
	// (seen once in CI: "ORTE_ERROR_LOG: Data unpack would read past end
	// of buffer in file ../../../orte/util/show_help.c").
	aborted := strings.Contains(out, "MPI_ABORT") || strings.Contains(out, "show_help.c")
	if !strings.Contains(out, "rank 1 of 3: all_reduce (collective 1 of this rank") || !aborted {
		t.Errorf("the output names no stuck all_reduce of rank 1, or no MPI_Abort")
	}
	if strings.Contains(out, "all-reduce returned") || strings.Contains(out, "rank 2 woke") {
		t.Errorf("a rank went on")
	}
	if took > 30*time.Second {
		t.Errorf("the job took %v to end; the watchdog fires after 1 s", took)
	}
}

func TestWatchdogAbortsChild(t *testing.T) {
	if !mpirun.IsChild("TestWatchdogAbortsChild") {
		t.Skip("runs only as a rank of TestWatchdogAbortsTheJob")
	}
	c, err := mpi.Open()
	if err != nil {
		t.Fatal(err)
	}
	switch c.Rank() {
	case 2:
		time.Sleep(45 * time.Second)
		t.Fatal("rank 2 woke")
	case 1:
		w := dist.Watch(c, time.Second, nil) // nil: report and Abort(1)
		w.AllReduce(make([]float32, 8)).Synchronize()
	default:
		c.AllReduce(make([]float32, 8)).Synchronize()
	}
	t.Fatal("all-reduce returned")
}
