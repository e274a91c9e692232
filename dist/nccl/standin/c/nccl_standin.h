// The test-facing functions of the NCCL stand-in (nccl_standin.c). The
// NCCL entry points have their real signatures (nccl.h).
#ifndef FERRY_NCCL_STANDIN_H
#define FERRY_NCCL_STANDIN_H

// How many calls broke NCCL's API since the last reset, and what they were
// (one a line; the string is the library's, valid until the next call).
long long standin_nccl_violations(void);
const char *standin_nccl_report(void);
// standin_nccl_reset forgets the violations and zeroes the counters.
void standin_nccl_reset(void);
// standin_nccl_counter reads "collectives" (posted), "inits", "groups",
// "deferred" (calls made inside a group), "destroys"; -1 for another name.
long long standin_nccl_counter(const char *name);
// standin_nccl_stream_wait blocks until every collective posted on stream
// has completed (0), or timeout_ms passes (-1, and a violation).
int standin_nccl_stream_wait(void *stream, int timeout_ms);
// standin_nccl_set_async_error makes ncclCommGetAsyncError report code.
int standin_nccl_set_async_error(void *comm, int code);
// standin_nccl_group_depth is the calling thread's group depth.
int standin_nccl_group_depth(void);

#endif
