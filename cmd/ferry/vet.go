package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"ferry/vet"

	"golang.org/x/tools/go/analysis/unitchecker"
)

func init() {
	register(command{name: "vet", summary: "check Go code for ferry mistakes, such as x.To(dev) as a statement (go vet)", raw: runVet})
}

// isVetTool reports whether go vet, not a person, started this process:
// `go vet -vettool=ferry` runs the tool with -V=full (its version, for the
// build cache), with -flags (its flags, as JSON), and then once per package
// with flags and a .cfg file describing the package. A person's command
// line starts with a command name, never with a flag.
func isVetTool(args []string) bool {
	if len(args) == 0 {
		return false
	}
	if args[0] == "-V=full" || args[0] == "-flags" {
		return true
	}
	last := args[len(args)-1]
	if !strings.HasSuffix(last, ".cfg") {
		return false
	}
	for _, a := range args[:len(args)-1] {
		if !strings.HasPrefix(a, "-") {
			return false
		}
	}
	return true
}

// vetTool answers go vet with ferry's analyzers. It reads os.Args itself
// and exits.
func vetTool() { unitchecker.Main(vet.Analyzer) }

const vetUsage = `usage: ferry vet [--json] [packages]

Runs go vet with ferry's checks, and only those, over the packages
(default ./...), in the current module:

  go vet -vettool=<this ferry binary> [packages]

ferrydiscard reports a call whose new tensor is thrown away: used as a
statement, assigned to _, deferred or started with go. Above all x.To(dev)
as a statement, the mistake ferry started from: To returns a copy on dev
and does not move x, and the copy leaks. To move saved tensors off the
device, push an offloader's hooks on the tape (tape.WithHooks(off.Hooks(),
f), off from offload.New); to move x yourself, write y := x.To(dev) and
release x.

The exit code is go vet's: 0 when nothing is reported, non-zero when
something is or when the packages do not load or build (go vet says which on
stderr). ferry vet needs the go command on PATH. The same checks run as go vet -vettool=$(which ferry) ./...

  --json   print one JSON object instead of text: go vet -json's objects
           merged, {"<package>": {"<check>": [{"posn", "end", "message"}]}},
           with packages that have nothing to report left out, and an
           "error" key when go vet fails. Exit 0 even when something is
           reported, as go vet -json does.
`

func runVet(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ferry vet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, vetUsage) }
	asJSON := fs.Bool("json", false, "pass -json to go vet")
	// Packages and flags may come in any order: ferry vet ./... --json.
	var pkgs []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pkgs = append(pkgs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	fail := func(err error) int {
		if *asJSON {
			json.NewEncoder(stdout).Encode(map[string]string{"error": err.Error()})
		}
		fmt.Fprintf(stderr, "ferry vet: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		return fail(fmt.Errorf("cannot find this program's path to give go vet: %v", err))
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fail(fmt.Errorf("ferry vet runs go vet, and the go command is not on PATH: %v", err))
	}
	vetArgs := []string{"vet", "-vettool=" + self}
	if *asJSON {
		vetArgs = append(vetArgs, "-json")
	}
	cmd := exec.Command(goCmd, append(vetArgs, pkgs...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	var vetJSON bytes.Buffer
	if *asJSON {
		cmd.Stdout = &vetJSON
	}
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() > 0) {
		return fail(fmt.Errorf("go vet: %v", err)) // could not start, or killed by a signal
	}
	if *asJSON {
		merged, ok := mergeVetJSON(vetJSON.Bytes())
		if !ok {
			stdout.Write(vetJSON.Bytes()) // not what we expected: pass it on as it came
		} else {
			if err != nil {
				merged["error"] = json.RawMessage(jsonString("go vet failed (" + err.Error() + "); its messages are on stderr"))
			}
			writeJSON(stdout, merged)
		}
	}
	if err != nil {
		return exit.ExitCode() // go vet has said why, on stderr
	}
	return 0
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// mergeVetJSON turns go vet -json's stream of objects, one per package,
// into one object, leaving out packages with nothing to report.
func mergeVetJSON(b []byte) (map[string]json.RawMessage, bool) {
	merged := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var obj map[string]json.RawMessage
		if err := dec.Decode(&obj); err == io.EOF {
			return merged, true
		} else if err != nil {
			return nil, false
		}
		for pkg, v := range obj {
			merged[pkg] = v
		}
	}
}
