package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"ferry/internal/fsx"
)

// Output paths get the checks input paths get, before any work: a file
// flag (--out, --save, --log, --cpuprofile) must name a regular file or
// none yet, in a directory ferry can write; a directory flag (--plot,
// --trace, --checkpoint-dir, --disk-dir, --token-cache) a directory or
// none yet. A named pipe is refused rather than opened (opening one for
// writing waits for a reader that may never come), and so is a device:
// /dev/full would fail late, /dev/null would swallow the output without a
// word. The checks leave nothing behind.

// checkOutputFile checks that path, the value of flag, can be written as
// a regular file. makeParents says the writer makes missing directories
// above it (then the nearest existing one must be writable); otherwise
// the directory must exist.
func checkOutputFile(flag, path string, makeParents bool) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s %s is a directory; give a file path", flag, path)
	case err == nil && !st.Mode().IsRegular():
		return fmt.Errorf("%s %s is %s, not a regular file; give a file path", flag, path, fsx.Kind(st.Mode()))
	case err == nil:
		// Written in place (--log appends) or replaced: either way it
		// must open for writing. O_APPEND truncates nothing.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		f.Close()
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	dir := filepath.Dir(path)
	for makeParents {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	st, err = os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: the directory %s does not exist", flag, path, dir)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s: %s is not a directory", flag, path, dir)
	}
	if err := fsx.ProbeWritable(dir); err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return nil
}

// checkOutputDir checks that dir, the value of flag, is or can be made as
// a directory ferry can write in (fsx.CheckWritableDir, which removes
// what it made for the check). mustExist says the writer makes no
// directory (the offloader's disk tier): dir must be there already.
func checkOutputDir(flag, dir string, mustExist bool) error {
	if _, err := os.Stat(dir); mustExist && errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s does not exist; create it, or name an existing directory", flag, dir)
	}
	if err := fsx.CheckWritableDir(dir); err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

// leftovers are the output paths a command may create, noted before it
// runs: a command that fails removes those it created and left empty,
// and the empty directories above them that it created too, so that a
// failed write leaves no empty file or directory behind. What holds data
// stays.
type leftovers struct {
	paths []string // innermost first within each noted path
}

// note records path and each missing directory above it, if path does
// not exist yet.
func (l *leftovers) note(path string) {
	if path != "" {
		l.paths = append(l.paths, fsx.Missing(path)...)
	}
}

// clean removes, when *err is set, the noted paths that are now empty
// (an empty regular file, or an empty directory), innermost first.
func (l *leftovers) clean(err *error) {
	if *err == nil {
		return
	}
	for _, p := range l.paths {
		st, serr := os.Lstat(p)
		if serr != nil || st.Mode().IsRegular() && st.Size() > 0 {
			continue
		}
		if st.Mode().IsRegular() || st.IsDir() {
			os.Remove(p) // a directory only if empty
		}
	}
}
