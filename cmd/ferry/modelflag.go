package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"ferry/models"
)

// listModels answers a command line that ends in --model with no value,
// which the flag package meets with "flag needs an argument" and every
// flag's usage: it writes the model families the command takes (those
// its --model usage names), one a line with its summary, and says true.
// The run still fails (exit 2): no family was given. A trailing --model
// that is the value of the flag before it (--prompt --model) is left to
// the flag package.
func listModels(fs *flag.FlagSet, args []string, w io.Writer) bool {
	if len(args) == 0 {
		return false
	}
	if last := args[len(args)-1]; last != "-model" && last != "--model" {
		return false
	}
	f := fs.Lookup("model")
	if f == nil {
		return false
	}
	if len(args) >= 2 {
		prev := strings.TrimLeft(args[len(args)-2], "-")
		if strings.HasPrefix(args[len(args)-2], "-") && !strings.Contains(prev, "=") {
			if pf := fs.Lookup(prev); pf != nil {
				if b, ok := pf.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
					return false // --model is that flag's value
				}
			}
		}
	}
	fmt.Fprintf(w, "%s: --model needs a model family, one of:\n", fs.Name())
	for _, name := range models.Names(nil) {
		fam, err := models.Lookup(name)
		if err == nil && strings.Contains(f.Usage, name+": ") {
			fmt.Fprintf(w, "  %-8s %s\n", name, fam.Summary())
		}
	}
	fmt.Fprintf(w, "(each family's sizes are flags: %s -h lists them)\n", fs.Name())
	return true
}
