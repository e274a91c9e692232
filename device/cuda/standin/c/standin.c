// A strict stand-in for the CUDA driver API and cuBLAS, for tests.
//
// ferry's bindings (device/cuda/cu) load this library in place of
// libcuda.so.1 and libcublas.so.N (FERRY_LIBCUDA, FERRY_CUBLAS). It exports
// every symbol ferry binds, with the real signatures, and checks each call
// against the documented API: out-pointers not null, sizes and flags valid,
// handles known and alive, a current context on the calling thread, cuInit
// first, no memory freed while queued work still uses it, every object
// destroyed before its context. Each breach is a "violation": counted,
// described in standin_report(), and (where the real driver would fail)
// answered with the real error code.
//
// Device memory is host memory behind fake device addresses: a range above
// 2^47, which is not a canonical user-space address on x86-64 or arm64, so a
// binding that dereferences a device pointer on the host faults at once.
//
// Streams are queues. Work runs when something waits for it
// (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize, a synchronous
// copy), or when cuEventQuery finds it due: each copy is due a configurable
// delay after it was enqueued (standin_set_copy_delay_us), everything else
// at once. So a binding that reads pinned memory before waiting sees stale
// bytes, as on a GPU.
//
// There is no PTX interpreter here: a launch is checked against the .entry
// signature parsed from the module's PTX and queued; when it runs, it calls
// the runner the test installed (standin_set_kernel_runner), which runs
// the kernel's CUDA source compiled for the CPU (cudacpu.cpp) or a Go
// version of it over standin_resolve()d memory, or does nothing without
// one.
// cublasSgemmStridedBatched and cublasGemmStridedBatchedEx (float32 and
// bfloat16 operands) are computed here, naively, as the Go fake does.
//
// Build: gcc -shared -fPIC -O1 -ffp-contract=off -o libstandin.so standin.c -lpthread

#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "standin.h"

#define EXPORT __attribute__((visibility("default")))

// Every CUDA and cuBLAS entry point here is a wrapper that returns the
// 32-bit CUresult (or cublasStatus_t) of its implementation, name_, in the
// low half of the return register, with the upper half not zero: the C
// ABI leaves it undefined, and compiled code does leave garbage there. A
// binding that tests the whole register instead of the 32-bit result sees
// every success as a failure.
typedef unsigned long long result;
static result dirty(int r) { return 0x5EED000000000000ULL | (uint32_t)r; }

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef int cublasStatus_t;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_PTX = 218,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
	CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

// ---- violations and counters ------------------------------------------

static pthread_mutex_t mu; // recursive: the kernel runner calls back in
static pthread_once_t mu_once = PTHREAD_ONCE_INIT;

static void mu_init(void) {
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&mu, &a);
}

static void lock(void) {
	pthread_once(&mu_once, mu_init);
	pthread_mutex_lock(&mu);
}
static void unlock(void) { pthread_mutex_unlock(&mu); }

#define MAX_LOGGED 200
static long long n_violations;
static char *logged[MAX_LOGGED];
static int n_logged;
static char *report_buf;

static void violate(const char *call, const char *fmt, ...) {
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	n_violations++;
	if (n_logged < MAX_LOGGED) {
		size_t n = strlen(call) + strlen(msg) + 3;
		char *s = malloc(n);
		snprintf(s, n, "%s: %s", call, msg);
		logged[n_logged++] = s;
	}
}

// Named counters of what happened, for tests (standin_counter).
static struct {
	long long launches, launches_run, sgemms, gemms_ex, copies, pageable_copies, memsets, syncs, default_stream;
	long long live_dev_bytes; // last: standin_reset keeps it
} cnt;

// ---- objects ------------------------------------------------------------

enum kind { K_CTX = 1, K_STREAM, K_EVENT, K_MODULE, K_FUNC, K_BLAS };
static const char *kind_name[] = {"?", "context", "stream", "event", "module", "function", "cuBLAS handle"};

struct ctx;

// Every object ever created stays allocated (alive = 0 once destroyed),
// so that a stale handle is recognised rather than dereferenced.
struct obj {
	enum kind kind;
	int alive;
	long long id;
	struct ctx *ctx;
};

#define MAX_OBJS (1 << 16)
static struct obj *objs[MAX_OBJS];
static int n_objs;
static long long next_id = 1;

static void *new_obj(size_t size, enum kind k, struct ctx *c) {
	struct obj *o = calloc(1, size);
	o->kind = k;
	o->alive = 1;
	o->id = next_id++;
	o->ctx = c;
	if (n_objs < MAX_OBJS) objs[n_objs++] = o;
	return o;
}

// find returns the object behind handle h if it is one of ours of kind k
// (alive or not), else NULL.
static struct obj *find(uintptr_t h, enum kind k) {
	for (int i = n_objs - 1; i >= 0; i--)
		if ((uintptr_t)objs[i] == h) return objs[i]->kind == k ? objs[i] : NULL;
	return NULL;
}

struct op;

struct stream {
	struct obj o;
	unsigned flags;
	struct op *head, *tail;
	long long enq_seq, done_seq; // ops enqueued, ops completed
};

struct ctx {
	struct obj o;
	int refs;
	int sticky; // a kernel fault: every later call fails with it
	struct stream *null_stream;
};

struct event {
	struct obj o;
	unsigned flags;
	struct stream *s; // where last recorded (NULL: never)
	long long seq;
};

struct param_sig {
	int n;
	int *sizes;
};

struct func {
	struct obj o;
	struct module *m;
	char *name;
	struct param_sig sig;
};

struct module {
	struct obj o;
	int n;
	struct func **funcs;
};

struct blas {
	struct obj o;
	struct stream *s; // NULL: the legacy stream
	int math;
	CUdeviceptr ws;
	size_t ws_size;
};

static int inited;
static struct ctx *primary; // of device 0, while retained
static __thread struct ctx *cur;
static __thread struct ctx *ctx_stack[16];
static __thread int ctx_depth;

// ---- memory -------------------------------------------------------------

// Device addresses start above 2^47: never a valid user-space pointer.
#define DEV_BASE STANDIN_DEV_BASE
#define DEV_ALIGN 512
static const unsigned long long total_mem = 8ULL << 30;
static CUdeviceptr next_dev = DEV_BASE;

struct range {
	uintptr_t base; // device address, or host address for host ranges
	size_t size;
	char *host; // the bytes of a device range
	int alive, dev, pinned, registered;
	struct ctx *ctx;
	const char *how;
};

#define MAX_RANGES (1 << 16)
static struct range ranges[MAX_RANGES];
static int n_ranges;

static int is_dev_addr(uintptr_t p) { return p >= DEV_BASE && p < DEV_BASE + STANDIN_DEV_SPAN; }

// find_range returns the range (alive or not, of the given kind) holding
// [p, p+n), or NULL. Device ranges are sorted (addresses only grow).
static struct range *find_range(uintptr_t p, size_t n, int dev) {
	for (int i = n_ranges - 1; i >= 0; i--) {
		struct range *r = &ranges[i];
		if (r->dev != dev) continue;
		if (p >= r->base && p < r->base + r->size && (r->alive || dev)) return (p + n <= r->base + r->size) ? r : NULL;
	}
	return NULL;
}

static struct range *add_range(uintptr_t base, size_t size, int dev, int pinned, const char *how) {
	if (n_ranges == MAX_RANGES) { // reuse dead host ranges
		for (int i = 0; i < n_ranges; i++)
			if (!ranges[i].alive && !ranges[i].dev) {
				ranges[i] = (struct range){0};
				struct range *r = &ranges[i];
				r->base = base, r->size = size, r->alive = 1, r->dev = dev, r->pinned = pinned, r->ctx = cur, r->how = how;
				return r;
			}
		return NULL;
	}
	struct range *r = &ranges[n_ranges++];
	r->base = base, r->size = size, r->alive = 1, r->dev = dev, r->pinned = pinned, r->ctx = cur, r->how = how;
	return r;
}

// dev_bytes resolves device range [p, p+n) to host bytes, recording a
// violation (and returning NULL) if it is not live device memory.
static char *dev_bytes(const char *call, const char *what, CUdeviceptr p, size_t n) {
	if (!is_dev_addr(p)) {
		violate(call, "%s %#llx is not a device address%s", what, p, p ? " (a host pointer passed as a device pointer?)" : "");
		return NULL;
	}
	struct range *r = find_range(p, n, 1);
	if (!r) {
		violate(call, "%s [%#llx, +%zu) is not inside one device allocation", what, p, n);
		return NULL;
	}
	if (!r->alive) {
		violate(call, "%s %#llx is in an allocation already freed (use after cuMemFree)", what, p);
		return NULL;
	}
	if (r->ctx != cur) {
		violate(call, "%s %#llx belongs to another context", what, p);
		return NULL;
	}
	return r->host + (p - r->base);
}

// host_ptr checks a host pointer: not null (for n > 0), not a device
// address. pinned is set when it lies in page-locked memory.
static int host_ptr(const char *call, const char *what, const void *p, size_t n, int *pinned) {
	*pinned = 0;
	if (n > 0 && p == NULL) {
		violate(call, "%s is NULL", what);
		return 0;
	}
	if (is_dev_addr((uintptr_t)p)) {
		violate(call, "%s %p is a device address passed as a host pointer", what, p);
		return 0;
	}
	struct range *r = find_range((uintptr_t)p, n, 0);
	*pinned = r != NULL && r->alive && r->pinned;
	return 1;
}

