package main

import (
	"strings"
	"testing"
)

// A bare --model lists the families the command takes (train text: the
// language models only) and exits 2, instead of "flag needs an argument"
// and every flag; --model as another flag's value is that value.
func TestBareModelListsFamilies(t *testing.T) {
	for _, c := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"demo", "--model"}, []string{"  gpt ", "  llama ", "  mlp "}, nil},
		{[]string{"train", "text", "--steps", "3", "-model"}, []string{"  gpt ", "  llama "}, []string{"  mlp "}},
		{[]string{"plan", "--model"}, []string{"  gpt "}, nil},
	} {
		out, errOut, code := runCLI(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "--model needs a model family, one of:") || strings.Contains(errOut, "flag needs an argument") {
			t.Errorf("%v: exit %d\n%s%s", c.args, code, out, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: no %q in\n%s", c.args, w, errOut)
			}
		}
		for _, w := range c.not {
			if strings.Contains(errOut, w) {
				t.Errorf("%v: %q listed, which the command does not take:\n%s", c.args, w, errOut)
			}
		}
	}
	// "--model" is --prompt's value here, and the run samples it.
	dir, _ := sampleRun(t)
	out, errOut, code := runCLI(t, "sample", "--checkpoint-dir", dir, "--n", "2", "--prompt", "--model")
	if code != 0 || !strings.Contains(out, "\n--model") {
		t.Errorf("--prompt --model: exit %d\n%s%s", code, out, errOut)
	}
}
