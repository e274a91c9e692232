// Package cbuild compiles the C stand-ins that tests load in place of
// native libraries (the CUDA driver and cuBLAS, NCCL) into a shared
// library, with the system's C compiler.
package cbuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrNoCompiler is returned by Shared when there is no C compiler.
var ErrNoCompiler = errors.New("no C compiler (gcc, or $CC)")

// Shared writes source as NAME.c and header as NAME.h into dir, compiles
// them with $CC (gcc by default), -O1 -Wall -Werror and flags, and returns
// the path of libNAME.so.
func Shared(dir, name string, source, header []byte, flags ...string) (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCompiler, err)
	}
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".h"), header, 0o644); err != nil {
		return "", err
	}
	lib := filepath.Join(dir, "lib"+name+".so")
	args := append([]string{"-shared", "-fPIC", "-O1"}, flags...)
	args = append(args, "-Wall", "-Werror", "-o", lib, src, "-lpthread")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", cc, err, out)
	}
	return lib, nil
}
