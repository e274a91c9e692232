package main

import (
	"regexp"
	"strings"
	"testing"
)

// The validation line's train loss is its own step's, the one the
// progress line of that step shows: after a single step too (where it
// read 0.0000), and at every evaluation of a longer run (where it read
// the step before's).
func TestValidationLineShowsItsStepsLoss(t *testing.T) {
	data := corpus(t)
	progress := regexp.MustCompile(`(?m)^step (\d+)/\d+  loss ([0-9.]+)`)
	validation := regexp.MustCompile(`(?m)^step (\d+): train loss ([0-9.]+), val loss`)
	for _, c := range []struct {
		args  []string
		evals int // validation lines with a train loss
	}{
		{[]string{"--steps", "1", "--eval-every", "1"}, 1},
		{[]string{"--steps", "6", "--eval-every", "2", "--log-every", "1"}, 3},
	} {
		out, errOut, code := runCLI(t, smallText(data, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", c.args, code, out, errOut)
		}
		losses := map[string]string{}
		for _, m := range progress.FindAllStringSubmatch(out, -1) {
			losses[m[1]] = m[2]
		}
		lines := validation.FindAllStringSubmatch(out, -1)
		if len(lines) != c.evals {
			t.Fatalf("%v: %d validation lines with a train loss, want %d:\n%s", c.args, len(lines), c.evals, out)
		}
		for _, m := range lines {
			if m[2] != losses[m[1]] || strings.Trim(m[2], "0.") == "" {
				t.Errorf("%v: step %s's validation line says train loss %s, its progress line %s", c.args, m[1], m[2], losses[m[1]])
			}
		}
	}
}
