//go:build !amd64 || purego

package digest

// useSSE42 is false: there is no assembly here. It is a variable, as on
// amd64, so that tests may set it alike.
var useSSE42 = false

func crc32cSSE42(r uint32, b []byte) uint32 {
	panic("digest: no CRC32 instruction code on this platform")
}
