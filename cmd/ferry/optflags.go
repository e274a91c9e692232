package main

import (
	"flag"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"ferry/optim"
)

// The optimizer flags. No optimizer is named here: they come from the
// registry (optim.Names), each with its hyperparameters and defaults.

// optimizerUsage lists the registered optimizers for --optimizer's usage.
func optimizerUsage(def string) string {
	var parts []string
	for _, n := range optim.Names() {
		r, _ := optim.Lookup(n)
		parts = append(parts, n+" ("+r.Summary+")")
	}
	s := "optimizer: " + strings.Join(parts, "; ")
	if def == "" {
		s += " (default: the model family's usual one)"
	}
	return s
}

// checkOptimizer refuses a name no optimizer is registered under, with
// the list.
func checkOptimizer(name string) error {
	if _, err := optim.Lookup(name); err != nil {
		return fmt.Errorf("--optimizer: %w", err)
	}
	return nil
}

// lrUsage says what --lr defaults to for each optimizer: its recipe's
// learning rate times the command's scale.
func lrUsage(scale float64) string {
	var parts []string
	for _, n := range optim.Names() {
		r, _ := optim.Lookup(n)
		parts = append(parts, fmt.Sprintf("%s %g", n, scale*r.Hyper(true)["lr"]))
	}
	return "peak learning rate (default: the optimizer's: " + strings.Join(parts, ", ") + ")"
}

// parseOptimizerArgs reads --optimizer-args, "key=value,key=value", into
// h, refusing a key the optimizer does not take (and lr, which --lr sets).
func parseOptimizerArgs(name, args string, h map[string]float64) error {
	if strings.TrimSpace(args) == "" {
		return nil
	}
	for _, kv := range strings.Split(args, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("--optimizer-args: %q is not key=value", kv)
		}
		if k == "lr" {
			return fmt.Errorf("--optimizer-args: give the learning rate with --lr")
		}
		if _, known := h[k]; !known {
			keys := make([]string, 0, len(h))
			for key := range h {
				if key != "lr" {
					keys = append(keys, key)
				}
			}
			sort.Strings(keys)
			return fmt.Errorf("--optimizer-args: %s takes no %q (its hyperparameters: %s)", name, k, strings.Join(keys, ", "))
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("--optimizer-args: %s=%s is not a finite number", k, v)
		}
		h[k] = f
	}
	return nil
}

// defineOptimizerFlag declares --optimizer (default def; "" for the
// model family's usual one) on fs.
func defineOptimizerFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("optimizer", def, optimizerUsage(def))
}
