package offload

import (
	"os"
	"syscall"
)

// oTmpfile is Linux's O_TMPFILE: __O_TMPFILE (0o20000000 on every
// architecture Go supports) with O_DIRECTORY, whose value is the
// architecture's own (package syscall has it; it lacks O_TMPFILE).
const oTmpfile = 0o20000000 | syscall.O_DIRECTORY

// openTmpfile makes a file with no name in dir (O_TMPFILE).
func openTmpfile(dir string) (*os.File, error) {
	for {
		fd, err := syscall.Open(dir, oTmpfile|syscall.O_RDWR|syscall.O_CLOEXEC, 0o600)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return os.NewFile(uintptr(fd), dir+"/(unnamed ferry offload file)"), nil
	}
}
