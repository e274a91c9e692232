package vet_test

import (
	"testing"

	"ferry/vet"

	"golang.org/x/tools/go/analysis/analysistest"
)

// TestDiscard runs the check over testdata/src/user, a package that uses a
// stub of ferry's API (testdata/src/ferry) rightly and wrongly; each
// `// want` comment is a diagnostic that must appear on its line, and no
// other may.
func TestDiscard(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "user")
}
