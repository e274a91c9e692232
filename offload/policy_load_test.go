package offload_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/offload"
)

// A policy file's training-state fields are checked when it is read: a
// misspelt placement, serial gradient copies without gradients in host
// memory, state kept on (or visiting) the device for some parameters when
// it is not on the host for the rest, or a visiting state's lead without
// visiting state, is an error that names the field, not a silent
// default.
func TestLoadPolicyChecksTheTrainingState(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{`{"version": 2, "default": "keep", "gradients": "hots"}`, `gradients "hots"`},
		{`{"version": 2, "default": "keep", "optimizer_state": "gpu"}`, `optimizer_state "gpu"`},
		{`{"version": 2, "default": "keep", "serial_gradient_copies": true}`, "serial_gradient_copies"},
		{`{"version": 2, "default": "keep", "gradients": "device", "serial_gradient_copies": true}`, "serial_gradient_copies"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "gradients": "host", "serial_gradient_copies": true}`, ""},
		{`{"version": 2, "default": "keep", "optimizer_state_on_device": ["a"]}`, "optimizer_state_on_device"},
		{`{"version": 2, "default": "keep", "optimizer_state": "device", "optimizer_state_on_device": ["a"]}`, "optimizer_state_on_device"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_on_device": ["a", "b", "a"]}`, `names "a" twice`},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "gradients": "host", "serial_gradient_copies": true, "optimizer_state_on_device": ["a", "b"]}`, ""},
		{`{"version": 2, "default": "keep", "optimizer_state_visiting": ["a"]}`, "optimizer_state_visiting"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_visiting": ["a", "a"]}`, `names "a" twice`},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_on_device": ["a"], "optimizer_state_visiting": ["b", "a"]}`, `"a" is in both`},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_ahead": 3}`, "optimizer_state_ahead 3"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_visiting": ["a"], "optimizer_state_ahead": -1}`, "optimizer_state_ahead -1"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_visiting": ["a"], "optimizer_state_ahead": 1.5}`, "optimizer_state_ahead"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "optimizer_state_visiting": ["a"], "optimizer_state_ahead": "x"}`, "optimizer_state_ahead"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "gradients": "host", "serial_gradient_copies": true, "optimizer_state_visiting": ["a"], "optimizer_state_ahead": 40}`, ""},
		{`{"version": 2, "default": "keep", "copies_in_flight": -1}`, "copies_in_flight -1"},
		{`{"version": 2, "default": "keep", "copies_in_flight": 65}`, "copies_in_flight 65"},
		{`{"version": 2, "default": "keep", "copies_in_flight": 2.5}`, "copies_in_flight"},
		{`{"version": 2, "default": "keep", "copies_in_flight": "4"}`, "copies_in_flight"},
		{`{"version": 2, "default": "keep", "lookahead": -1}`, "lookahead -1"},
		{`{"version": 2, "default": "keep", "lookahead": 65}`, "lookahead 65"},
		{`{"version": 2, "default": "keep", "lookahead": 1e9}`, "lookahead"},
		{`{"version": 2, "default": "keep", "lookahead": "8"}`, "lookahead"},
		{`{"version": 2, "default": "keep", "optimizer_state": "host", "gradients": "host", "serial_gradient_copies": true, "lookahead": 64}`, ""},
	} {
		path := filepath.Join(dir, "p.json")
		if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := offload.LoadPolicy(path)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.want == "" && !p.SerialGradCopies:
			t.Errorf("%s: serial copies lost", c.body)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one naming %s", c.body, err, c.want)
		}
	}
}
