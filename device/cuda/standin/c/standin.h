// The test-facing functions of the CUDA stand-in (standin.c). The CUDA and
// cuBLAS entry points have their real signatures (cuda.h, cublas_api.h).
#ifndef FERRY_STANDIN_H
#define FERRY_STANDIN_H

#include <stddef.h>

// How many calls broke the documented API since the last reset, and what
// they were (the first 200, one a line). The string is owned by the
// library and valid until the next call of standin_report.
long long standin_violations(void);
const char *standin_report(void);
// standin_reset forgets the violations and zeroes the counters.
void standin_reset(void);

// standin_counter reads a counter: "launches", "launches_run", "sgemms",
// "gemms_ex" (cublasGemmStridedBatchedEx),
// "copies", "pageable_copies", "memsets", "syncs", "default_stream",
// "live_dev_bytes"; -1 for an unknown name.
long long standin_counter(const char *name);

// standin_set_copy_delay_us makes each copy due that long after it is
// enqueued: cuEventQuery reports it not ready until then.
void standin_set_copy_delay_us(long long us);

// A queued kernel, as the runner sees it when the kernel runs: its .entry
// name, launch shape, and its parameters' bytes (copied at launch; sizes
// as the PTX declares). The runner returns 0, or non-zero for a fault
// (the context then fails with CUDA_ERROR_ILLEGAL_ADDRESS).
struct standin_launch {
	const char *name;
	unsigned grid[3], block[3];
	int nparams;
	const int *sizes;
	void *const *params;
	unsigned shared; // bytes of dynamic shared memory
};
void standin_set_kernel_runner(int (*runner)(const struct standin_launch *));

// Device addresses lie in [STANDIN_DEV_BASE, STANDIN_DEV_BASE +
// STANDIN_DEV_SPAN): above 2^47, never a valid user-space pointer.
#define STANDIN_DEV_BASE 0xCAFE00000000ULL
#define STANDIN_DEV_SPAN (1ULL << 44)

// standin_violation records a violation found by a kernel runner (what
// broke the rules, and how), counted and reported as the API's are.
void standin_violation(const char *what, const char *msg);

// standin_resolve maps a device address to its host bytes and the bytes
// left in its allocation; NULL if it is not live device memory.
void *standin_resolve(unsigned long long dptr, size_t *avail);

#endif
