//go:build !linux

package offload

import (
	"errors"
	"os"
)

func openTmpfile(dir string) (*os.File, error) { return nil, errors.New("no O_TMPFILE here") }
