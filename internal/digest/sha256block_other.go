//go:build !amd64 || purego

package digest

// useSHANI is false: there is no assembly here. It is a variable, as on
// amd64, so that tests may set it alike.
var useSHANI = false

func sha256BlockSHANI(h *[8]uint32, p []byte) { panic("digest: no SHA-NI code on this platform") }
