// Package fsx holds the file handling every command shares: the one way
// to open a file for reading (Open: a regular file only, refused before
// anything can block on it, its size checked before it is read, its reads
// stopped by a cancelled context), writing a file atomically (so a full
// disk or a kill leaves either the old file or none, never a truncated
// one), and checking a directory before a long run writes there.
package fsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// Kind names a file that is not a regular file or a directory, for
// people: "a named pipe (FIFO)", "a socket", "a character device", …
func Kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// ReadLimited reads path whole, refusing more than limit bytes and
// anything but a regular file (see Open), before reading a byte of it.
func ReadLimited(path string, limit int64) ([]byte, error) {
	return ReadFile(context.Background(), path, limit)
}

// WriteAtomic writes path through write: into a temporary file beside it,
// synced, then renamed over path, and the directory synced. On any error
// the temporary file is removed and path is left as it was. A path that
// exists and is not a regular file (/dev/stdout, a pipe) is written in
// place: renaming over it would replace the device.
func WriteAtomic(path string, write func(w io.Writer) error) (err error) {
	if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
		if st.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return nil
	}
	dir := filepath.Dir(path)
	// The data is written into a file with no name where the file system
	// allows (OpenUnnamed), so a kill while it is written and synced
	// leaves nothing; it is named (tmpName) only just before the rename.
	tmp, err := OpenUnnamed(dir)
	unnamed := err == nil
	if !unnamed {
		tmp, err = os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
		if err != nil {
			return err
		}
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			if !unnamed {
				os.Remove(tmpName)
			}
		}
	}()
	if err = write(tmp); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// The temporary is private; the result is an ordinary file, readable
	// as os.Create's would be (before the umask).
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if unnamed {
		if tmpName, err = nameUnnamed(tmp, dir, path); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		unnamed = false // it has a name now, removed on error like any
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmpName, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		if serr := d.Sync(); serr != nil && !errors.Is(serr, os.ErrInvalid) {
			d.Close()
			return fmt.Errorf("syncing %s: %w", dir, serr)
		}
		d.Close()
	}
	return nil
}

// link is linkUnnamed; tests replace it to take the copying fallback.
var link = linkUnnamed

// nameUnnamed links tmp, a synced file from OpenUnnamed, into dir under a
// fresh temporary name beside path, and returns the name. Where linking
// fails (no /proc) it copies tmp into a named temporary instead, synced.
func nameUnnamed(tmp *os.File, dir, path string) (string, error) {
	for range 100 {
		name := filepath.Join(dir, "."+filepath.Base(path)+".tmp-"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		err := link(tmp, name)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	named, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Seek(0, io.SeekStart)
	if err == nil {
		_, err = io.Copy(named, tmp)
	}
	if err == nil {
		err = named.Chmod(0o644)
	}
	if err == nil {
		err = named.Sync()
	}
	if cerr := named.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(named.Name())
		return "", err
	}
	return named.Name(), nil
}

// CreateUnlinked makes a file in dir that a kill cannot leave behind: one
// with no name (OpenUnnamed), or, where the file system has none, one
// made as os.CreateTemp(dir, pattern) makes it and removed at once. name
// is the file's path where that removal failed (the caller's to remove
// later), else "".
func CreateUnlinked(dir, pattern string) (f *os.File, name string, err error) {
	if f, err := OpenUnnamed(dir); err == nil {
		return f, "", nil
	}
	if f, err = os.CreateTemp(dir, pattern); err != nil {
		return nil, "", err
	}
	if os.Remove(f.Name()) != nil {
		name = f.Name()
	}
	return f, name, nil
}

// CheckWritableDir makes dir (and its parents) if needed and checks that
// a file can be created in it, so that a read-only directory fails before
// training rather than at the first save. Every directory it made for the
// check, dir and the parents above it, is removed again, innermost first
// and only while empty: the writer makes them when it first writes, so a
// run that fails before leaves no empty directory behind, and a failed
// check leaves none either.
func CheckWritableDir(dir string) error {
	st, err := os.Stat(dir)
	if err == nil && !st.IsDir() {
		what := "a file"
		if !st.Mode().IsRegular() {
			what = Kind(st.Mode())
		}
		return fmt.Errorf("%s exists and is %s, not a directory", dir, what)
	}
	made := Missing(dir) // what MkdirAll will make
	defer func() {
		for _, d := range made {
			os.Remove(d) // only if empty
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return ProbeWritable(dir)
}

// ProbeWritable checks that a file can be created in the existing
// directory dir, by creating one (without a name where the file system
// allows) and removing it again.
func ProbeWritable(dir string) error {
	// A file with no name first: a kill during the probe leaves nothing.
	if f, err := OpenUnnamed(dir); err == nil {
		return f.Close()
	}
	f, err := os.CreateTemp(dir, ".ferry-write-test-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Missing is path and each directory above it that does not exist yet,
// innermost first, up to the first that exists (or cannot be seen): what
// a MkdirAll of path would make. Empty when path exists.
func Missing(path string) []string {
	var missing []string
	for p := filepath.Clean(path); ; {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return missing
		}
		missing = append(missing, p)
		up := filepath.Dir(p)
		if up == p {
			return missing
		}
		p = up
	}
}
