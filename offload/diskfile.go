package offload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"ferry/internal/fsx"
)

// Files of the disk tier never outlive the process. Where the file system
// has O_TMPFILE (Linux: ext4, xfs, btrfs, tmpfs) a file is made without a
// name, so there is nothing to leave behind even if the process is killed.
// Elsewhere it is created under a name that carries the process id and
// unlinked at once; a kill in between can leave an empty named file, which
// the next Offloader on that directory removes (sweepStale) once its
// process is gone.

// offloadFilePrefix starts every named disk-tier file: ferry-offload-PID-….
const offloadFilePrefix = "ferry-offload-"

func createUnlinked(dir string) (*diskFile, error) {
	f, name, err := fsx.CreateUnlinked(dir, offloadFilePrefix+strconv.Itoa(os.Getpid())+"-*.bin")
	if err != nil {
		return nil, err
	}
	return &diskFile{f: f, name: name}, nil
}

// probeDir checks that dir is a directory in which a file can be created,
// written and removed, so that a read-only or missing directory is found
// when the Offloader is made, not in backward after a whole forward pass.
func probeDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("offload: disk tier directory %q: %w; create it or choose another DiskDir", dir, err)
	case !st.IsDir():
		return fmt.Errorf("offload: disk tier directory %q is a file, not a directory; choose a directory for DiskDir", dir)
	}
	f, err := createUnlinked(dir)
	if err != nil {
		return fmt.Errorf("offload: cannot create files in the disk tier directory %q: %w; make it writable or choose another DiskDir", dir, err)
	}
	_, werr := f.f.Write(make([]byte, 4096))
	cerr := f.close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("offload: cannot write to the disk tier directory %q: %w; free space or choose another DiskDir", dir, err)
	}
	return nil
}

// sweepStale removes named disk-tier files in dir left by processes that
// no longer run (killed between creating and unlinking a file).
func sweepStale(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, offloadFilePrefix+"*.bin"))
	for _, n := range names {
		rest := strings.TrimPrefix(filepath.Base(n), offloadFilePrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if processGone(pid) {
			os.Remove(n)
		}
	}
}

// processGone reports whether no process pid exists.
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// DiskFile is a file made as the disk tier makes its files (created
// unlinked), for calibration: plan's Calibrate times the fixed cost of a
// transfer on it. In a training step the tier writes over the spare files
// of the step before (disk.go), so a round trip on one DiskFile, again
// and again, is what each saved tensor costs after the first step.
type DiskFile struct{ f *diskFile }

// CreateDiskFile makes a DiskFile in dir.
func CreateDiskFile(dir string) (*DiskFile, error) {
	f, err := createUnlinked(dir)
	if err != nil {
		return nil, err
	}
	return &DiskFile{f}, nil
}

// RoundTrip writes b at the file's start and reads it back into b, as the
// tier writes a tensor out and reads it back.
func (d *DiskFile) RoundTrip(b []byte) error {
	if _, err := d.f.f.WriteAt(b, 0); err != nil {
		return err
	}
	return readFull(d.f, b)
}

// Close closes the file; its bytes go with it.
func (d *DiskFile) Close() error { return d.f.close() }
