//go:build !amd64 || purego

package optkernel

// Without assembly the Go loops run.
func bestISA() string { return "go" }
func ISAs() []string  { return []string{"go"} }

func adamwAVX512(w, gr, m, v *float32, n int, c *adamConsts) { panic("unreachable") }
func adamwAVX2(w, gr, m, v *float32, n int, c *adamConsts)   { panic("unreachable") }

func sgdAVX512(w, gr, buf *float32, n int, c *sgdConsts, flags int) { panic("unreachable") }
func sgdAVX2(w, gr, buf *float32, n int, c *sgdConsts, flags int)   { panic("unreachable") }

func adamwFMAAVX512(w, gr, m, v *float32, n int, c *adamConsts)        { panic("unreachable") }
func adamwFMAAVX2(w, gr, m, v *float32, n int, c *adamConsts)          { panic("unreachable") }
func sgdFMAAVX512(w, gr, buf *float32, n int, c *sgdConsts, flags int) { panic("unreachable") }
func sgdFMAAVX2(w, gr, buf *float32, n int, c *sgdConsts, flags int)   { panic("unreachable") }
