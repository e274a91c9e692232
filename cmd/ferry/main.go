// Command ferry runs ferry's experiments and tools. Every command prints
// for people by default and one JSON object with --json.
//
//	ferry demo         the origin experiment: memory and time per offload mode (any model: --model)
//	ferry doctor       which devices and native libraries ferry found
//	ferry plan         choose offload placements under a memory budget
//	ferry calibrate    measure this machine for the planner
//	ferry train mnist  train an MLP on MNIST
//	ferry train text   train a language model (gpt, llama) on text on this machine
//	ferry eval         a trained model's validation loss (or accuracy)
//	ferry sample       text from a trained language model
//	ferry export       a trained language model as a Hugging Face directory
//	ferry vet          ferry's static checks (go vet -vettool=$(which ferry) runs them too)
//
// Under mpirun -np N, ferry train trains data-parallel (--zero 1|2|3
// shards the optimizer state, the gradients, the parameters).
//
// Run `ferry <command> -h` for a command's flags.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	_ "ferry/device/cpu"
	_ "ferry/device/cuda"
	_ "ferry/device/meta"
)

// command is one subcommand: its flags are registered on fs, run does the
// work and writes to out.
type command struct {
	name    string
	summary string
	setup   func(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error
	// raw, if set, replaces setup: the command parses its own arguments
	// and returns the exit code (ferry vet hands them on to go vet).
	raw func(args []string, stdout, stderr io.Writer) int
}

var commands []command

func register(c command) { commands = append(commands, c) }

func main() {
	if isVetTool(os.Args[1:]) {
		vetTool() // go vet is calling: speak its protocol; does not return
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if groupNames(args[0]) != nil && (len(args) == 1 || strings.HasPrefix(args[1], "-") || args[1] == "help") {
		// "ferry train": list its subcommands.
		fmt.Fprintf(stderr, "usage: ferry %s <%s> [flags]\n\n", args[0], strings.Join(groupNames(args[0]), "|"))
		for _, c := range commands {
			if strings.HasPrefix(c.name, args[0]+" ") {
				fmt.Fprintf(stderr, "  %-12s %s\n", c.name, c.summary)
			}
		}
		if args[len(args)-1] == "-h" || args[len(args)-1] == "--help" || args[len(args)-1] == "help" {
			return 0
		}
		return 2
	}
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) < len(words) || strings.Join(args[:len(words)], " ") != c.name {
			continue
		}
		args = args[len(words)-1:]
		if c.raw != nil {
			return c.raw(args[1:], stdout, stderr)
		}
		fs := flag.NewFlagSet("ferry "+c.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		asJSON := fs.Bool("json", false, "print one JSON object instead of text for people")
		do := c.setup(fs)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "Usage of %s:\n", fs.Name())
			printFlags(stderr, fs)
		}
		if listModels(fs, args[1:], stderr) { // a bare --model: the families
			return 2
		}
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "ferry %s: unexpected arguments %q\n", c.name, fs.Args())
			return 2
		}
		if err := emptyFlags(fs); err != nil {
			fmt.Fprintf(stderr, "ferry %s: %v\n", c.name, err)
			return 2
		}
		warnOut = stderr
		signalled.Store(false)
		out := newCheckedWriter(stdout)
		err := do(out, *asJSON)
		if ferr := out.Close(); ferr != nil {
			*asJSON = false // a JSON error object would fail the same way, or wait on the same reader
			if err == nil {
				// Text written with fmt.Fprintf has its errors dropped on
				// the way: a full disk or /dev/full must not exit 0.
				err = fmt.Errorf("writing the output: %w (is the disk full, or stdout closed?)", ferr)
			} else if errors.Is(ferr, errStalled) {
				fmt.Fprintf(stderr, "ferry %s: %v\n", c.name, ferr)
			}
		}
		if err != nil {
			var reported quietError
			if *asJSON && !errors.As(err, &reported) {
				json.NewEncoder(stdout).Encode(map[string]string{"error": err.Error()})
			}
			var said saidError // a rank said it already (ranks.go)
			if !errors.As(err, &said) {
				fmt.Fprintf(stderr, "ferry %s: %v\n", c.name, err)
			}
			if errors.Is(err, demo.ErrInterrupted) {
				return 130 // as a shell reports SIGINT
			}
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "ferry: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ferry <command> [flags]   (every command takes --json)")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
}

// groupNames lists the subcommands of a command group ("train" has
// "mnist" and "text"), or nil when word is no group.
func groupNames(word string) []string {
	var names []string
	for _, c := range commands {
		if rest, ok := strings.CutPrefix(c.name, word+" "); ok {
			names = append(names, rest)
		}
	}
	return names
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonSafe(v))
}

// mib formats bytes as MiB with two decimals: what the origin user's
// script printed as "MB" (memory_allocated() / 1024**2), labelled as what
// it is.
func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// byteSize is a flag value that takes "3GiB", "512MiB", "1e9" or plain
// bytes.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseBytes(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("%q is not a size (a non-negative number with an optional unit: 3GiB, 512MiB, 1e9)", orig)
	}
	if mult == 1 && f != math.Trunc(f) {
		return 0, fmt.Errorf("%q is not a whole number of bytes (give a unit for a fraction: 1.5GiB)", orig)
	}
	if v := f * mult; v >= float64(device.MaxBytes) {
		return 0, fmt.Errorf("%q is more than any device holds (at most %s)", orig, device.FormatBytes(device.MaxBytes))
	}
	return int64(f * mult), nil
}
