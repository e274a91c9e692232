#include "textflag.h"

// func current() uintptr
// The g pointer, from thread-local storage (go_tls.h's get_tls and g).
TEXT ·current(SB), NOSPLIT, $0-8
	MOVQ TLS, CX
	MOVQ 0(CX)(TLS*1), AX
	MOVQ AX, ret+0(FP)
	RET
