package train

import (
	"regexp"
	"strings"
	"testing"
)

// TestCutHashes checks cutHashes against the regular expression it
// stands for.
func TestCutHashes(t *testing.T) {
	re := regexp.MustCompile(`[0-9a-f]{24,}`)
	h := strings.Repeat("0123456789abcdef", 4)
	for _, v := range []string{"", "x", h, "data " + h, h + " and " + h[:23] + " and " + h[:24],
		"é" + h[:30] + "é", h[:24] + "G" + h, "ABCDEF" + h + "ABC", "12 tensors of 7 elements, shapes " + h[:16]} {
		want := re.ReplaceAllStringFunc(v, func(s string) string { return s[:12] + "…" })
		if got := cutHashes(v); got != want {
			t.Errorf("cutHashes(%q) = %q, want %q", v, got, want)
		}
	}
}
