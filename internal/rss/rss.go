// Package rss reads the process's resident memory (Linux /proc), so that
// commands can report what really sat in RAM, not only what the allocator
// counted.
package rss

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
)

// Read returns the current and peak resident set size in bytes (VmRSS and
// VmHWM).
func Read() (current, peak int64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, errors.New("resident memory is only read on Linux (/proc/self/status)")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []struct {
			key string
			dst *int64
		}{{"VmRSS:", &current}, {"VmHWM:", &peak}} {
			if strings.HasPrefix(line, k.key) {
				fields := strings.Fields(line[len(k.key):])
				if len(fields) >= 1 {
					kb, _ := strconv.ParseInt(fields[0], 10, 64)
					*k.dst = kb << 10
				}
			}
		}
	}
	return current, peak, sc.Err()
}

// ResetPeak makes the peak equal the current resident size (Linux 4.0 and
// later: writing 5 to /proc/self/clear_refs).
func ResetPeak() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}
