package cu

import "testing"

// A CUresult or cublasStatus_t is 32 bits; the upper half of the return
// register is garbage the callee may leave. A success with garbage above
// must read as success, and a failure's code must be the low half.
func TestStatusIsTheLow32Bits(t *testing.T) {
	var l lib
	if err := l.check("cuX", 0xdeadbeef_00000000); err != nil {
		t.Errorf("success with garbage in the upper half: %v", err)
	}
}
