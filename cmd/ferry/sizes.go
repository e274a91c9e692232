package main

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"ferry/device"
	"ferry/models"
	_ "ferry/models/all" // every family ferry ships, known to every command
	"ferry/offload"
)

// sizeFlags are the model families' sizes as flags: each size name once
// (--layers serves every family that has layers), its usage saying which
// families take it and their defaults. No family is named here: they come
// from the registry.
type sizeFlags struct {
	model    *string
	modelSet bool
	values   map[string]float64
	set      map[string]bool
	// overrides are a command's own defaults for some sizes (ferry train
	// text trains a small model whatever the family's usual size).
	overrides models.Sizes
}

// defineSizeFlags declares --model (default def) and every size of the
// families keep accepts (nil: all) on fs, but those in skip (sizes the
// command sets itself).
func defineSizeFlags(fs *flag.FlagSet, def string, keep func(models.Family) bool, overrides models.Sizes, skip ...string) *sizeFlags {
	sf := &sizeFlags{values: map[string]float64{}, set: map[string]bool{}, overrides: overrides}
	names := models.Names(keep)
	var summaries []string
	usage := map[string][]string{}
	var order []string
	for _, n := range names {
		f, _ := models.Lookup(n)
		summaries = append(summaries, n+": "+f.Summary())
		for _, z := range f.Sizes() {
			if slices.Contains(skip, z.Name) {
				continue
			}
			if _, seen := usage[z.Name]; !seen {
				order = append(order, z.Name)
			}
			d := fmt.Sprintf("%g on cpu, %g elsewhere", z.Default("cpu"), z.Default("meta"))
			if z.Default("cpu") == z.Default("meta") {
				d = fmt.Sprintf("%g", z.Default("cpu"))
			}
			if v, ok := overrides[z.Name]; ok {
				d = fmt.Sprintf("%g", v)
			}
			usage[z.Name] = append(usage[z.Name], fmt.Sprintf("%s: %s (default %s)", n, z.Usage, d))
		}
	}
	sf.model = fs.String("model", def, "model family; "+strings.Join(summaries, "; "))
	sort.Strings(order)
	for _, name := range order {
		fs.Func(name, strings.Join(usage[name], "; "), func(s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("want a number")
			}
			sf.values[name], sf.set[name] = v, true
			return nil
		})
	}
	return sf
}

// family is the family --model names.
func (sf *sizeFlags) family() (models.Family, error) {
	f, err := models.Lookup(*sf.model)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	return f, nil
}

// sizes are the family's sizes for device dev: its defaults, the
// command's overrides, then the flags given. A flag the family has no
// size for is an error naming the families that have it.
func (sf *sizeFlags) sizes(f models.Family, dev string) (models.Sizes, error) {
	kind, _, _ := device.ParseName(dev)
	s := models.Defaults(f, kind)
	for k, v := range sf.overrides {
		if _, ok := s[k]; ok {
			s[k] = v
		}
	}
	var foreign []string
	byName := map[string]models.Size{}
	for _, z := range f.Sizes() {
		byName[z.Name] = z
	}
	for k := range sf.set {
		z, ok := byName[k]
		if !ok {
			foreign = append(foreign, "--"+k)
			continue
		}
		if err := z.Check(sf.values[k]); err != nil {
			return nil, fmt.Errorf("--%s %w", k, err)
		}
		s[k] = sf.values[k]
	}
	if len(foreign) > 0 {
		sort.Strings(foreign)
		return nil, fmt.Errorf("%s: no such size for --model %s (its sizes: %s)", strings.Join(foreign, ", "), f.Name(), sizeList(f))
	}
	if err := models.Validate(f, s); err != nil {
		return nil, err
	}
	return s, nil
}

func sizeList(f models.Family) string {
	var names []string
	for _, z := range f.Sizes() {
		names = append(names, "--"+z.Name)
	}
	return strings.Join(names, ", ")
}

// sizeArgs writes s as flags, for a command to replay.
func sizeArgs(f models.Family, s models.Sizes) string {
	var parts []string
	for _, z := range f.Sizes() {
		parts = append(parts, fmt.Sprintf("--%s %g", z.Name, s[z.Name]))
	}
	return "--model " + f.Name() + " " + strings.Join(parts, " ")
}

// fromPolicy takes the model a policy was planned for when the command
// line names none of its own, and otherwise says which flags differ from
// the policy's, so that a policy never meets a model of other shapes with
// a wall of shape errors. It returns the family and sizes to run.
func (sf *sizeFlags) fromPolicy(pol *offload.Policy, path string, f models.Family, s models.Sizes, except ...string) (models.Family, models.Sizes, error) {
	if pol.Model == "" {
		return f, s, nil // written before policies named their model
	}
	pf, err := models.Lookup(pol.Model)
	if err != nil {
		return nil, nil, fmt.Errorf("--policy %s: %w", path, err)
	}
	given := len(sf.set) > 0 || sf.modelSet
	if !given {
		ps := models.Sizes{}
		for k, v := range s {
			ps[k] = v
		}
		for k, v := range pol.Sizes {
			ps[k] = v
		}
		if pf != f {
			ps = models.Sizes(pol.Sizes)
		}
		return pf, ps, models.Validate(pf, ps)
	}
	var differ []string
	if pf != f {
		differ = append(differ, "--model "+pf.Name())
	}
	for _, z := range pf.Sizes() {
		if slices.Contains(except, z.Name) {
			continue
		}
		if v, ok := pol.Sizes[z.Name]; ok && (pf != f || s[z.Name] != v) {
			differ = append(differ, fmt.Sprintf("--%s %g", z.Name, v))
		}
	}
	if len(differ) > 0 {
		return nil, nil, fmt.Errorf("--policy %s was planned for another model: pass %s (or plan for this one)", path, strings.Join(differ, " "))
	}
	return f, s, nil
}
