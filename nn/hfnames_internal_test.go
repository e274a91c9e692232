package nn

import (
	"regexp"
	"testing"
)

// TestHFNameMatchers checks the hand-written name matchers against the
// regular expressions they stand for, on names that almost match.
func TestHFNameMatchers(t *testing.T) {
	cases := []struct {
		re    string
		match func(string) bool
	}{
		{`^h\.[0-9]+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$`, isHFGPT2Conv1D},
		{`^h\.[0-9]+\.attn\.(bias|masked_bias)$`, isHFGPT2Buffer},
		{`^model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq$`, isHFLlamaBuffer},
	}
	names := []string{"", "h.", "h.0", "h.0.", "h..attn.bias", "h.x.attn.bias", "h.0.attn.bias",
		"h.12.attn.masked_bias", "h.1.attn.bias.x", "hh.1.attn.bias", "h.1.attn.c_attn.weight",
		"h.1.attn.c_attn.bias", "h.7.mlp.c_fc.weight", "h.7.mlp.c_proj.weight", "h.7.attn.c_proj.weight",
		"h.7.mlp.c_attn.weight", "h.-1.mlp.c_fc.weight", "h.1a.mlp.c_fc.weight",
		"model.layers.3.self_attn.rotary_emb.inv_freq", "model.layers..self_attn.rotary_emb.inv_freq",
		"model.layers.3.self_attn.rotary_emb.inv_freqs", "xmodel.layers.3.self_attn.rotary_emb.inv_freq",
		"model.layers.03.self_attn.rotary_emb.inv_freq"}
	for _, c := range cases {
		re := regexp.MustCompile(c.re)
		for _, n := range names {
			if got, want := c.match(n), re.MatchString(n); got != want {
				t.Errorf("%s on %q: %v, want %v", c.re, n, got, want)
			}
		}
	}
}
