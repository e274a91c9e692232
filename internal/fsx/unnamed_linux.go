package fsx

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"
)

// Linux's ABI, the same on every architecture Go supports; package
// syscall lacks them (and ferry/train keeps golang.org/x out of its
// dependencies). oTmpfile is __O_TMPFILE with O_DIRECTORY, whose value
// is the architecture's own.
const (
	oTmpfile        = 0o20000000 | syscall.O_DIRECTORY
	atFDCWD         = -100
	atSymlinkFollow = 0x400
)

// OpenUnnamed makes a file with no name in dir (Linux's O_TMPFILE; ext4,
// xfs, btrfs and tmpfs have it): it exists only while it is open, so a
// process killed while writing it leaves nothing behind. Where the file
// system lacks it the error says so and the caller falls back to a named
// file.
func OpenUnnamed(dir string) (*os.File, error) {
	for {
		fd, err := syscall.Open(dir, oTmpfile|syscall.O_RDWR|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed ferry file)")), nil
	}
}

// linkUnnamed gives f, made by OpenUnnamed, the name path, which must not
// exist. It links through /proc/self/fd (linkat with AT_EMPTY_PATH needs a
// privilege); without /proc it fails and the caller falls back.
func linkUnnamed(f *os.File, path string) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	to, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := conn.Control(func(fd uintptr) {
		from, err := syscall.BytePtrFromString("/proc/self/fd/" + strconv.Itoa(int(fd)))
		if err != nil {
			errno = syscall.EINVAL
			return
		}
		fdcwd := atFDCWD
		_, _, errno = syscall.Syscall6(syscall.SYS_LINKAT, uintptr(fdcwd), uintptr(unsafe.Pointer(from)),
			uintptr(fdcwd), uintptr(unsafe.Pointer(to)), atSymlinkFollow, 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return &os.LinkError{Op: "link", Old: f.Name(), New: path, Err: errno}
	}
	return nil
}
