//go:build unix

package main

import (
	"syscall"
	"time"
)

// cpuSeconds is the CPU time (user and system, every thread) the process
// has used: on a machine shared with other work it measures a step's work
// where wall time measures mostly the others' load.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
