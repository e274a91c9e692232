package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ferry/device"
)

func TestBadValuesAreRejected(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	diskPolicy := filepath.Join(dir, "disk.json")
	os.WriteFile(diskPolicy, []byte(`{"version":1,"default":"disk"}`), 0o644)
	badPolicy := filepath.Join(dir, "bad.json")
	os.WriteFile(badPolicy, []byte(`{"version":1,"default":"keep","layers":{"layers.99":"host","nope":"host"},"rules":[{"module":"layers.0","slot":-1,"placement":"host"}]}`), 0o644)
	cases := []struct {
		args []string
		want string // in stderr
		code int
	}{
		{[]string{"demo", "--device", "meta", "--width", "-5"}, "--width must be a whole number in [1, ", 1},
		{[]string{"demo", "--device", "meta", "--width", "0"}, "--width must be a whole number", 1},
		{[]string{"demo", "--device", "meta", "--width", "1.5"}, "--width must be a whole number", 1},
		{[]string{"demo", "--device", "meta", "--width", "abc"}, "want a number", 2},
		{[]string{"demo", "--device", "meta", "--embd", "64"}, "--embd: no such size for --model mlp", 1},
		{[]string{"demo", "--device", "meta", "--modes", "none", "--policy", diskPolicy}, "add policy to --modes", 1},
		{[]string{"demo", "--device", "meta", "--batch", "0"}, "--batch must be", 1},
		{[]string{"demo", "--device", "meta", "--keep-last", "-5"}, "--keep-last", 1},
		{[]string{"demo", "--device", "meta", "--max-in-flight", "-2"}, "--max-in-flight", 1},
		{[]string{"demo", "--device", "meta", "--min-bytes", "NaN"}, "not a size", 2},
		{[]string{"demo", "--device", "cpu:0junk"}, "not a non-negative integer", 1},
		{[]string{"demo", "--device", "meta", "--device-param", "foo=1"}, "unknown parameter", 1},
		{[]string{"demo", "--device", "meta", "--batch", "9223372036854775807"}, "--batch must be a whole number", 1},
		{[]string{"demo", "--device", "meta", "--batch", "1000000000", "--width", "1000000000"}, "exceeds what any device can hold", 1},
		{[]string{"demo", "--device", "meta", "--policy", "/dev/zero"}, "is a character device, not a regular file", 1},
		{[]string{"demo", "--device", "meta", "--modes", "policy", "--policy", diskPolicy}, "no disk directory", 1},
		{[]string{"demo", "--device", "meta", "--modes", "policy", "--policy", badPolicy}, "slot -1 is negative", 1},
		{[]string{"demo", "--device", "meta", "--modes", "offload-disk", "--disk-dir", file}, "is a file, not a directory", 1},
		{[]string{"plan", "--budget", "1e19"}, "more than any device holds", 2},
		{[]string{"plan", "--budget", "1e300GiB"}, "more than any device holds", 2},
		{[]string{"plan", "--budget", "NaN"}, "not a size", 2},
		{[]string{"plan", "--budget", "Inf"}, "not a size", 2},
		{[]string{"plan", "--budget", "-3GiB"}, "not a size", 2},
		{[]string{"plan", "--budget", "100MiB"}, "nothing fits", 1},
		{[]string{"calibrate", "--seconds", "NaN"}, "--seconds", 1},
	}
	for _, c := range cases {
		_, errOut, code := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, firstLine(errOut), c.code, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("files left in %s: %v", dir, ents)
	}
	// Every problem of a policy at once.
	_, errOut, _ := runCLI(t, "demo", "--device", "meta", "--modes", "policy", "--policy", badPolicy)
	for _, want := range []string{`"layers.99"`, `"nope"`, "slot -1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("policy problems: %q lacks %s", errOut, want)
		}
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func TestJSONSurvivesNaN(t *testing.T) {
	var b strings.Builder
	v := struct {
		Loss  float32             `json:"loss"`
		Inf   float64             `json:"inf,omitempty"`
		Runs  []map[string]any    `json:"runs"`
		Inner struct{ X float64 } `json:"inner"`
	}{Loss: float32(math.NaN()), Inf: math.Inf(1), Runs: []map[string]any{{"a": math.NaN()}}}
	v.Inner.X = math.Inf(-1)
	if err := writeJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil {
		t.Fatal(err)
	}
	if back["loss"] != nil || back["inf"] != nil || back["inner"].(map[string]any)["X"] != nil {
		t.Errorf("NaN/Inf not null: %s", b.String())
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"3GiB", "1e19", "1e300GiB", "NaN", "Inf", "-1", "0", "1.5KB", " 7 MiB ", "B", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseBytes(s)
		if err == nil && (n < 0 || n > device.MaxBytes) {
			t.Fatalf("%q parsed to %d", s, n)
		}
	})
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"cpu", "cuda:1", "cpu:0junk", ":1", "meta:-1", "cuda:99999999999999999999", "cuda: 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kind, idx, err := device.ParseName(s)
		if err == nil && (kind == "" || idx < 0) {
			t.Fatalf("%q parsed to %q, %d", s, kind, idx)
		}
	})
}
