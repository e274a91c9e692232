package digest

// Hex returns b in lowercase hexadecimal, two digits a byte, as
// encoding/hex's EncodeToString does.
func Hex(b []byte) string {
	const digits = "0123456789abcdef"
	s := make([]byte, 2*len(b))
	for i, c := range b {
		s[2*i] = digits[c>>4]
		s[2*i+1] = digits[c&0x0f]
	}
	return string(s)
}
