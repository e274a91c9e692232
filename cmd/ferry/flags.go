package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"ferry/device"
	"ferry/offload"
	"ferry/train"
)

// setFlags names the flags given on the command line, so that a value
// given explicitly is validated rather than mistaken for "use the default".
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// emptyMeans names the string flags for which an empty value means
// something of its own, and what: every other string flag given as ""
// (--data "$UNSET") is refused by emptyFlags rather than taken as absent,
// which would quietly run on the default.
var emptyMeans = map[string]string{
	"prompt": "no prompt: the text starts after a newline",
}

// emptyFlags refuses the first string flag set explicitly to "" that
// emptyMeans does not name. Only plain string flags are checked: a size,
// a number or a --model size flag given as "" already fails to parse.
func emptyFlags(fs *flag.FlagSet) error {
	var bad *flag.Flag
	fs.Visit(func(f *flag.Flag) {
		if bad != nil || f.Value.String() != "" {
			return
		}
		if _, ok := emptyMeans[f.Name]; ok {
			return
		}
		if kind, _ := flag.UnquoteUsage(&flag.Flag{Value: f.Value}); kind == "string" {
			bad = f
		}
	})
	if bad == nil {
		return nil
	}
	if bad.DefValue != "" {
		return fmt.Errorf("--%s is empty: give a value, or leave the flag out for its default, %s", bad.Name, bad.DefValue)
	}
	return fmt.Errorf("--%s is empty: give a value, or leave the flag out (`%s -h` says what the command does without it)", bad.Name, fs.Name())
}

// warnOut is where warn writes: the stderr run was given.
var warnOut io.Writer = os.Stderr

// warn prints a one-line warning about a flag that does nothing in this
// run but is not wrong in itself (one command line for mpirun and
// without it). A flag that cannot apply is an error instead.
func warn(format string, args ...any) {
	fmt.Fprintf(warnOut, "ferry: warning: "+format+"\n", args...)
}

// positive checks that each given flag among values is at least 1.
func positive(set map[string]bool, values map[string]int) error {
	var names []string
	for n := range values {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if set[n] && values[n] < 1 {
			return fmt.Errorf("--%s must be a positive integer, got %d", n, values[n])
		}
	}
	return nil
}

// interruptions turns SIGINT, SIGTERM, SIGHUP and SIGPIPE into a request
// to stop at the next step boundary (the run then checkpoints, prints its
// summary and exits 130): a closed terminal or a reader of stdout or
// stderr that went away (ferry train … | head) ends a run the way Ctrl-C
// does, with its checkpoint, instead of killing it. While a command
// loads (a checkpoint, --init-from, data: before its first step) the
// request stops the load itself: reads through the context of
// interruptContext end at once. A second signal of the first three
// removes the checkpoint being written and the checkpoint directory's
// lock (train.RemoveTemporaries) and quits at once. grace, if positive,
// quits the same way when the step boundary has not come that long after
// the first signal: for a command with nothing to save (ferry demo),
// whose step may be held up (a fault-injection delay). SIGQUIT removes
// the temporaries too, then dies as Go does on it, with its goroutine
// dump. The handler never waits on output: its messages are written on
// their own goroutine, so a full pipe on stderr cannot hold a signal up,
// and stdout stops holding anyone up once it is signalled (noteSignal).
func interruptions(grace time.Duration) (<-chan struct{}, func()) {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGQUIT)
	stop := make(chan struct{})
	done := make(chan struct{})
	say := func(msg string) <-chan struct{} {
		written := make(chan struct{})
		go func() {
			fmt.Fprintln(os.Stderr, msg) // may block on a full pipe: nobody waits for it
			close(written)
		}()
		return written
	}
	quitNow := func(msg string) {
		train.RemoveTemporaries()
		select { // a moment for the message, never more
		case <-say(msg):
		case <-time.After(200 * time.Millisecond):
		}
		os.Exit(130)
	}
	go func() {
		select {
		case s := <-sig:
			if s == syscall.SIGQUIT {
				quit()
			}
			close(stop)
			noteSignal()
			if s == syscall.SIGPIPE {
				break
			}
			if stepping.Load() {
				say("ferry: interrupted; finishing at the next step boundary (again to quit now)")
			} else {
				say("ferry: interrupted; stopping (again to quit now)")
			}
		case <-done:
			return
		}
		var late <-chan time.Time
		if grace > 0 {
			late = time.After(grace)
		}
		for {
			select {
			case s := <-sig:
				if s == syscall.SIGQUIT {
					quit()
				}
				if s == syscall.SIGPIPE {
					continue // a reader went away again: already stopping
				}
				quitNow("ferry: interrupted twice; quitting")
			case <-late:
				quitNow(fmt.Sprintf("ferry: no step boundary %v after the signal; quitting", grace))
			case <-done:
				return
			}
		}
	}()
	return stop, func() {
		signal.Stop(sig)
		close(done)
	}
}