// ---- stream work ----------------------------------------------------------

enum op_kind { OP_COPY, OP_MEMSET32, OP_KERNEL, OP_SGEMM, OP_WAIT };

struct sgemm_args {
	int ta, tb, m, n, k, math;
	float alpha, beta;
	float *a, *b, *c;
	int lda, ldb, ldc;
	long long sa, sb, sc;
	int batch;
	// cublasGemmStridedBatchedEx: ex is 1 and the operands' element types
	// (CUDA_R_32F or CUDA_R_16BF) say how to read a, b and c.
	int ex, atype, btype, ctype;
};

struct op {
	enum op_kind kind;
	struct op *next;
	long long ready_ns; // not run by cuEventQuery before then
	// ranges the work touches, for cuMemFree/cuMemFreeHost checks
	uintptr_t r_base[4];
	size_t r_size[4];
	int r_dev[4];
	int nr;
	// OP_COPY, OP_MEMSET32
	char *dst, *src;
	size_t n;
	unsigned val;
	char *staged; // owned copy of a pageable source
	// OP_KERNEL
	struct func *f;
	unsigned grid[3], block[3], shared;
	void **params;
	// OP_SGEMM
	struct sgemm_args g;
	// OP_WAIT
	struct stream *other;
	long long other_seq;
};

static void touch(struct op *o, uintptr_t base, size_t size, int dev) {
	if (o->nr < 4) {
		o->r_base[o->nr] = base, o->r_size[o->nr] = size, o->r_dev[o->nr] = dev;
		o->nr++;
	}
}

static long long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long copy_delay_ns;

typedef int (*runner_fn)(const struct standin_launch *);
static runner_fn runner;

static void enqueue(struct stream *s, struct op *o) {
	o->next = NULL;
	if (s->tail) s->tail->next = o;
	else s->head = o;
	s->tail = o;
	s->enq_seq++;
}

static void free_op(struct op *o) {
	free(o->staged);
	if (o->params) {
		for (int i = 0; i < o->f->sig.n; i++) free(o->params[i]);
		free(o->params);
	}
	free(o);
}

static float tf32(float x) {
	uint32_t b;
	memcpy(&b, &x, 4);
	if ((b & 0x7f800000u) == 0x7f800000u) return x;
	b = (b + 0x1000u) & ~0x1fffu;
	memcpy(&x, &b, 4);
	return x;
}

// sgemm is column-major C = alpha*op(A)*op(B) + beta*C, C not read when
// beta is 0, summed in the order of the Go fake's.
static void run_sgemm(const struct sgemm_args *g) {
	for (int z = 0; z < g->batch; z++) {
		const float *a = g->a + z * g->sa, *b = g->b + z * g->sb;
		float *c = g->c + z * g->sc;
		for (int j = 0; j < g->n; j++)
			for (int i = 0; i < g->m; i++) {
				float acc = 0;
				for (int l = 0; l < g->k; l++) {
					float x = g->ta ? a[l + (long long)i * g->lda] : a[i + (long long)l * g->lda];
					float y = g->tb ? b[j + (long long)l * g->ldb] : b[l + (long long)j * g->ldb];
					if (g->math == 3) x = tf32(x), y = tf32(y);
					acc += x * y;
				}
				float r = g->alpha * acc;
				if (g->beta != 0) r += g->beta * c[i + (long long)j * g->ldc];
				c[i + (long long)j * g->ldc] = r;
			}
	}
}

enum { CUDA_R_32F = 0, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68 };

