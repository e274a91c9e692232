package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"ferry/train"
)

// setFlags names the flags given on the command line, so that a value
// given explicitly is validated rather than mistaken for "use the default".
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
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

// interruptions returns a channel closed at the first SIGINT or SIGTERM,
// and the function that stops listening. A second signal ends the process
// at once (exit 130), for a run that cannot reach a step boundary, after
// removing the checkpoint being written (train.RemoveTemporaries): the
// previous checkpoint and latest stay as they were.
func interruptions() (<-chan struct{}, func()) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			fmt.Fprintln(os.Stderr, "ferry: interrupted; finishing at the next step boundary (again to quit now)")
			close(stop)
		case <-done:
			return
		}
		select {
		case <-sig:
			train.RemoveTemporaries()
			fmt.Fprintln(os.Stderr, "ferry: interrupted twice; quitting")
			os.Exit(130)
		case <-done:
		}
	}()
	return stop, func() {
		signal.Stop(sig)
		close(done)
	}
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
