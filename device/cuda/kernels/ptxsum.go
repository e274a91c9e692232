package kernels

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Note [PTX sums]. The PTX is committed, and compiling it needs nvcc,
// which CI does not have: without a record of what each PTX file was
// compiled from, a .cu file (or a header it includes) edited without
// regenerating would pass every test, and a GPU would run the old code.
// So `go generate ./device/cuda` writes, after nvcc, the file PTXSumFile
// beside the sources: the command it compiled with and the SHA-256 of
// every .cu, .cuh and .ptx file. CheckPTXSum, in a test that needs no
// nvcc (and runs under -short), recomputes the hashes: any byte changed
// in a .cu file or in a header it includes, directly or not, makes its
// PTX stale; a .ptx file that is not what was recorded was edited by
// hand or regenerated without the record.

// PTXSumFile is the record's name, in this directory.
const PTXSumFile = "ptx.sum"

var includeRE = regexp.MustCompile(`(?m)^\s*#\s*include\s*"([^"]+)"`)

// Includes lists the headers (files of this directory, #include "…")
// that source name includes, directly or through another header, in the
// order first met; a header that is not in files is listed too, so that
// a check reports it missing.
func Includes(files map[string][]byte, name string) []string {
	var out []string
	seen := map[string]bool{name: true}
	var walk func(string)
	walk = func(f string) {
		for _, m := range includeRE.FindAllSubmatch(files[f], -1) {
			h := string(m[1])
			if seen[h] {
				continue
			}
			seen[h] = true
			out = append(out, h)
			walk(h)
		}
	}
	walk(name)
	return out
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// PTXSum returns the record of files (every .cu, .cuh and .ptx file of
// this directory, by name) compiled with command (the go:generate
// command of device/cuda/ptx.go).
func PTXSum(files map[string][]byte, command string) []byte {
	var b bytes.Buffer
	b.WriteString("# The sources each PTX file was compiled from (Note [PTX sums] in ptxsum.go).\n")
	b.WriteString("# Written by `go generate ./device/cuda` after nvcc; never edit it by hand.\n")
	fmt.Fprintf(&b, "command %s\n", command)
	var names []string
	for n := range files {
		if strings.HasSuffix(n, ".cu") || strings.HasSuffix(n, ".cuh") || strings.HasSuffix(n, ".ptx") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sum(files[n]), n)
	}
	return b.Bytes()
}

// CheckPTXSum compares files and command with the record sum (PTXSum's
// output) and returns one line per problem, saying what to do: each PTX
// file whose .cu file or included header changed, a .cu file without a
// record or a PTX file, a PTX file that is not the one recorded.
func CheckPTXSum(files map[string][]byte, command string, record []byte) []string {
	const regen = "run go generate ./device/cuda (it needs CUDA 11.8's nvcc; see device/cuda/ptx.go)"
	want := map[string]string{}
	var recorded string
	sc := bufio.NewScanner(bytes.NewReader(record))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "command "):
			recorded = strings.TrimPrefix(line, "command ")
		default:
			h, name, ok := strings.Cut(line, "  ")
			if !ok {
				return []string{fmt.Sprintf("%s: cannot read line %q: %s", PTXSumFile, line, regen)}
			}
			want[name] = h
		}
	}
	var problems []string
	if recorded != command {
		problems = append(problems, fmt.Sprintf("the PTX was compiled with %q, ptx.go now says %q: %s", recorded, command, regen))
	}
	changed := func(name string) bool {
		b, ok := files[name]
		return !ok || want[name] != sum(b)
	}
	var sources []string
	for n := range files {
		if strings.HasSuffix(n, ".cu") {
			sources = append(sources, n)
		}
	}
	sort.Strings(sources)
	for _, src := range sources {
		ptx := strings.TrimSuffix(src, ".cu") + ".ptx"
		if _, ok := files[ptx]; !ok {
			problems = append(problems, fmt.Sprintf("%s has no %s: %s", src, ptx, regen))
			continue
		}
		if _, ok := want[src]; !ok {
			problems = append(problems, fmt.Sprintf("%s is not in %s (a new kernel source): %s", src, PTXSumFile, regen))
			continue
		}
		var stale []string
		for _, f := range append([]string{src}, Includes(files, src)...) {
			if changed(f) {
				stale = append(stale, f)
			}
		}
		if len(stale) > 0 {
			problems = append(problems, fmt.Sprintf("%s is stale: %s changed since it was compiled: %s", ptx, strings.Join(stale, ", "), regen))
		}
		if changed(ptx) {
			problems = append(problems, fmt.Sprintf("%s is not the PTX %s records (edited by hand, or compiled without updating the record): %s", ptx, PTXSumFile, regen))
		}
	}
	for n := range files {
		if strings.HasSuffix(n, ".ptx") {
			if _, ok := files[strings.TrimSuffix(n, ".ptx")+".cu"]; !ok {
				problems = append(problems, fmt.Sprintf("%s has no source %s: delete it, or restore the source", n, strings.TrimSuffix(n, ".ptx")+".cu"))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// ReadSources reads every .cu, .cuh and .ptx file of dir (this directory
// on disk), by name: what PTXSum records and CheckPTXSum checks.
func ReadSources(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, pat := range []string{"*.cu", "*.cuh", "*.ptx"} {
		names, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, err
			}
			files[filepath.Base(n)] = b
		}
	}
	return files, nil
}

var generateRE = regexp.MustCompile(`(?m)^//go:generate sh -c "(.*)"$`)

// GenerateCommand returns the nvcc command of device/cuda/ptx.go's
// go:generate line (its source ptxGo), as written there.
func GenerateCommand(ptxGo []byte) (string, error) {
	m := generateRE.FindSubmatch(ptxGo)
	if m == nil {
		return "", fmt.Errorf("ptx.go has no go:generate line of the form sh -c \"…\"")
	}
	return string(m[1]), nil
}
