package fsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Every file ferry reads goes through Open (or ReadFile, which uses it):
// checkpoints, safetensors files, Hugging Face directories, policies,
// profiles, matmul tables, token caches, datasets. A read test
// (TestNoOtherReadPath) keeps it so.
//
// Open refuses what is not a regular file before anything can block on
// it, in the way systemd opens untrusted paths: the path is stat'ed (a
// FIFO, a socket, a device or a directory is refused without being
// opened: opening a FIFO waits for a writer, and opening some devices
// has effects), then opened with O_NONBLOCK, and the opened descriptor is
// fstat'ed again, so that a file swapped in between is refused too. Only
// then is O_NONBLOCK cleared. A symbolic link to a regular file is
// followed; a link that loops is refused by name. The size comes from the
// descriptor and is checked against the caller's limit before one byte is
// read, so a 1 TiB sparse file costs nothing.
//
// Reads through the returned File happen in blocks of at most readBlock
// bytes, and the context is checked before each: a signal that cancels
// it stops a 64 GiB read within one block.

// ErrNotRegular is wrapped by Open's error for a path that is not a
// regular file (or a link to one).
var ErrNotRegular = errors.New("not a regular file")

// readBlock is the most one Read asks of the kernel, so that a cancelled
// context is seen within one block.
const readBlock = 4 << 20

// File is a regular file opened for reading by Open. Its Read checks the
// context given to Open before every block.
type File struct {
	f    *os.File
	ctx  context.Context
	path string
	size int64
}

// Open opens path for reading: a regular file, or a symbolic link to one,
// of at most limit bytes (limit < 0: any size). Anything else is refused
// with an error that names path and what it is, without blocking: a named
// pipe, a socket, a device, a directory, a link that loops, a file larger
// than limit. Missing files give an error wrapping fs.ErrNotExist. Reads
// stop with an error wrapping context.Cause(ctx) once ctx is done.
func Open(ctx context.Context, path string, limit int64) (*File, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := cause(ctx); err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, statError(path, err)
	}
	if err := checkRegular(path, st); err != nil {
		return nil, err
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, statError(path, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	fst, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkRegular(path, fst); err != nil {
		f.Close()
		return nil, err
	}
	if !os.SameFile(st, fst) {
		f.Close()
		return nil, fmt.Errorf("%s was replaced while it was being opened; try again", path)
	}
	// A regular file ignores O_NONBLOCK; cleared all the same, so that
	// nothing downstream sees a descriptor it did not expect.
	if err := syscall.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if limit >= 0 && fst.Size() > limit {
		f.Close()
		return nil, fmt.Errorf("%s is %d bytes, more than the %d this file may hold: is it the right file?", path, fst.Size(), limit)
	}
	return &File{f: f, ctx: ctx, path: path, size: fst.Size()}, nil
}

// Stat is os.Stat with Open's errors for people: a link that loops is
// named so.
func Stat(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, statError(path, err)
	}
	return st, nil
}

// checkRegular refuses what is not a regular file, naming it.
func checkRegular(path string, st fs.FileInfo) error {
	m := st.Mode()
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return notRegular(path + " is a directory, not a file")
	}
	return notRegular(fmt.Sprintf("%s is %s, not a regular file; give a file", path, Kind(m)))
}

// notRegular is an error for people that wraps ErrNotRegular.
type notRegular string

func (e notRegular) Error() string        { return string(e) }
func (e notRegular) Is(target error) bool { return target == ErrNotRegular }

// statError says what is wrong with a path that cannot be stat'ed or
// opened, for people: a link that loops is named so, rather than "too
// many levels of symbolic links". The error wraps the system's (so
// errors.Is(err, fs.ErrNotExist) holds for a missing file).
func statError(path string, err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%s is a symbolic link that loops (or a chain of too many links): %w", path, syscallErr(err))
	}
	if errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.EOPNOTSUPP) { // a socket
		if st, lerr := os.Lstat(path); lerr == nil && !st.Mode().IsRegular() {
			return notRegular(fmt.Sprintf("%s is %s, not a regular file; give a file", path, Kind(st.Mode())))
		}
	}
	return err
}

func syscallErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Name is the path given to Open.
func (f *File) Name() string { return f.path }

// Size is the file's size when it was opened.
func (f *File) Size() int64 { return f.size }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Read reads up to len(p) bytes, at most one block, after checking the
// context. An error says which file.
func (f *File) Read(p []byte) (int, error) {
	if err := cause(f.ctx); err != nil {
		return 0, fmt.Errorf("reading %s: %w", f.path, err)
	}
	if len(p) > readBlock {
		p = p[:readBlock]
	}
	if err := testDelay(f.ctx, f.path); err != nil {
		return 0, fmt.Errorf("reading %s: %w", f.path, err)
	}
	n, err := f.f.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("reading %s: %w", f.path, syscallErr(err))
	}
	return n, err
}

// cause is ctx's cause once ctx is done (a signal handler says why with
// context.WithCancelCause), else nil.
func cause(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// ReadFile reads the regular file at path whole (see Open), refusing one
// larger than limit bytes (≥ 0) before reading it.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("fsx.ReadFile %s: no limit given", path)
	}
	f, err := Open(ctx, path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The size was checked; a file that grows meanwhile is cut at the
	// limit and refused.
	b := make([]byte, 0, f.size+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, fmt.Errorf("%s grew past the %d bytes it may hold while it was read", path, limit)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// The test delay: FERRY_TEST_READ_DELAY=DURATION[:NAME] makes every
// block read through Open wait DURATION first (only of files whose base
// name is NAME, when given), and say so once on stderr ("ferry: test read
// delay: reading PATH"), so that a test can interrupt a command in the
// middle of a slow load. The wait ends early when the context is done.
// It is for tests and scripts/abuse.sh; nothing else sets it.
var delay struct {
	once sync.Once
	d    time.Duration
	name string
	said sync.Map
}

func testDelay(ctx context.Context, path string) error {
	delay.once.Do(func() {
		v := os.Getenv("FERRY_TEST_READ_DELAY")
		if v == "" {
			return
		}
		ds, name, _ := strings.Cut(v, ":")
		d, err := time.ParseDuration(ds)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "ferry: FERRY_TEST_READ_DELAY=%q is not a duration; ignored\n", v)
			return
		}
		delay.d, delay.name = d, name
	})
	if delay.d == 0 || (delay.name != "" && filepath.Base(path) != delay.name) {
		return nil
	}
	if _, said := delay.said.LoadOrStore(path, true); !said {
		fmt.Fprintf(os.Stderr, "ferry: test read delay: reading %s\n", path)
	}
	t := time.NewTimer(delay.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
