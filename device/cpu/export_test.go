package cpu

// SetParallelMin lowers the work above which kernels wake helpers, so that
// tests run small inputs concurrently; it returns the function restoring it.
func SetParallelMin(n int) (restore func()) {
	saved := parallelMin
	parallelMin = n
	return func() { parallelMin = saved }
}

// GPTShapes are the GPT step's products (gemm_test.go).
var GPTShapes = gptShapes