static float bf16_to_f32(unsigned short h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// f32_to_bf16 rounds to nearest, ties to even; a NaN stays a NaN, quiet
// (device.ToBFloat16).
static unsigned short f32_to_bf16(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
	return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float get_elem(const void *p, int type, long long i) {
	return type == CUDA_R_16BF ? bf16_to_f32(((const unsigned short *)p)[i]) : ((const float *)p)[i];
}

static void set_elem(void *p, int type, long long i, float v) {
	if (type == CUDA_R_16BF) ((unsigned short *)p)[i] = f32_to_bf16(v);
	else ((float *)p)[i] = v;
}

// gemm_ex is run_sgemm over operands of either element type, with float32
// products and sums in the same order (CUBLAS_COMPUTE_32F); a bfloat16 C
// is read widened and written rounded.
static void run_gemm_ex(const struct sgemm_args *g) {
	size_t ea = g->atype == CUDA_R_16BF ? 2 : 4, eb = g->btype == CUDA_R_16BF ? 2 : 4, ec = g->ctype == CUDA_R_16BF ? 2 : 4;
	int f32 = g->atype == CUDA_R_32F && g->btype == CUDA_R_32F;
	for (int z = 0; z < g->batch; z++) {
		const char *a = (const char *)g->a + z * g->sa * (long long)ea, *b = (const char *)g->b + z * g->sb * (long long)eb;
		char *c = (char *)g->c + z * g->sc * (long long)ec;
		for (int j = 0; j < g->n; j++)
			for (int i = 0; i < g->m; i++) {
				float acc = 0;
				for (int l = 0; l < g->k; l++) {
					float x = get_elem(a, g->atype, g->ta ? l + (long long)i * g->lda : i + (long long)l * g->lda);
					float y = get_elem(b, g->btype, g->tb ? j + (long long)l * g->ldb : l + (long long)j * g->ldb);
					if (f32 && g->math == 3) x = tf32(x), y = tf32(y);
					acc += x * y;
				}
				float r = g->alpha * acc;
				long long ci = i + (long long)j * g->ldc;
				if (g->beta != 0) r += g->beta * get_elem(c, g->ctype, ci);
				set_elem(c, g->ctype, ci, r);
			}
	}
}

static int progress(struct stream *s, long long upto, int force);

// run_op does one op's work. It returns 0, or -1 if a wait could not be
// met yet (not forced).
static int run_op(struct stream *s, struct op *o, int force) {
	struct ctx *c = s->o.ctx;
	switch (o->kind) {
	case OP_WAIT:
		return progress(o->other, o->other_seq, force) ? 0 : -1;
	case OP_COPY:
		if (!c->sticky) memmove(o->dst, o->staged ? o->staged : o->src, o->n);
		break;
	case OP_MEMSET32:
		if (!c->sticky)
			for (size_t i = 0; i < o->n; i++) memcpy(o->dst + 4 * i, &o->val, 4);
		break;
	case OP_SGEMM:
		if (!c->sticky) {
			if (o->g.ex) run_gemm_ex(&o->g);
			else run_sgemm(&o->g);
		}
		break;
	case OP_KERNEL:
		if (!c->sticky && runner) {
			struct standin_launch l = {o->f->name, {o->grid[0], o->grid[1], o->grid[2]},
			                           {o->block[0], o->block[1], o->block[2]}, o->f->sig.n, o->f->sig.sizes, o->params, o->shared};
			cnt.launches_run++;
			if (runner(&l) != 0) c->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
		}
		break;
	}
	(void)s;
	return 0;
}

// progress runs s's work until upto ops have completed: all of it when
// forced, else only what is due. It reports whether upto was reached.
static int progress(struct stream *s, long long upto, int force) {
	long long t = force ? 0 : now_ns();
	while (s->done_seq < upto && s->head) {
		struct op *o = s->head;
		if (!force && t < o->ready_ns) return 0;
		if (run_op(s, o, force) != 0) return 0;
		s->head = o->next;
		if (!s->head) s->tail = NULL;
		s->done_seq++;
		free_op(o);
	}
	return s->done_seq >= upto;
}

static void drain(struct stream *s) { progress(s, s->enq_seq, 1); }

static void drain_ctx(struct ctx *c) {
	if (c->null_stream) drain(c->null_stream);
	for (int i = 0; i < n_objs; i++)
		if (objs[i]->kind == K_STREAM && objs[i]->ctx == c) drain((struct stream *)objs[i]);
}

// in_flight reports whether queued work of c touches [base, base+size).
static const char *in_flight(struct ctx *c, uintptr_t base, size_t size, int dev) {
	static const char *names[] = {"a copy", "a memset", "a kernel", "an sgemm", "a wait"};
	for (int i = -1; i < n_objs; i++) {
		struct stream *s;
		if (i < 0) s = c->null_stream;
		else if (objs[i]->kind == K_STREAM && objs[i]->ctx == c) s = (struct stream *)objs[i];
		else continue;
		if (!s) continue;
		for (struct op *o = s->head; o; o = o->next)
			for (int j = 0; j < o->nr; j++)
				if (o->r_dev[j] == dev && o->r_base[j] < base + size && base < o->r_base[j] + o->r_size[j]) return names[o->kind];
	}
	return NULL;
}

// ---- entry checks -----------------------------------------------------------

// need_init checks that cuInit has run.
#define NEED_INIT(call)                                                  \
	do {                                                                 \
		if (!inited) {                                               \
			violate(call, "called before cuInit");               \
			unlock();                                            \
			return CUDA_ERROR_NOT_INITIALIZED;                   \
		}                                                            \
	} while (0)

// need_ctx checks init and a live current context on this thread; it
// returns 0 or the error to return.
static CUresult need_ctx(const char *call) {
	if (!inited) {
		violate(call, "called before cuInit");
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	if (!cur) {
		violate(call, "no current context on this thread");
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (!cur->o.alive) {
		violate(call, "the current context was destroyed");
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	return cur->sticky;
}

#define ENTER(call)                            \
	lock();                                \
	do {                                   \
		CUresult r_ = need_ctx(call);  \
		if (r_) {                      \
			unlock();              \
			return r_;             \
		}                              \
	} while (0)

#define FAIL(r, call, ...)                      \
	do {                                    \
		violate(call, __VA_ARGS__);     \
		unlock();                       \
		return r;                       \
	} while (0)

// live checks a handle: one of ours, of kind k, alive, of the current
// context.
static struct obj *live(const char *call, uintptr_t h, enum kind k) {
	struct obj *o = find(h, k);
	if (!o) {
		violate(call, "%#lx is not a %s handle", (unsigned long)h, kind_name[k]);
		return NULL;
	}
	if (!o->alive) {
		violate(call, "%s %lld used after it was destroyed", kind_name[k], o->id);
		return NULL;
	}
	if (o->ctx != cur) {
		violate(call, "%s %lld belongs to another context", kind_name[k], o->id);
		return NULL;
	}
	return o;
}

// get_stream resolves a CUstream (0: the legacy default stream).
static struct stream *get_stream(const char *call, uintptr_t h) {
	if (h == 0) {
		cnt.default_stream++;
		if (!cur->null_stream) {
			cur->null_stream = new_obj(sizeof(struct stream), K_STREAM, cur);
			cur->null_stream->o.alive = 2; // internal: never leaked, never destroyed
		}
		return cur->null_stream;
	}
	return (struct stream *)live(call, h, K_STREAM);
}

// ---- init, devices, errors --------------------------------------------------

static const struct {
	int code;
	const char *name, *text;
} errs[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult e, const char **p, int text) {
	if (!p) {
		lock();
		violate(text ? "cuGetErrorString" : "cuGetErrorName", "pStr is NULL");
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
		if (errs[i].code == e) {
			*p = text ? errs[i].text : errs[i].name;
			return CUDA_SUCCESS;
		}
	*p = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult cuGetErrorName_(CUresult e, const char **p);
EXPORT result cuGetErrorName(CUresult e, const char **p) { return dirty(cuGetErrorName_(e, p)); }
static CUresult cuGetErrorName_(CUresult e, const char **p) { return error_lookup(e, p, 0); }
static CUresult cuGetErrorString_(CUresult e, const char **p);
EXPORT result cuGetErrorString(CUresult e, const char **p) { return dirty(cuGetErrorString_(e, p)); }
static CUresult cuGetErrorString_(CUresult e, const char **p) { return error_lookup(e, p, 1); }

static CUresult cuDriverGetVersion_(int *v);
EXPORT result cuDriverGetVersion(int *v) { return dirty(cuDriverGetVersion_(v)); }
static CUresult cuDriverGetVersion_(int *v) {
	if (!v) {
		lock();
		FAIL(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion", "driverVersion is NULL");
	}
	*v = 12040;
	return CUDA_SUCCESS;
}

static CUresult cuInit_(unsigned flags);
EXPORT result cuInit(unsigned flags) { return dirty(cuInit_(flags)); }
static CUresult cuInit_(unsigned flags) {
	lock();
	if (flags != 0) FAIL(CUDA_ERROR_INVALID_VALUE, "cuInit", "Flags must be 0, got %u", flags);
	inited = 1;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGetCount_(int *n);
EXPORT result cuDeviceGetCount(int *n) { return dirty(cuDeviceGetCount_(n)); }
static CUresult cuDeviceGetCount_(int *n) {
	lock();
	NEED_INIT("cuDeviceGetCount");
	if (!n) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount", "count is NULL");
	*n = 1;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGet_(CUdevice *d, int ordinal);
EXPORT result cuDeviceGet(CUdevice *d, int ordinal) { return dirty(cuDeviceGet_(d, ordinal)); }
static CUresult cuDeviceGet_(CUdevice *d, int ordinal) {
	lock();
	NEED_INIT("cuDeviceGet");
	if (!d) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDeviceGet", "device is NULL");
	if (ordinal != 0) FAIL(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet", "ordinal %d: there is one device", ordinal);
	*d = 0;
	unlock();
	return CUDA_SUCCESS;
}

#define NEED_DEV(call, dev) \
	if ((dev) != 0) FAIL(CUDA_ERROR_INVALID_DEVICE, call, "%d is not a CUdevice from cuDeviceGet", (dev))

static CUresult cuDeviceGetName_(char *name, int len, CUdevice dev);
EXPORT result cuDeviceGetName(char *name, int len, CUdevice dev) { return dirty(cuDeviceGetName_(name, len, dev)); }
static CUresult cuDeviceGetName_(char *name, int len, CUdevice dev) {
	lock();
	NEED_INIT("cuDeviceGetName");
	if (!name || len <= 0) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName", "name %p, len %d", (void *)name, len);
	NEED_DEV("cuDeviceGetName", dev);
	snprintf(name, (size_t)len, "ferry stand-in");
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuDeviceTotalMem_v2_(size_t *bytes, CUdevice dev);
EXPORT result cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) { return dirty(cuDeviceTotalMem_v2_(bytes, dev)); }
static CUresult cuDeviceTotalMem_v2_(size_t *bytes, CUdevice dev) {
	lock();
	NEED_INIT("cuDeviceTotalMem_v2");
	if (!bytes) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDeviceTotalMem_v2", "bytes is NULL");
	NEED_DEV("cuDeviceTotalMem_v2", dev);
	*bytes = total_mem;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGetAttribute_(int *pi, int attrib, CUdevice dev);
EXPORT result cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) { return dirty(cuDeviceGetAttribute_(pi, attrib, dev)); }
static CUresult cuDeviceGetAttribute_(int *pi, int attrib, CUdevice dev) {
	lock();
	NEED_INIT("cuDeviceGetAttribute");
	if (!pi) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute", "pi is NULL");
	if (attrib < 1 || attrib > 140) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute", "unknown attribute %d", attrib);
	NEED_DEV("cuDeviceGetAttribute", dev);
	switch (attrib) {
	case 1: *pi = 1024; break; // max threads per block
	case 16: *pi = 4; break;   // multiprocessors
	case 75: *pi = 9; break;   // compute capability
	case 76: *pi = 0; break;
	default: *pi = 0;
	}
	unlock();
	return CUDA_SUCCESS;
}

// ---- contexts -----------------------------------------------------------------

static CUresult cuDevicePrimaryCtxRetain_(void **pctx, CUdevice dev);
EXPORT result cuDevicePrimaryCtxRetain(void **pctx, CUdevice dev) { return dirty(cuDevicePrimaryCtxRetain_(pctx, dev)); }
static CUresult cuDevicePrimaryCtxRetain_(void **pctx, CUdevice dev) {
	lock();
	NEED_INIT("cuDevicePrimaryCtxRetain");
	if (!pctx) FAIL(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxRetain", "pctx is NULL");
	NEED_DEV("cuDevicePrimaryCtxRetain", dev);
	if (!primary) primary = new_obj(sizeof(struct ctx), K_CTX, NULL);
	primary->refs++;
	*pctx = primary;
	unlock();
	return CUDA_SUCCESS;
}

static void report_leaks(struct ctx *c) {
	for (int i = 0; i < n_objs; i++) {
		struct obj *o = objs[i];
		if (o->ctx == c && o->alive == 1 && o->kind != K_FUNC) {
			violate("cuDevicePrimaryCtxRelease_v2", "%s %lld still alive when its context is destroyed", kind_name[o->kind], o->id);
			o->alive = 0;
		}
	}
	for (int i = 0; i < n_ranges; i++) {
		struct range *r = &ranges[i];
		if (r->ctx == c && r->alive) {
			violate("cuDevicePrimaryCtxRelease_v2", "%zu bytes from %s still allocated when the context is destroyed", r->size, r->how);
			r->alive = 0;
			if (r->dev) {
				free(r->host);
				cnt.live_dev_bytes -= r->size;
			} else if (!r->registered) free((void *)r->base);
		}
	}
}

static CUresult cuDevicePrimaryCtxRelease_v2_(CUdevice dev);
EXPORT result cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return dirty(cuDevicePrimaryCtxRelease_v2_(dev)); }
static CUresult cuDevicePrimaryCtxRelease_v2_(CUdevice dev) {
	lock();
	NEED_INIT("cuDevicePrimaryCtxRelease_v2");
	NEED_DEV("cuDevicePrimaryCtxRelease_v2", dev);
	if (!primary) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease_v2", "the primary context is not retained (double release)");
	if (--primary->refs == 0) {
		struct ctx *c = primary;
		drain_ctx(c);
		report_leaks(c);
		for (int i = 0; i < n_objs; i++)
			if (objs[i]->ctx == c) objs[i]->alive = 0;
		c->o.alive = 0;
		primary = NULL;
	}
	unlock();
	return CUDA_SUCCESS;
}

static int ctx_ok(const char *call, void *h) {
	struct obj *o = find((uintptr_t)h, K_CTX);
	if (!o) {
		violate(call, "%p is not a context", h);
		return 0;
	}
	if (!o->alive) {
		violate(call, "context %lld was destroyed", o->id);
		return 0;
	}
	return 1;
}

static CUresult cuCtxSetCurrent_(void *c);
EXPORT result cuCtxSetCurrent(void *c) { return dirty(cuCtxSetCurrent_(c)); }
static CUresult cuCtxSetCurrent_(void *c) {
	lock();
	NEED_INIT("cuCtxSetCurrent");
	if (c && !ctx_ok("cuCtxSetCurrent", c)) {
		unlock();
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	cur = c;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuCtxGetCurrent_(void **pc);
EXPORT result cuCtxGetCurrent(void **pc) { return dirty(cuCtxGetCurrent_(pc)); }
static CUresult cuCtxGetCurrent_(void **pc) {
	lock();
	NEED_INIT("cuCtxGetCurrent");
	if (!pc) FAIL(CUDA_ERROR_INVALID_VALUE, "cuCtxGetCurrent", "pctx is NULL");
	*pc = cur;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuCtxPushCurrent_v2_(void *c);
EXPORT result cuCtxPushCurrent_v2(void *c) { return dirty(cuCtxPushCurrent_v2_(c)); }
static CUresult cuCtxPushCurrent_v2_(void *c) {
	lock();
	NEED_INIT("cuCtxPushCurrent_v2");
	if (!c || !ctx_ok("cuCtxPushCurrent_v2", c)) {
		if (!c) violate("cuCtxPushCurrent_v2", "ctx is NULL");
		unlock();
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (ctx_depth == 16) FAIL(CUDA_ERROR_INVALID_VALUE, "cuCtxPushCurrent_v2", "context stack deeper than 16");
	ctx_stack[ctx_depth++] = cur;
	cur = c;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuCtxPopCurrent_v2_(void **pc);
EXPORT result cuCtxPopCurrent_v2(void **pc) { return dirty(cuCtxPopCurrent_v2_(pc)); }
static CUresult cuCtxPopCurrent_v2_(void **pc) {
	lock();
	NEED_INIT("cuCtxPopCurrent_v2");
	if (!cur) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPopCurrent_v2", "no current context to pop");
	if (pc) *pc = cur;
	cur = ctx_depth > 0 ? ctx_stack[--ctx_depth] : NULL;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuCtxSynchronize_(void);
EXPORT result cuCtxSynchronize(void) { return dirty(cuCtxSynchronize_()); }
static CUresult cuCtxSynchronize_(void) {
	ENTER("cuCtxSynchronize");
	drain_ctx(cur);
	cnt.syncs++;
	CUresult r = cur->sticky;
	unlock();
	return r;
}

// ---- memory -------------------------------------------------------------------

static CUresult cuMemGetInfo_v2_(size_t *free_, size_t *total);
EXPORT result cuMemGetInfo_v2(size_t *free_, size_t *total) { return dirty(cuMemGetInfo_v2_(free_, total)); }
static CUresult cuMemGetInfo_v2_(size_t *free_, size_t *total) {
	ENTER("cuMemGetInfo_v2");
	if (!free_ || !total) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemGetInfo_v2", "free %p, total %p", (void *)free_, (void *)total);
	*total = total_mem;
	*free_ = total_mem - (size_t)cnt.live_dev_bytes;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuMemAlloc_v2_(CUdeviceptr *p, size_t n);
EXPORT result cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return dirty(cuMemAlloc_v2_(p, n)); }
static CUresult cuMemAlloc_v2_(CUdeviceptr *p, size_t n) {
	ENTER("cuMemAlloc_v2");
	if (!p) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2", "dptr is NULL");
	if (n == 0) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2", "bytesize is 0");
	if ((unsigned long long)cnt.live_dev_bytes + n > total_mem) {
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	char *host = malloc(n);
	if (!host) {
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memset(host, 0xA5, n); // not zero: cuMemAlloc does not clear
	struct range *r = add_range(next_dev, n, 1, 0, "cuMemAlloc_v2");
	if (!r) {
		free(host);
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r->host = host;
	*p = next_dev;
	next_dev += (n + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN + DEV_ALIGN; // a gap between allocations
	cnt.live_dev_bytes += n;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuMemFree_v2_(CUdeviceptr p);
EXPORT result cuMemFree_v2(CUdeviceptr p) { return dirty(cuMemFree_v2_(p)); }
static CUresult cuMemFree_v2_(CUdeviceptr p) {
	ENTER("cuMemFree_v2");
	struct range *r = is_dev_addr(p) ? find_range(p, 0, 1) : NULL;
	if (!r || r->base != p) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2", "%#llx is not the start of a device allocation", p);
	if (!r->alive) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2", "%#llx freed twice", p);
	const char *what = in_flight(cur, r->base, r->size, 1);
	if (what) {
		violate("cuMemFree_v2", "%#llx (%zu bytes) freed while %s queued on a stream still uses it", p, r->size, what);
		drain_ctx(cur); // as cudaFree would, to keep this process sound
	}
	r->alive = 0;
	free(r->host);
	r->host = NULL;
	cnt.live_dev_bytes -= r->size;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult host_alloc(const char *call, void **pp, size_t n, unsigned flags) {
	ENTER(call);
	if (!pp) FAIL(CUDA_ERROR_INVALID_VALUE, call, "pp is NULL");
	if (n == 0) FAIL(CUDA_ERROR_INVALID_VALUE, call, "bytesize is 0");
	if (flags & ~7u) FAIL(CUDA_ERROR_INVALID_VALUE, call, "unknown Flags bits %#x", flags & ~7u);
	void *p = NULL;
	if (posix_memalign(&p, 4096, n) != 0) {
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!add_range((uintptr_t)p, n, 0, 1, call)) {
		free(p);
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = p;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuMemHostAlloc_(void **pp, size_t n, unsigned flags);
EXPORT result cuMemHostAlloc(void **pp, size_t n, unsigned flags) { return dirty(cuMemHostAlloc_(pp, n, flags)); }
static CUresult cuMemHostAlloc_(void **pp, size_t n, unsigned flags) { return host_alloc("cuMemHostAlloc", pp, n, flags); }
static CUresult cuMemAllocHost_v2_(void **pp, size_t n);
EXPORT result cuMemAllocHost_v2(void **pp, size_t n) { return dirty(cuMemAllocHost_v2_(pp, n)); }
static CUresult cuMemAllocHost_v2_(void **pp, size_t n) { return host_alloc("cuMemAllocHost_v2", pp, n, 0); }

static CUresult cuMemFreeHost_(void *p);
EXPORT result cuMemFreeHost(void *p) { return dirty(cuMemFreeHost_(p)); }
static CUresult cuMemFreeHost_(void *p) {
	ENTER("cuMemFreeHost");
	struct range *r = NULL;
	for (int i = n_ranges - 1; i >= 0; i--)
		if (!ranges[i].dev && ranges[i].base == (uintptr_t)p && ranges[i].alive && !ranges[i].registered) {
			r = &ranges[i];
			break;
		}
	if (!r) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost", "%p is not page-locked memory from cuMemHostAlloc (or it was freed)", p);
	if (r->ctx != cur) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost", "%p belongs to another context", p);
	const char *what = in_flight(cur, r->base, r->size, 0);
	if (what) {
		violate("cuMemFreeHost", "%p (%zu bytes) freed while %s queued on a stream still uses it", p, r->size, what);
		drain_ctx(cur);
	}
	r->alive = 0;
	free(p);
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuMemHostRegister_v2_(void *p, size_t n, unsigned flags);
EXPORT result cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { return dirty(cuMemHostRegister_v2_(p, n, flags)); }
static CUresult cuMemHostRegister_v2_(void *p, size_t n, unsigned flags) {
	ENTER("cuMemHostRegister_v2");
	if (!p || n == 0) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister_v2", "p %p, bytesize %zu", p, n);
	if (flags & ~15u) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister_v2", "unknown Flags bits %#x", flags & ~15u);
	struct range *r = add_range((uintptr_t)p, n, 0, 1, "cuMemHostRegister_v2");
	if (r) r->registered = 1;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuMemHostUnregister_(void *p);
EXPORT result cuMemHostUnregister(void *p) { return dirty(cuMemHostUnregister_(p)); }
static CUresult cuMemHostUnregister_(void *p) {
	ENTER("cuMemHostUnregister");
	for (int i = n_ranges - 1; i >= 0; i--)
		if (!ranges[i].dev && ranges[i].base == (uintptr_t)p && ranges[i].alive && ranges[i].registered) {
			if (in_flight(cur, ranges[i].base, ranges[i].size, 0)) {
				violate("cuMemHostUnregister", "%p unregistered while queued work uses it", p);
				drain_ctx(cur);
			}
			ranges[i].alive = 0;
			unlock();
			return CUDA_SUCCESS;
		}
	FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemHostUnregister", "%p is not registered", p);
}

// copy_op builds a copy of n bytes. Each side is a device address or a
// host pointer; pageable host memory makes the call synchronous, as the
// real driver's is.
static CUresult copy_op(const char *call, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, size_t n, uintptr_t sh) {
	ENTER(call);
	struct stream *s = get_stream(call, sh);
	if (!s) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (n == 0) {
		unlock();
		return CUDA_SUCCESS;
	}
	int dpin = 0, spin = 0;
	char *d, *sr;
	if (dst_dev) d = dev_bytes(call, "dst", dst, n);
	else d = host_ptr(call, "dst", (void *)dst, n, &dpin) ? (char *)dst : NULL;
	if (src_dev) sr = dev_bytes(call, "src", src, n);
	else sr = host_ptr(call, "src", (void *)src, n, &spin) ? (char *)src : NULL;
	if (!d || !sr) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	cnt.copies++;
	struct op *o = calloc(1, sizeof *o);
	o->kind = OP_COPY, o->dst = d, o->src = sr, o->n = n;
	o->ready_ns = now_ns() + copy_delay_ns;
	touch(o, dst, n, dst_dev);
	touch(o, src, n, src_dev);
	if (!src_dev && !spin) { // staged now: the caller may reuse its buffer at once
		cnt.pageable_copies++;
		o->staged = malloc(n);
		memcpy(o->staged, sr, n);
		o->nr = 1;
	}
	enqueue(s, o);
	if (!dst_dev && !dpin) { // returns once the bytes are there
		cnt.pageable_copies++;
		drain(s);
	}
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuMemcpyHtoDAsync_v2_(CUdeviceptr dst, const void *src, size_t n, uintptr_t s);
EXPORT result cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, uintptr_t s) { return dirty(cuMemcpyHtoDAsync_v2_(dst, src, n, s)); }
static CUresult cuMemcpyHtoDAsync_v2_(CUdeviceptr dst, const void *src, size_t n, uintptr_t s) {
	return copy_op("cuMemcpyHtoDAsync_v2", dst, 1, (uintptr_t)src, 0, n, s);
}
static CUresult cuMemcpyDtoHAsync_v2_(void *dst, CUdeviceptr src, size_t n, uintptr_t s);
EXPORT result cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, uintptr_t s) { return dirty(cuMemcpyDtoHAsync_v2_(dst, src, n, s)); }
static CUresult cuMemcpyDtoHAsync_v2_(void *dst, CUdeviceptr src, size_t n, uintptr_t s) {
	return copy_op("cuMemcpyDtoHAsync_v2", (uintptr_t)dst, 0, src, 1, n, s);
}
static CUresult cuMemcpyDtoDAsync_v2_(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s);
EXPORT result cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) { return dirty(cuMemcpyDtoDAsync_v2_(dst, src, n, s)); }
static CUresult cuMemcpyDtoDAsync_v2_(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) {
	return copy_op("cuMemcpyDtoDAsync_v2", dst, 1, src, 1, n, s);
}
// cuMemcpyAsync infers each side's kind from the address (unified
// addressing).
static CUresult cuMemcpyAsync_(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s);
EXPORT result cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) { return dirty(cuMemcpyAsync_(dst, src, n, s)); }
static CUresult cuMemcpyAsync_(CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) {
	return copy_op("cuMemcpyAsync", dst, is_dev_addr(dst), src, is_dev_addr(src), n, s);
}

static CUresult cuMemsetD32Async_(CUdeviceptr dst, unsigned v, size_t n, uintptr_t sh);
EXPORT result cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, uintptr_t sh) { return dirty(cuMemsetD32Async_(dst, v, n, sh)); }
static CUresult cuMemsetD32Async_(CUdeviceptr dst, unsigned v, size_t n, uintptr_t sh) {
	ENTER("cuMemsetD32Async");
	struct stream *s = get_stream("cuMemsetD32Async", sh);
	if (!s) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (dst % 4) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemsetD32Async", "dstDevice %#llx is not 4-byte aligned", dst);
	if (n == 0) {
		unlock();
		return CUDA_SUCCESS;
	}
	char *d = dev_bytes("cuMemsetD32Async", "dstDevice", dst, n * 4);
	if (!d) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	cnt.memsets++;
	struct op *o = calloc(1, sizeof *o);
	o->kind = OP_MEMSET32, o->dst = d, o->n = n, o->val = v;
	touch(o, dst, n * 4, 1);
	enqueue(s, o);
	unlock();
	return CUDA_SUCCESS;
}

// ---- streams and events ---------------------------------------------------------

static CUresult cuStreamCreate_(void **ph, unsigned flags);
EXPORT result cuStreamCreate(void **ph, unsigned flags) { return dirty(cuStreamCreate_(ph, flags)); }
static CUresult cuStreamCreate_(void **ph, unsigned flags) {
	ENTER("cuStreamCreate");
	if (!ph) FAIL(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate", "phStream is NULL");
	if (flags & ~1u) FAIL(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate", "unknown Flags %#x (CU_STREAM_DEFAULT 0, CU_STREAM_NON_BLOCKING 1)", flags);
	struct stream *s = new_obj(sizeof *s, K_STREAM, cur);
	s->flags = flags;
	*ph = s;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuStreamDestroy_v2_(uintptr_t h);
EXPORT result cuStreamDestroy_v2(uintptr_t h) { return dirty(cuStreamDestroy_v2_(h)); }
static CUresult cuStreamDestroy_v2_(uintptr_t h) {
	ENTER("cuStreamDestroy_v2");
	if (h == 0) FAIL(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy_v2", "the legacy default stream cannot be destroyed");
	struct stream *s = (struct stream *)live("cuStreamDestroy_v2", h, K_STREAM);
	if (!s) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	drain(s); // queued work still completes
	s->o.alive = 0;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuStreamSynchronize_(uintptr_t h);
EXPORT result cuStreamSynchronize(uintptr_t h) { return dirty(cuStreamSynchronize_(h)); }
static CUresult cuStreamSynchronize_(uintptr_t h) {
	ENTER("cuStreamSynchronize");
	struct stream *s = get_stream("cuStreamSynchronize", h);
	if (!s) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	drain(s);
	cnt.syncs++;
	CUresult r = cur->sticky;
	unlock();
	return r;
}

static CUresult cuStreamWaitEvent_(uintptr_t sh, uintptr_t eh, unsigned flags);
EXPORT result cuStreamWaitEvent(uintptr_t sh, uintptr_t eh, unsigned flags) { return dirty(cuStreamWaitEvent_(sh, eh, flags)); }
static CUresult cuStreamWaitEvent_(uintptr_t sh, uintptr_t eh, unsigned flags) {
	ENTER("cuStreamWaitEvent");
	struct stream *s = get_stream("cuStreamWaitEvent", sh);
	struct event *e = (struct event *)live("cuStreamWaitEvent", eh, K_EVENT);
	if (!s || !e) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (flags != 0) FAIL(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent", "Flags must be 0 (CU_EVENT_WAIT_DEFAULT), got %u", flags);
	if (e->s && e->s != s && e->s->done_seq < e->seq) {
		struct op *o = calloc(1, sizeof *o);
		o->kind = OP_WAIT, o->other = e->s, o->other_seq = e->seq;
		enqueue(s, o);
	}
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuEventCreate_(void **ph, unsigned flags);
EXPORT result cuEventCreate(void **ph, unsigned flags) { return dirty(cuEventCreate_(ph, flags)); }
static CUresult cuEventCreate_(void **ph, unsigned flags) {
	ENTER("cuEventCreate");
	if (!ph) FAIL(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "phEvent is NULL");
	if (flags & ~7u) FAIL(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "unknown Flags %#x", flags);
	if ((flags & 4) && !(flags & 2)) FAIL(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING");
	struct event *e = new_obj(sizeof *e, K_EVENT, cur);
	e->flags = flags;
	*ph = e;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuEventDestroy_v2_(uintptr_t h);
EXPORT result cuEventDestroy_v2(uintptr_t h) { return dirty(cuEventDestroy_v2_(h)); }
static CUresult cuEventDestroy_v2_(uintptr_t h) {
	ENTER("cuEventDestroy_v2");
	struct event *e = (struct event *)live("cuEventDestroy_v2", h, K_EVENT);
	if (!e) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	e->o.alive = 0;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuEventRecord_(uintptr_t eh, uintptr_t sh);
EXPORT result cuEventRecord(uintptr_t eh, uintptr_t sh) { return dirty(cuEventRecord_(eh, sh)); }
static CUresult cuEventRecord_(uintptr_t eh, uintptr_t sh) {
	ENTER("cuEventRecord");
	struct event *e = (struct event *)live("cuEventRecord", eh, K_EVENT);
	struct stream *s = get_stream("cuEventRecord", sh);
	if (!e || !s) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	e->s = s, e->seq = s->enq_seq;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuEventQuery_(uintptr_t eh);
EXPORT result cuEventQuery(uintptr_t eh) { return dirty(cuEventQuery_(eh)); }
static CUresult cuEventQuery_(uintptr_t eh) {
	ENTER("cuEventQuery");
	struct event *e = (struct event *)live("cuEventQuery", eh, K_EVENT);
	if (!e) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	CUresult r = CUDA_SUCCESS;
	if (e->s && !progress(e->s, e->seq, 0)) r = CUDA_ERROR_NOT_READY;
	if (!r) r = cur->sticky;
	unlock();
	return r;
}

static CUresult cuEventSynchronize_(uintptr_t eh);
EXPORT result cuEventSynchronize(uintptr_t eh) { return dirty(cuEventSynchronize_(eh)); }
static CUresult cuEventSynchronize_(uintptr_t eh) {
	ENTER("cuEventSynchronize");
	struct event *e = (struct event *)live("cuEventSynchronize", eh, K_EVENT);
	if (!e) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (e->s) progress(e->s, e->seq, 1);
	cnt.syncs++;
	CUresult r = cur->sticky;
	unlock();
	return r;
}

// ---- modules and kernels -----------------------------------------------------------

// JIT options (CUjit_option) known to CUDA 12: 0 to 33.
#define JIT_INFO_LOG_BUFFER 3
#define JIT_INFO_LOG_BUFFER_SIZE 4
#define JIT_ERROR_LOG_BUFFER 5
#define JIT_ERROR_LOG_BUFFER_SIZE 6
#define JIT_NUM_OPTIONS 34

static const char *skip_ws(const char *p) {
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
	return p;
}

static int is_ident(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

// parse_ptx finds every .entry with its parameter sizes. It returns the
// number found, or -1 with why in err.
static int parse_ptx(const char *ptx, struct func ***out, char *err, size_t errn) {
	int n = 0, cap = 0;
	struct func **fs = NULL;
	if (!strstr(ptx, ".version") || !strstr(ptx, ".target")) {
		snprintf(err, errn, "ptx: no .version or .target directive");
		return -1;
	}
	for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p, ".entry")) {
		p = skip_ws(p + 6);
		const char *name = p;
		while (is_ident(*p)) p++;
		size_t nlen = (size_t)(p - name);
		p = skip_ws(p);
		if (nlen == 0 || *p != '(') {
			snprintf(err, errn, "ptx: cannot read the .entry at byte %ld", (long)(name - ptx));
			goto fail;
		}
		struct func *f = calloc(1, sizeof *f);
		f->name = strndup(name, nlen);
		if (n == cap) fs = realloc(fs, sizeof *fs * (size_t)(cap = cap ? 2 * cap : 8));
		fs[n++] = f;
		p++;
		for (;;) {
			p = skip_ws(p);
			if (*p == ')') break;
			if (*p == ',') {
				p++;
				continue;
			}
			if (strncmp(p, ".param", 6) != 0) {
				snprintf(err, errn, "ptx: kernel %s: cannot read a parameter at \"%.20s\"", f->name, p);
				goto fail;
			}
			p = skip_ws(p + 6);
			if (strncmp(p, ".align", 6) == 0) {
				p = skip_ws(p + 6);
				while (*p >= '0' && *p <= '9') p++;
				p = skip_ws(p);
			}
			int bits = 0;
			if (p[0] == '.' && strchr("busf", p[1])) bits = atoi(p + 2);
			if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
				snprintf(err, errn, "ptx: kernel %s: unknown parameter type at \"%.20s\"", f->name, p);
				goto fail;
			}
			p += 2;
			while (*p >= '0' && *p <= '9') p++;
			p = skip_ws(p);
			while (is_ident(*p)) p++;
			long count = 1;
			if (*p == '[') count = strtol(p + 1, (char **)&p, 10), p = strchr(p, ']') ? strchr(p, ']') + 1 : p;
			f->sig.sizes = realloc(f->sig.sizes, sizeof(int) * (size_t)(f->sig.n + 1));
			f->sig.sizes[f->sig.n++] = (int)(bits / 8 * count);
		}
	}
	if (n == 0) {
		snprintf(err, errn, "ptx: no .entry found");
		goto fail;
	}
	*out = fs;
	return n;
fail:
	for (int i = 0; i < n; i++) free(fs[i]->name), free(fs[i]->sig.sizes), free(fs[i]);
	free(fs);
	return -1;
}

// write_log copies msg into a JIT log buffer of size n and writes back
// the bytes used (including the NUL) where the size option's value was.
static void write_log(char *buf, void **size_val, const char *msg) {
	size_t n = (size_t)(uintptr_t)*size_val;
	if (!buf || n == 0) return;
	size_t m = strlen(msg);
	if (m >= n) m = n - 1;
	memcpy(buf, msg, m);
	buf[m] = 0;
	*size_val = (void *)(uintptr_t)(m + 1);
}

static CUresult cuModuleLoadDataEx_(void **pm, const void *image, unsigned nopt, const int *opts, void **vals);
EXPORT result cuModuleLoadDataEx(void **pm, const void *image, unsigned nopt, const int *opts, void **vals) { return dirty(cuModuleLoadDataEx_(pm, image, nopt, opts, vals)); }
static CUresult cuModuleLoadDataEx_(void **pm, const void *image, unsigned nopt, const int *opts, void **vals) {
	static const char *call = "cuModuleLoadDataEx";
	ENTER(call);
	if (!pm) FAIL(CUDA_ERROR_INVALID_VALUE, call, "module is NULL");
	if (!image) FAIL(CUDA_ERROR_INVALID_VALUE, call, "image is NULL");
	if (nopt > 0 && (!opts || !vals)) FAIL(CUDA_ERROR_INVALID_VALUE, call, "%u options but options %p, optionValues %p", nopt, (void *)opts, (void *)vals);
	char *info = NULL, *errb = NULL;
	void **info_n = NULL, **err_n = NULL;
	for (unsigned i = 0; i < nopt; i++) {
		if (opts[i] < 0 || opts[i] >= JIT_NUM_OPTIONS) FAIL(CUDA_ERROR_INVALID_VALUE, call, "option %u: unknown CUjit_option %d", i, opts[i]);
		switch (opts[i]) {
		case JIT_INFO_LOG_BUFFER: info = vals[i]; break;
		case JIT_ERROR_LOG_BUFFER: errb = vals[i]; break;
		case JIT_INFO_LOG_BUFFER_SIZE: info_n = &vals[i]; break;
		case JIT_ERROR_LOG_BUFFER_SIZE: err_n = &vals[i]; break;
		}
	}
	if ((info && !info_n) || (errb && !err_n)) FAIL(CUDA_ERROR_INVALID_VALUE, call, "a JIT log buffer without its size option");
	if ((info_n && (uintptr_t)*info_n > 0 && !info) || (err_n && (uintptr_t)*err_n > 0 && !errb))
		FAIL(CUDA_ERROR_INVALID_VALUE, call, "a JIT log size without its buffer");
	if ((info && is_dev_addr((uintptr_t)info)) || (errb && is_dev_addr((uintptr_t)errb)))
		FAIL(CUDA_ERROR_INVALID_VALUE, call, "a JIT log buffer is a device address");
	char why[256];
	struct func **fs;
	int n = parse_ptx(image, &fs, why, sizeof why);
	if (n < 0) {
		if (err_n) write_log(errb, err_n, why);
		if (info_n) write_log(info, info_n, "");
		unlock();
		return CUDA_ERROR_INVALID_PTX;
	}
	struct module *m = new_obj(sizeof *m, K_MODULE, cur);
	m->n = n, m->funcs = fs;
	for (int i = 0; i < n; i++) {
		fs[i]->o = (struct obj){K_FUNC, 1, next_id++, cur};
		fs[i]->m = m;
		if (n_objs < MAX_OBJS) objs[n_objs++] = &fs[i]->o;
	}
	char msg[128];
	snprintf(msg, sizeof msg, "standin: %d kernels loaded", n);
	if (info_n) write_log(info, info_n, msg);
	if (err_n) write_log(errb, err_n, "");
	*pm = m;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuModuleLoadData_(void **pm, const void *image);
EXPORT result cuModuleLoadData(void **pm, const void *image) { return dirty(cuModuleLoadData_(pm, image)); }
static CUresult cuModuleLoadData_(void **pm, const void *image) { return cuModuleLoadDataEx(pm, image, 0, NULL, NULL); }

static CUresult cuModuleUnload_(uintptr_t h);
EXPORT result cuModuleUnload(uintptr_t h) { return dirty(cuModuleUnload_(h)); }
static CUresult cuModuleUnload_(uintptr_t h) {
	ENTER("cuModuleUnload");
	struct module *m = (struct module *)live("cuModuleUnload", h, K_MODULE);
	if (!m) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	for (int i = 0; i < n_objs; i++) { // a kernel of it still queued
		if (objs[i]->kind != K_STREAM || objs[i]->ctx != cur) continue;
		for (struct op *o = ((struct stream *)objs[i])->head; o; o = o->next)
			if (o->kind == OP_KERNEL && o->f->m == m) {
				violate("cuModuleUnload", "module %lld unloaded while its kernel %s is queued", m->o.id, o->f->name);
				drain_ctx(cur);
				break;
			}
	}
	m->o.alive = 0;
	for (int i = 0; i < m->n; i++) m->funcs[i]->o.alive = 0;
	unlock();
	return CUDA_SUCCESS;
}

static CUresult cuModuleGetFunction_(void **pf, uintptr_t h, const char *name);
EXPORT result cuModuleGetFunction(void **pf, uintptr_t h, const char *name) { return dirty(cuModuleGetFunction_(pf, h, name)); }
static CUresult cuModuleGetFunction_(void **pf, uintptr_t h, const char *name) {
	ENTER("cuModuleGetFunction");
	if (!pf || !name) FAIL(CUDA_ERROR_INVALID_VALUE, "cuModuleGetFunction", "hfunc %p, name %p", (void *)pf, (void *)name);
	struct module *m = (struct module *)live("cuModuleGetFunction", h, K_MODULE);
	if (!m) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	for (int i = 0; i < m->n; i++)
		if (strcmp(m->funcs[i]->name, name) == 0) {
			*pf = m->funcs[i];
			unlock();
			return CUDA_SUCCESS;
		}
	unlock();
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult cuLaunchKernel_(uintptr_t fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, uintptr_t sh, void **params, void **extra);
EXPORT result cuLaunchKernel(uintptr_t fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, uintptr_t sh, void **params, void **extra) { return dirty(cuLaunchKernel_(fh, gx, gy, gz, bx, by, bz, shared, sh, params, extra)); }
static CUresult cuLaunchKernel_(uintptr_t fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, uintptr_t sh, void **params, void **extra) {
	static const char *call = "cuLaunchKernel";
	ENTER(call);
	struct func *f = (struct func *)live(call, fh, K_FUNC);
	struct stream *s = get_stream(call, sh);
	if (!f || !s) {
		unlock();
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (!gx || !gy || !gz || !bx || !by || !bz)
		FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: empty grid (%u,%u,%u) or block (%u,%u,%u)", f->name, gx, gy, gz, bx, by, bz);
	if (gx > 0x7fffffffu || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024)
		FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: grid (%u,%u,%u) or block (%u,%u,%u) beyond the limits", f->name, gx, gy, gz, bx, by, bz);
	if (shared > 48 * 1024) FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: %u bytes of dynamic shared memory (48 KiB without opt-in)", f->name, shared);
	if (extra) FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: both kernelParams and extra (ferry passes parameters by kernelParams)", f->name);
	int np = f->sig.n;
	if (np > 0 && !params) FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s takes %d parameters, kernelParams is NULL", f->name, np);
	for (int i = 0; i < np; i++) {
		if (!params[i]) FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: kernelParams[%d] is NULL", f->name, i);
		if (is_dev_addr((uintptr_t)params[i])) FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: kernelParams[%d] is a device address, not a host pointer to the value", f->name, i);
	}
	// Parameters laid out in one buffer (as ferry's Args does) must not
	// overlap: the driver reads sizes[i] bytes from each.
	for (int i = 0; i + 1 < np; i++) {
		intptr_t gap = (char *)params[i + 1] - (char *)params[i];
		if (gap > 0 && gap < f->sig.sizes[i])
			FAIL(CUDA_ERROR_INVALID_VALUE, call, "%s: parameter %d is %d bytes in the PTX, but parameter %d starts %ld bytes after it",
			     f->name, i, f->sig.sizes[i], i + 1, (long)gap);
	}
	cnt.launches++;
	struct op *o = calloc(1, sizeof *o);
	o->kind = OP_KERNEL, o->f = f;
	o->grid[0] = gx, o->grid[1] = gy, o->grid[2] = gz, o->block[0] = bx, o->block[1] = by, o->block[2] = bz;
	o->shared = shared;
	o->params = calloc((size_t)np + 1, sizeof(void *));
	for (int i = 0; i < np; i++) { // the driver copies the values at launch
		o->params[i] = malloc((size_t)f->sig.sizes[i]);
		memcpy(o->params[i], params[i], (size_t)f->sig.sizes[i]);
		// A pointer-sized parameter holding a device address: the kernel
		// may use that allocation until it has run.
		if (f->sig.sizes[i] == 8) {
			CUdeviceptr p;
			memcpy(&p, params[i], 8);
			struct range *r = is_dev_addr(p) ? find_range(p, 0, 1) : NULL;
			if (r && r->alive) touch(o, r->base, r->size, 1);
		}
	}
	enqueue(s, o);
	unlock();
	return CUDA_SUCCESS;
}

// ---- cuBLAS ------------------------------------------------------------------------

#define BLAS_ENTER(call)                                      \
	lock();                                               \
	do {                                                  \
		if (need_ctx(call)) {                         \
			unlock();                             \
			return CUBLAS_STATUS_NOT_INITIALIZED; \
		}                                             \
	} while (0)

static struct blas *live_blas(const char *call, uintptr_t h) { return (struct blas *)live(call, h, K_BLAS); }

static cublasStatus_t cublasGetProperty_(int type, int *value);
EXPORT result cublasGetProperty(int type, int *value) { return dirty(cublasGetProperty_(type, value)); }
static cublasStatus_t cublasGetProperty_(int type, int *value) {
	if (!value || type < 0 || type > 2) {
		lock();
		FAIL(CUBLAS_STATUS_INVALID_VALUE, "cublasGetProperty", "type %d, value %p", type, (void *)value);
	}
	static const int v[3] = {12, 4, 5};
	*value = v[type];
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasCreate_v2_(void **ph);
EXPORT result cublasCreate_v2(void **ph) { return dirty(cublasCreate_v2_(ph)); }
static cublasStatus_t cublasCreate_v2_(void **ph) {
	BLAS_ENTER("cublasCreate_v2");
	if (!ph) FAIL(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate_v2", "handle is NULL");
	*ph = new_obj(sizeof(struct blas), K_BLAS, cur);
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasDestroy_v2_(uintptr_t h);
EXPORT result cublasDestroy_v2(uintptr_t h) { return dirty(cublasDestroy_v2_(h)); }
static cublasStatus_t cublasDestroy_v2_(uintptr_t h) {
	BLAS_ENTER("cublasDestroy_v2");
	struct blas *b = live_blas("cublasDestroy_v2", h);
	if (!b) {
		unlock();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	drain(b->s ? b->s : get_stream("cublasDestroy_v2", 0)); // cublasDestroy synchronises
	b->o.alive = 0;
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasSetStream_v2_(uintptr_t h, uintptr_t sh);
EXPORT result cublasSetStream_v2(uintptr_t h, uintptr_t sh) { return dirty(cublasSetStream_v2_(h, sh)); }
static cublasStatus_t cublasSetStream_v2_(uintptr_t h, uintptr_t sh) {
	BLAS_ENTER("cublasSetStream_v2");
	struct blas *b = live_blas("cublasSetStream_v2", h);
	if (!b) {
		unlock();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	struct stream *s = sh ? get_stream("cublasSetStream_v2", sh) : NULL;
	if (sh && !s) {
		unlock();
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	b->s = s;
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasSetMathMode_(uintptr_t h, int mode);
EXPORT result cublasSetMathMode(uintptr_t h, int mode) { return dirty(cublasSetMathMode_(h, mode)); }
static cublasStatus_t cublasSetMathMode_(uintptr_t h, int mode) {
	BLAS_ENTER("cublasSetMathMode");
	struct blas *b = live_blas("cublasSetMathMode", h);
	if (!b) {
		unlock();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	int base = mode & ~16;
	if (base < 0 || base > 3) FAIL(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode", "unknown cublasMath_t %d", mode);
	b->math = base;
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasSetWorkspace_v2_(uintptr_t h, CUdeviceptr ws, size_t n);
EXPORT result cublasSetWorkspace_v2(uintptr_t h, CUdeviceptr ws, size_t n) { return dirty(cublasSetWorkspace_v2_(h, ws, n)); }
static cublasStatus_t cublasSetWorkspace_v2_(uintptr_t h, CUdeviceptr ws, size_t n) {
	BLAS_ENTER("cublasSetWorkspace_v2");
	struct blas *b = live_blas("cublasSetWorkspace_v2", h);
	if (!b) {
		unlock();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	if (n > 0) {
		if (ws % 256) FAIL(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace_v2", "workspace %#llx is not 256-byte aligned", ws);
		if (!dev_bytes("cublasSetWorkspace_v2", "workspace", ws, n)) {
			unlock();
			return CUBLAS_STATUS_INVALID_VALUE;
		}
	}
	b->ws = ws, b->ws_size = n;
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

// matrix checks operand X of a strided batch for call: rows x cols
// elements of esize bytes, column-major with leading dimension ld, stride
// between matrices, the address aligned to the element; it returns its
// host bytes.
static void *matrix_of(const char *call, const char *what, CUdeviceptr p, int rows, int cols, int ld, long long stride,
                       int batch, size_t esize, struct op *o) {
	if (ld < (rows > 1 ? rows : 1)) {
		violate(call, "ld%s %d < %d rows", what, ld, rows);
		return NULL;
	}
	if (rows == 0 || cols == 0 || batch == 0) return (void *)1; // nothing is read
	long long last = (long long)(cols - 1) * ld + rows - 1 + (long long)(batch - 1) * stride;
	if (stride < 0 || last < 0) {
		violate(call, "stride%s %lld", what, stride);
		return NULL;
	}
	if (p % esize) {
		violate(call, "%s %#llx is not aligned to its %zu-byte elements", what, p, esize);
		return NULL;
	}
	size_t n = (size_t)(last + 1) * esize;
	void *h = dev_bytes(call, what, p, n);
	if (h) touch(o, p, n, 1);
	return h;
}

static float *matrix(const char *what, CUdeviceptr p, int rows, int cols, int ld, long long stride, int batch, struct op *o) {
	return (float *)matrix_of("cublasSgemmStridedBatched", what, p, rows, cols, ld, stride, batch, 4, o);
}

static cublasStatus_t cublasSgemmStridedBatched_(uintptr_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                                                CUdeviceptr A, int lda, long long sa, CUdeviceptr B, int ldb, long long sb,
                                                const float *beta, CUdeviceptr C, int ldc, long long sc, int batch);
EXPORT result cublasSgemmStridedBatched(uintptr_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                                                CUdeviceptr A, int lda, long long sa, CUdeviceptr B, int ldb, long long sb,
                                                const float *beta, CUdeviceptr C, int ldc, long long sc, int batch) { return dirty(cublasSgemmStridedBatched_(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch)); }
static cublasStatus_t cublasSgemmStridedBatched_(uintptr_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                                                CUdeviceptr A, int lda, long long sa, CUdeviceptr B, int ldb, long long sb,
                                                const float *beta, CUdeviceptr C, int ldc, long long sc, int batch) {
	static const char *call = "cublasSgemmStridedBatched";
	BLAS_ENTER(call);
	struct blas *b = live_blas(call, h);
	if (!b) {
		unlock();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	if (ta < 0 || ta > 2 || tb < 0 || tb > 2) FAIL(CUBLAS_STATUS_INVALID_VALUE, call, "transa %d, transb %d", ta, tb);
	if (m < 0 || n < 0 || k < 0 || batch < 0) FAIL(CUBLAS_STATUS_INVALID_VALUE, call, "m %d, n %d, k %d, batchCount %d", m, n, k, batch);
	int pin;
	if (!alpha || !beta || !host_ptr(call, "alpha", alpha, 4, &pin) || !host_ptr(call, "beta", beta, 4, &pin)) {
		if (!alpha || !beta) violate(call, "alpha %p, beta %p", (void *)alpha, (void *)beta);
		unlock();
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	struct op *o = calloc(1, sizeof *o);
	o->kind = OP_SGEMM;
	struct sgemm_args *g = &o->g;
	*g = (struct sgemm_args){ta != 0, tb != 0, m, n, k, b->math, *alpha, *beta, NULL, NULL, NULL, lda, ldb, ldc, sa, sb, sc, batch, 0, 0, 0, 0};
	g->a = matrix("A", A, ta ? k : m, ta ? m : k, lda, sa, batch, o);
	g->b = matrix("B", B, tb ? n : k, tb ? k : n, ldb, sb, batch, o);
	g->c = matrix("C", C, m, n, ldc, sc, batch, o);
	if (!g->a || !g->b || !g->c) {
		free(o);
		unlock();
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (b->ws_size) touch(o, b->ws, b->ws_size, 1);
	cnt.sgemms++;
	if (m == 0 || n == 0 || batch == 0) {
		free(o);
		unlock();
		return CUBLAS_STATUS_SUCCESS;
	}
	enqueue(b->s ? b->s : get_stream(call, 0), o);
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmStridedBatchedEx, for the types ferry uses with
// CUBLAS_COMPUTE_32F: bfloat16 A and B with a bfloat16 or float32 C, or
// all float32. Another combination is answered CUBLAS_STATUS_NOT_SUPPORTED,
// as cuBLAS answers a combination it has no kernel for; another compute
// type is a violation (the stand-in models only COMPUTE_32F, whose alpha
// and beta are float), as is an algo that is not a cublasGemmAlgo_t.
static cublasStatus_t cublasGemmStridedBatchedEx_(uintptr_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                                                  CUdeviceptr A, int atype, int lda, long long sa, CUdeviceptr B, int btype,
                                                  int ldb, long long sb, const float *beta, CUdeviceptr C, int ctype, int ldc,
                                                  long long sc, int batch, int compute, int algo);
EXPORT result cublasGemmStridedBatchedEx(uintptr_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                                         CUdeviceptr A, int atype, int lda, long long sa, CUdeviceptr B, int btype, int ldb,
                                         long long sb, const float *beta, CUdeviceptr C, int ctype, int ldc, long long sc,
                                         int batch, int compute, int algo) {
	return dirty(cublasGemmStridedBatchedEx_(h, ta, tb, m, n, k, alpha, A, atype, lda, sa, B, btype, ldb, sb, beta, C, ctype,
	                                         ldc, sc, batch, compute, algo));
}
static cublasStatus_t cublasGemmStridedBatchedEx_(uintptr_t h, int ta, int tb, int m, int n, int k, const float *alpha,
                                                  CUdeviceptr A, int atype, int lda, long long sa, CUdeviceptr B, int btype,
                                                  int ldb, long long sb, const float *beta, CUdeviceptr C, int ctype, int ldc,
                                                  long long sc, int batch, int compute, int algo) {
	static const char *call = "cublasGemmStridedBatchedEx";
	BLAS_ENTER(call);
	struct blas *b = live_blas(call, h);
	if (!b) {
		unlock();
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	if (ta < 0 || ta > 2 || tb < 0 || tb > 2) FAIL(CUBLAS_STATUS_INVALID_VALUE, call, "transa %d, transb %d", ta, tb);
	if (m < 0 || n < 0 || k < 0 || batch < 0) FAIL(CUBLAS_STATUS_INVALID_VALUE, call, "m %d, n %d, k %d, batchCount %d", m, n, k, batch);
	if (compute != CUBLAS_COMPUTE_32F)
		FAIL(CUBLAS_STATUS_NOT_SUPPORTED, call, "computeType %d: the stand-in models CUBLAS_COMPUTE_32F (68) only", compute);
	if (!(algo == -1 || algo == 99 || (algo >= 0 && algo <= 23) || (algo >= 100 && algo <= 115)))
		FAIL(CUBLAS_STATUS_INVALID_VALUE, call, "algo %d is not a cublasGemmAlgo_t", algo);
	int bf = atype == CUDA_R_16BF && btype == CUDA_R_16BF && (ctype == CUDA_R_16BF || ctype == CUDA_R_32F);
	int f32 = atype == CUDA_R_32F && btype == CUDA_R_32F && ctype == CUDA_R_32F;
	if (!bf && !f32) {
		unlock();
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	int pin;
	if (!alpha || !beta || !host_ptr(call, "alpha", alpha, 4, &pin) || !host_ptr(call, "beta", beta, 4, &pin)) {
		if (!alpha || !beta) violate(call, "alpha %p, beta %p", (void *)alpha, (void *)beta);
		unlock();
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	struct op *o = calloc(1, sizeof *o);
	o->kind = OP_SGEMM;
	struct sgemm_args *g = &o->g;
	*g = (struct sgemm_args){ta != 0, tb != 0, m, n, k, b->math, *alpha, *beta, NULL, NULL, NULL, lda, ldb, ldc, sa, sb, sc, batch,
	                         1, atype, btype, ctype};
	size_t ea = atype == CUDA_R_16BF ? 2 : 4, eb = btype == CUDA_R_16BF ? 2 : 4, ec = ctype == CUDA_R_16BF ? 2 : 4;
	g->a = matrix_of(call, "A", A, ta ? k : m, ta ? m : k, lda, sa, batch, ea, o);
	g->b = matrix_of(call, "B", B, tb ? n : k, tb ? k : n, ldb, sb, batch, eb, o);
	g->c = matrix_of(call, "C", C, m, n, ldc, sc, batch, ec, o);
	if (!g->a || !g->b || !g->c) {
		free(o);
		unlock();
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (b->ws_size) touch(o, b->ws, b->ws_size, 1);
	cnt.gemms_ex++;
	if (m == 0 || n == 0 || batch == 0) {
		free(o);
		unlock();
		return CUBLAS_STATUS_SUCCESS;
	}
	enqueue(b->s ? b->s : get_stream(call, 0), o);
	unlock();
	return CUBLAS_STATUS_SUCCESS;
}

// ---- for tests (standin.h documents them) -------------------------------------------------------------

EXPORT long long standin_violations(void) {
	lock();
	long long n = n_violations;
	unlock();
	return n;
}

EXPORT const char *standin_report(void) {
	lock();
	size_t n = 64;
	for (int i = 0; i < n_logged; i++) n += strlen(logged[i]) + 1;
	free(report_buf);
	report_buf = malloc(n);
	report_buf[0] = 0;
	size_t off = 0;
	for (int i = 0; i < n_logged; i++) off += (size_t)sprintf(report_buf + off, "%s\n", logged[i]);
	if (n_violations > n_logged) sprintf(report_buf + off, "... and %lld more\n", n_violations - n_logged);
	unlock();
	return report_buf;
}

EXPORT void standin_reset(void) {
	lock();
	for (int i = 0; i < n_logged; i++) free(logged[i]);
	n_logged = 0;
	n_violations = 0;
	memset(&cnt, 0, sizeof cnt - sizeof cnt.live_dev_bytes);
	unlock();
}

EXPORT long long standin_counter(const char *name) {
	static const struct {
		const char *name;
		long long *p;
	} cs[] = {
	    {"launches", &cnt.launches}, {"launches_run", &cnt.launches_run}, {"sgemms", &cnt.sgemms}, {"gemms_ex", &cnt.gemms_ex},
	    {"copies", &cnt.copies}, {"pageable_copies", &cnt.pageable_copies}, {"memsets", &cnt.memsets},
	    {"syncs", &cnt.syncs}, {"default_stream", &cnt.default_stream}, {"live_dev_bytes", &cnt.live_dev_bytes},
	};
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
		if (strcmp(cs[i].name, name) == 0) {
			lock();
			long long v = *cs[i].p;
			unlock();
			return v;
		}
	return -1;
}

EXPORT void standin_set_copy_delay_us(long long us) {
	lock();
	copy_delay_ns = us * 1000;
	unlock();
}

EXPORT void standin_set_kernel_runner(runner_fn f) {
	lock();
	runner = f;
	unlock();
}

EXPORT void standin_violation(const char *what, const char *msg) {
	lock();
	violate(what, "%s", msg);
	unlock();
}

// standin_resolve returns the host bytes behind device address p and how
// many bytes of its allocation follow p, or NULL if p is not live device
// memory (for kernel runners).
EXPORT void *standin_resolve(CUdeviceptr p, size_t *avail) {
	lock();
	struct range *r = is_dev_addr(p) ? find_range(p, 0, 1) : NULL;
	void *h = NULL;
	*avail = 0;
	if (r && r->alive) {
		h = r->host + (p - r->base);
		*avail = r->size - (p - r->base);
	}
	unlock();
	return h;
}