// stepping says a training loop has begun its steps: the first signal
// then finishes the step under way rather than a load (interruptions'
// message says which).
var stepping atomic.Bool

// quit ends the process on SIGQUIT: the temporary checkpoint and the
// lock go first, then SIGQUIT is raised again with Go's own handling
// restored, which prints every goroutine's stack and exits 2.
func quit() {
	train.RemoveTemporaries()
	signal.Reset(syscall.SIGQUIT)
	syscall.Kill(os.Getpid(), syscall.SIGQUIT)
	select {} // the runtime's handler ends the process
}

// quietError is an error already reported in the JSON output: run prints
// it on stderr but writes no second JSON object.
type quietError struct{ error }

func (e quietError) Unwrap() error { return e.error }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// printFlags is flag.PrintDefaults with two differences. The placeholder
// after a flag's name is its type ("string", "int", "size"), never a
// backquoted word of its usage (flag takes `ferry plan` in "a file from
// `ferry plan`" for the name of the value). And "(default X)" is left out
// where the usage already says what the default is: "(default a tenth of
// the steps)" is what a -1 sentinel means, and "(default -1)" after it
// only confuses.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		b.WriteString("  -" + f.Name)
		name, _ := flag.UnquoteUsage(&flag.Flag{Value: f.Value}) // the type's name alone
		if _, ok := f.Value.(*byteSize); ok {
			name = "size"
		}
		if name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 { // a one-letter boolean: usage on the same line
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(f.Usage, "\n", "\n    \t"))
		zero := f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "0s"
		// A usage that says its default covers a sentinel (-1) and a
		// value it names; "(default 40)" after "gpt: default 12" still
		// tells the MLP's.
		said := strings.Contains(strings.ToLower(f.Usage), "default") &&
			(strings.HasPrefix(f.DefValue, "-") || strings.Contains(f.Usage, f.DefValue))
		if !zero && !said {
			if name == "string" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

// precisionUsage is the --precision flag's help, shared by the commands.
const precisionUsage = "element type of the model's matrix products: fp32, or bf16 (mixed precision: bfloat16 products and saved activations, float32 parameters, gradients and optimizer state)"

// parsePrecision reads --precision: fp32 or bf16 (and their long names).
func parsePrecision(s string) (device.DType, error) {
	dt, err := parseFloatType("--precision", s)
	if dt == device.Float16 {
		return 0, fmt.Errorf("--precision %s: float16 is not supported; bf16 needs no loss scaling and trains as well (--precision bf16)", s)
	}
	return dt, err
}

// parseFloatType reads flag's value s: fp32 or bf16 (and their long names);
// device.Float16 for a float16 name, which no caller takes.
func parseFloatType(flag, s string) (device.DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fp32", "float32", "f32":
		return device.Float32, nil
	case "bf16", "bfloat16":
		return device.BFloat16, nil
	case "fp16", "float16", "f16", "half":
		return device.Float16, fmt.Errorf("%s %s: float16 is not supported; want fp32 or bf16", flag, s)
	}
	return 0, fmt.Errorf("%s %q: want fp32 or bf16", flag, s)
}

// policyPrecision is the precision a run with policy pol (file path) takes:
// the one the plan recorded, which holds for its figures (none recorded
// is fp32, as offload.Policy says); a --precision given (flagSet, spelled
// flag) that contradicts it is an error, whichever way round.
func policyPrecision(path string, pol *offload.Policy, flagSet bool, flag string, cur device.DType) (device.DType, error) {
	recorded := pol.Precision
	if recorded == "" {
		recorded = "fp32" // a policy that records none was planned at fp32
	}
	pp, err := parsePrecision(recorded)
	if err != nil { // (LoadPolicy refuses other spellings)
		return cur, fmt.Errorf("--policy %s: %w", path, err)
	}
	if flagSet && pp != cur {
		return cur, fmt.Errorf("--policy %s was planned at --precision %s; drop --precision %s, or plan again with it", path, recorded, flag)
	}
	return pp, nil
}

// policyStateOn is where policy pol planned the optimizer's state: "host",
// or "device" (recorded as "" or "device").
func policyStateOn(pol *offload.Policy) string {
	if pol.OptimizerState == "host" {
		return "host"
	}
	return "device"
}
