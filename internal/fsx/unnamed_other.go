//go:build !linux

package fsx

import (
	"errors"
	"os"
)

var errNoUnnamed = errors.New("files without a name (O_TMPFILE) are Linux's only")

func OpenUnnamed(dir string) (*os.File, error) { return nil, errNoUnnamed }

func linkUnnamed(f *os.File, path string) error { return errNoUnnamed }
