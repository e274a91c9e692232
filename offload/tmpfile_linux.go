package offload

import (
	"os"

	"golang.org/x/sys/unix"
)

// openTmpfile makes a file with no name in dir (O_TMPFILE).
func openTmpfile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), dir+"/(unnamed ferry offload file)"), nil
}
