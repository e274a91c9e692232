package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeBlocksAreThisProgram checks that README.md's Go blocks are this
// program's code: every line of each block (spacing aside) appears in
// main.go, in order. main.go builds with the module and runs below, so a
// README snippet that stops compiling fails here.
func TestReadmeBlocksAreThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	prog := normalized(string(src))
	blocks := goBlocks(string(readme))
	if len(blocks) < 2 {
		t.Fatalf("README.md has %d Go blocks; want at least the two of \"Using it\"", len(blocks))
	}
	for i, b := range blocks {
		at := 0
		for _, line := range normalized(b) {
			j := at
			for j < len(prog) && prog[j] != line {
				j++
			}
			if j == len(prog) {
				t.Errorf("README.md Go block %d: line %q is not in examples/readme/main.go after the block's previous lines; make the two agree", i+1, line)
				break
			}
			at = j + 1
		}
	}
}

// goBlocks returns the contents of the ```go fences in md.
func goBlocks(md string) []string {
	var out []string
	for {
		i := strings.Index(md, "```go\n")
		if i < 0 {
			return out
		}
		md = md[i+len("```go\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return out
		}
		out = append(out, md[:j])
		md = md[j:]
	}
}

// normalized is s's non-empty lines with runs of spaces and tabs made one
// space and the ends trimmed, so that gofmt's alignment does not count.
func normalized(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestRun(t *testing.T) {
	if err := run(3); err != nil {
		t.Fatal(err)
	}
}
