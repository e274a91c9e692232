// A strict stand-in for NCCL (libnccl.so.2): the entry points ferry's
// binding (package ferry/dist/nccl) calls, with NCCL's real signatures
// (nccl.h), so that the binding's purego calls run end to end on a machine
// without a GPU or NCCL.
//
// What it models. A rank is a thread (a goroutine's OS thread) of this
// process; ranks that share a unique id form a clique, found in a table
// here. Device pointers are host addresses. Each collective is posted
// without blocking, as NCCL enqueues on a stream; when the last rank of
// the clique has posted its n-th collective, that thread runs the n-th
// collective for every rank (float32 only, summing in rank order, into a
// temporary, so in-place calls are exact) and marks it complete on every
// rank's stream. standin_nccl_stream_wait(stream) is the test's
// cuStreamSynchronize: it returns when the collectives posted on the
// stream have completed.
//
// What it checks, counting each breach as a violation (with a line in
// standin_nccl_report):
//   - null pointers where NCCL needs one, counts that look like negative
//     numbers cast to size_t, ranks and roots outside the clique;
//   - datatypes and reduction ops that are not NCCL's;
//   - a communicator that was destroyed or never created;
//   - a unique id that is not, byte for byte, one that ncclGetUniqueId
//     issued (a 128-byte struct passed by value arrives on the stack per
//     the System V ABI; a binding that passes a pointer or garbles the
//     bytes is caught here);
//   - ranks of one clique that disagree on nranks, or join twice;
//   - the n-th collectives of a clique's ranks that differ in kind,
//     count, datatype, op or root;
//   - ncclGroupEnd without ncclGroupStart on the same thread (NCCL's
//     group depth is per thread);
//   - ncclCommDestroy while collectives of the communicator are still
//     waiting for peers;
//   - a stream wait or init that times out (a deadlock in real NCCL).
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_standin.h"

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
} ncclResult_t;

enum { ncclFloat32 = 7, ncclNumTypes = 10 };
enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 };

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef void *cudaStream_t;

enum kind { K_ALLREDUCE, K_REDUCESCATTER, K_ALLGATHER, K_BROADCAST };
static const char *kind_name[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};

#define MAXRANKS 64
#define MAXIDS 1024
#define MAXCOMMS 4096
#define MAXSTREAMS 256
#define TIMEOUT_MS 20000
#define COMM_MAGIC 0x4e43434cu

struct op {
	enum kind kind;
	const void *send;
	void *recv;
	size_t count; // per rank: the all-reduce's and broadcast's count, reduce-scatter's recvcount, all-gather's sendcount
	int dt, redop, root;
	cudaStream_t stream;
	struct ncclComm *comm;
};

struct slot {
	long long seq;
	int arrived, bad; // bad: the ranks' calls disagree, so nothing is computed
	struct op ops[MAXRANKS];
	int posted[MAXRANKS];
	struct slot *next;
};

struct clique {
	unsigned char id[NCCL_UNIQUE_ID_BYTES];
	int nranks, joined;
	struct ncclComm *ranks[MAXRANKS];
	struct slot *slots;
	struct clique *next;
};

struct ncclComm {
	uint32_t magic;
	int rank, destroyed;
	struct clique *cl;
	long long seq, inflight;
	int async_err;
};
typedef struct ncclComm *ncclComm_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static unsigned char issued[MAXIDS][NCCL_UNIQUE_ID_BYTES];
static int nissued;
static struct clique *cliques;
static struct ncclComm *comms[MAXCOMMS];
static int ncomms;
static struct {
	cudaStream_t s;
	long long pending;
} streams[MAXSTREAMS];
static int nstreams;
static long long c_collectives, c_inits, c_groups, c_deferred, c_destroys;

// Violations have their own lock: they are noted with mu held or not.
static pthread_mutex_t vmu = PTHREAD_MUTEX_INITIALIZER;
static long long nviol;
static char report[32768], report_copy[32768];
static size_t report_len;

static void violation(const char *fmt, ...) {
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&vmu);
	nviol++;
	size_t n = strlen(line);
	if (report_len + n + 2 < sizeof report) {
		memcpy(report + report_len, line, n);
		report_len += n;
		report[report_len++] = '\n';
		report[report_len] = 0;
	}
	pthread_mutex_unlock(&vmu);
}

long long standin_nccl_violations(void) {
	pthread_mutex_lock(&vmu);
	long long n = nviol;
	pthread_mutex_unlock(&vmu);
	return n;
}

const char *standin_nccl_report(void) {
	pthread_mutex_lock(&vmu);
	memcpy(report_copy, report, report_len + 1);
	pthread_mutex_unlock(&vmu);
	return report_copy;
}

void standin_nccl_reset(void) {
	pthread_mutex_lock(&vmu);
	nviol = 0;
	report_len = 0;
	report[0] = 0;
	pthread_mutex_unlock(&vmu);
	pthread_mutex_lock(&mu);
	c_collectives = c_inits = c_groups = c_deferred = c_destroys = 0;
	pthread_mutex_unlock(&mu);
}

long long standin_nccl_counter(const char *name) {
	long long v = -1;
	pthread_mutex_lock(&mu);
	if (!strcmp(name, "collectives")) v = c_collectives;
	else if (!strcmp(name, "inits")) v = c_inits;
	else if (!strcmp(name, "groups")) v = c_groups;
	else if (!strcmp(name, "deferred")) v = c_deferred;
	else if (!strcmp(name, "destroys")) v = c_destroys;
	pthread_mutex_unlock(&mu);
	return v;
}

static void deadline(struct timespec *ts, int ms) {
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

// ---- errors and version ----

const char *ncclGetErrorString(ncclResult_t r) {
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

ncclResult_t ncclGetVersion(int *version) {
	if (!version) {
		violation("ncclGetVersion: version is NULL");
		return ncclInvalidArgument;
	}
	*version = 22105; // 2.21.5
	return ncclSuccess;
}

// ---- unique ids ----

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	if (!id) {
		violation("ncclGetUniqueId: uniqueId is NULL");
		return ncclInvalidArgument;
	}
	pthread_mutex_lock(&mu);
	if (nissued == MAXIDS) {
		pthread_mutex_unlock(&mu);
		violation("ncclGetUniqueId: more than %d ids", MAXIDS);
		return ncclSystemError;
	}
	int n = nissued++;
	// Every byte value, zeros and 0xff included, so that a binding that
	// stops at a NUL or sign-extends a byte is caught.
	unsigned char *b = issued[n];
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(n + 1);
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		b[i] = (unsigned char)((x * 0x2545f4914f6cdd1dull) >> 56);
	}
	b[0] = 0;
	b[1] = 0xff;
	b[2] = (unsigned char)n;
	b[3] = (unsigned char)(n >> 8);
	memcpy(id->internal, b, NCCL_UNIQUE_ID_BYTES);
	pthread_mutex_unlock(&mu);
	return ncclSuccess;
}

// ---- communicators ----

static int live(struct ncclComm *c) { // mu held
	for (int i = 0; i < ncomms; i++)
		if (comms[i] == c) return c->magic == COMM_MAGIC && !c->destroyed;
	return 0;
}

static const char *dead_why(struct ncclComm *c) { // mu held
	for (int i = 0; i < ncomms; i++)
		if (comms[i] == c) return "was destroyed";
	return c ? "was never created by ncclCommInitRank" : "is NULL";
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
	if (!comm) {
		violation("ncclCommInitRank: comm is NULL");
		return ncclInvalidArgument;
	}
	if (nranks < 1 || nranks > MAXRANKS) {
		violation("ncclCommInitRank: nranks %d (the stand-in takes 1..%d)", nranks, MAXRANKS);
		return ncclInvalidArgument;
	}
	if (rank < 0 || rank >= nranks) {
		violation("ncclCommInitRank: rank %d of %d", rank, nranks);
		return ncclInvalidArgument;
	}
	pthread_mutex_lock(&mu);
	int known = 0;
	for (int i = 0; i < nissued && !known; i++)
		known = !memcmp(issued[i], commId.internal, NCCL_UNIQUE_ID_BYTES);
	if (!known) {
		pthread_mutex_unlock(&mu);
		unsigned char *b = (unsigned char *)commId.internal;
		violation("ncclCommInitRank: rank %d: the unique id (by value; first bytes %02x %02x %02x %02x) is not, byte for byte, one that ncclGetUniqueId issued",
		          rank, b[0], b[1], b[2], b[3]);
		return ncclInvalidArgument;
	}
	struct clique *cl = cliques;
	while (cl && memcmp(cl->id, commId.internal, NCCL_UNIQUE_ID_BYTES)) cl = cl->next;
	if (!cl) {
		cl = calloc(1, sizeof *cl);
		memcpy(cl->id, commId.internal, NCCL_UNIQUE_ID_BYTES);
		cl->nranks = nranks;
		cl->next = cliques;
		cliques = cl;
	}
	if (cl->nranks != nranks) {
		pthread_mutex_unlock(&mu);
		violation("ncclCommInitRank: rank %d says nranks %d, but the clique of this id has %d", rank, nranks, cl->nranks);
		return ncclInvalidArgument;
	}
	if (cl->ranks[rank]) {
		pthread_mutex_unlock(&mu);
		violation("ncclCommInitRank: rank %d joined the clique of this id twice", rank);
		return ncclInvalidUsage;
	}
	if (ncomms == MAXCOMMS) {
		pthread_mutex_unlock(&mu);
		violation("ncclCommInitRank: more than %d communicators", MAXCOMMS);
		return ncclSystemError;
	}
	struct ncclComm *c = calloc(1, sizeof *c); // never freed: a destroyed comm stays recognisable
	c->magic = COMM_MAGIC;
	c->rank = rank;
	c->cl = cl;
	comms[ncomms++] = c;
	cl->ranks[rank] = c;
	cl->joined++;
	c_inits++;
	pthread_cond_broadcast(&cv);
	struct timespec ts;
	deadline(&ts, TIMEOUT_MS);
	while (cl->joined < cl->nranks) {
		if (pthread_cond_timedwait(&cv, &mu, &ts) == ETIMEDOUT) {
			int joined = cl->joined;
			pthread_mutex_unlock(&mu);
			violation("ncclCommInitRank: rank %d waited %d ms for the other ranks: %d of %d joined (a deadlock in NCCL)", rank, TIMEOUT_MS, joined, nranks);
			return ncclSystemError;
		}
	}
	pthread_mutex_unlock(&mu);
	*comm = c;
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
	pthread_mutex_lock(&mu);
	if (!live(comm)) {
		const char *why = dead_why(comm);
		pthread_mutex_unlock(&mu);
		violation("ncclCommDestroy: the communicator %s", why);
		return ncclInvalidArgument;
	}
	if (comm->inflight) {
		long long n = comm->inflight;
		pthread_mutex_unlock(&mu);
		violation("ncclCommDestroy: rank %d destroyed with %lld collective(s) still waiting for their peers", comm->rank, n);
		pthread_mutex_lock(&mu);
	}
	comm->destroyed = 1;
	c_destroys++;
	pthread_mutex_unlock(&mu);
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
	pthread_mutex_lock(&mu);
	if (!live(comm)) {
		const char *why = dead_why(comm);
		pthread_mutex_unlock(&mu);
		violation("ncclCommGetAsyncError: the communicator %s", why);
		return ncclInvalidArgument;
	}
	if (!asyncError) {
		pthread_mutex_unlock(&mu);
		violation("ncclCommGetAsyncError: asyncError is NULL");
		return ncclInvalidArgument;
	}
	*asyncError = (ncclResult_t)comm->async_err;
	pthread_mutex_unlock(&mu);
	return ncclSuccess;
}

int standin_nccl_set_async_error(void *comm, int code) {
	pthread_mutex_lock(&mu);
	int ok = live(comm);
	if (ok) ((struct ncclComm *)comm)->async_err = code;
	pthread_mutex_unlock(&mu);
	return ok ? 0 : -1;
}

// ---- streams ----

static long long *stream_pending(cudaStream_t s) { // mu held
	for (int i = 0; i < nstreams; i++)
		if (streams[i].s == s) return &streams[i].pending;
	if (nstreams == MAXSTREAMS) return NULL;
	streams[nstreams].s = s;
	streams[nstreams].pending = 0;
	return &streams[nstreams++].pending;
}

int standin_nccl_stream_wait(void *stream, int timeout_ms) {
	pthread_mutex_lock(&mu);
	long long *p = stream_pending(stream);
	struct timespec ts;
	deadline(&ts, timeout_ms > 0 ? timeout_ms : TIMEOUT_MS);
	while (p && *p > 0) {
		if (pthread_cond_timedwait(&cv, &mu, &ts) == ETIMEDOUT) {
			long long n = *p;
			pthread_mutex_unlock(&mu);
			violation("stream %p: %lld collective(s) never completed: a rank did not post its part (a deadlock in NCCL)", stream, n);
			return -1;
		}
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

// ---- collectives ----

static float combine(int redop, float a, float b) {
	switch (redop) {
	case ncclProd: return a * b;
	case ncclMax: return a > b ? a : b;
	case ncclMin: return a < b ? a : b;
	default: return a + b; // sum, avg
	}
}

static void execute(struct clique *cl, struct slot *s) { // mu held
	int n = cl->nranks;
	struct op *o0 = &s->ops[0];
	size_t c = o0->count;
	size_t total = (o0->kind == K_REDUCESCATTER || o0->kind == K_ALLGATHER) ? c * (size_t)n : c;
	float *tmp = malloc((total ? total : 1) * sizeof(float));
	switch (o0->kind) {
	case K_ALLREDUCE:
	case K_REDUCESCATTER:
		memcpy(tmp, s->ops[0].send, total * sizeof(float));
		for (int r = 1; r < n; r++) {
			const float *x = s->ops[r].send;
			for (size_t i = 0; i < total; i++) tmp[i] = combine(o0->redop, tmp[i], x[i]);
		}
		if (o0->redop == ncclAvg)
			for (size_t i = 0; i < total; i++) tmp[i] /= (float)n;
		for (int r = 0; r < n; r++) {
			if (o0->kind == K_ALLREDUCE) memcpy(s->ops[r].recv, tmp, c * sizeof(float));
			else memcpy(s->ops[r].recv, tmp + (size_t)r * c, c * sizeof(float));
		}
		break;
	case K_ALLGATHER:
		for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * c, s->ops[r].send, c * sizeof(float));
		for (int r = 0; r < n; r++) memcpy(s->ops[r].recv, tmp, total * sizeof(float));
		break;
	case K_BROADCAST:
		memcpy(tmp, s->ops[o0->root].send, c * sizeof(float));
		for (int r = 0; r < n; r++) memcpy(s->ops[r].recv, tmp, c * sizeof(float));
		break;
	}
	free(tmp);
}

static void post(struct op *o) { // mu held; o validated
	struct ncclComm *c = o->comm;
	struct clique *cl = c->cl;
	long long seq = c->seq++;
	struct slot *s = cl->slots, **tail = &cl->slots;
	while (s && s->seq != seq) {
		tail = &s->next;
		s = s->next;
	}
	if (!s) {
		s = calloc(1, sizeof *s);
		s->seq = seq;
		*tail = s;
	}
	for (int r = 0; r < cl->nranks; r++) {
		if (!s->posted[r]) continue;
		struct op *q = &s->ops[r];
		if (q->kind != o->kind || q->count != o->count || q->dt != o->dt ||
		    (o->kind != K_ALLGATHER && o->kind != K_BROADCAST && q->redop != o->redop) ||
		    (o->kind == K_BROADCAST && q->root != o->root)) {
			violation("collective #%lld: rank %d posts %s(count %zu, type %d, op %d, root %d) but rank %d posted %s(count %zu, type %d, op %d, root %d)",
			          seq, c->rank, kind_name[o->kind], o->count, o->dt, o->redop, o->root,
			          r, kind_name[q->kind], q->count, q->dt, q->redop, q->root);
			s->bad = 1;
			break;
		}
	}
	s->ops[c->rank] = *o;
	s->posted[c->rank] = 1;
	s->arrived++;
	c->inflight++;
	long long *p = stream_pending(o->stream);
	if (p) (*p)++;
	c_collectives++;
	if (s->arrived < cl->nranks) return;
	if (!s->bad) execute(cl, s);
	for (int r = 0; r < cl->nranks; r++) {
		s->ops[r].comm->inflight--;
		long long *q = stream_pending(s->ops[r].stream);
		if (q) (*q)--;
	}
	*tail = s->next;
	free(s);
	pthread_cond_broadcast(&cv);
}

// Per thread, as in NCCL: the group depth and the calls it deferred.
static __thread int group_depth;
static __thread struct op *deferred;
static __thread int ndeferred, capdeferred;

static ncclResult_t collective(const char *fn, enum kind k, const void *send, void *recv, size_t count,
                               int dt, int redop, int root, ncclComm_t comm, cudaStream_t stream) {
	pthread_mutex_lock(&mu);
	if (!live(comm)) {
		const char *why = dead_why(comm);
		pthread_mutex_unlock(&mu);
		violation("%s: the communicator %s", fn, why);
		return ncclInvalidArgument;
	}
	int nranks = comm->cl->nranks;
	pthread_mutex_unlock(&mu);
	if (count > ((size_t)1 << 40)) {
		violation("%s: count %zu (a negative number cast to size_t?)", fn, count);
		return ncclInvalidArgument;
	}
	if (dt < 0 || dt >= ncclNumTypes) {
		violation("%s: datatype %d is not an ncclDataType_t", fn, dt);
		return ncclInvalidArgument;
	}
	if ((k == K_ALLREDUCE || k == K_REDUCESCATTER) && (redop < 0 || redop >= ncclNumOps)) {
		violation("%s: reduction op %d is not an ncclRedOp_t", fn, redop);
		return ncclInvalidArgument;
	}
	if (k == K_BROADCAST && (root < 0 || root >= nranks)) {
		violation("%s: root %d of %d ranks", fn, root, nranks);
		return ncclInvalidArgument;
	}
	if (count > 0 && (!recv || (!send && !(k == K_BROADCAST && root != comm->rank)))) {
		violation("%s: rank %d: %s is NULL with count %zu", fn, comm->rank, recv ? "sendbuff" : "recvbuff", count);
		return ncclInvalidArgument;
	}
	if (dt != ncclFloat32)
		return ncclInvalidUsage; // a real type, but the stand-in computes float32 only
	struct op o = {k, send, recv, count, dt, redop, root, stream, comm};
	if (group_depth > 0) {
		if (ndeferred == capdeferred) {
			capdeferred = capdeferred ? 2 * capdeferred : 16;
			deferred = realloc(deferred, (size_t)capdeferred * sizeof *deferred);
		}
		deferred[ndeferred++] = o;
		pthread_mutex_lock(&mu);
		c_deferred++;
		pthread_mutex_unlock(&mu);
		return ncclSuccess;
	}
	pthread_mutex_lock(&mu);
	post(&o);
	pthread_mutex_unlock(&mu);
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
                           ncclComm_t comm, cudaStream_t stream) {
	return collective("ncclAllReduce", K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype, int op,
                               ncclComm_t comm, cudaStream_t stream) {
	return collective("ncclReduceScatter", K_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype,
                           ncclComm_t comm, cudaStream_t stream) {
	return collective("ncclAllGather", K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
	return collective("ncclBroadcast", K_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

ncclResult_t ncclGroupStart(void) {
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
	if (group_depth == 0) {
		violation("ncclGroupEnd without ncclGroupStart on this thread (the group depth is per thread: was the caller moved to another OS thread?)");
		return ncclInvalidUsage;
	}
	if (--group_depth > 0) return ncclSuccess;
	pthread_mutex_lock(&mu);
	c_groups++;
	for (int i = 0; i < ndeferred; i++) {
		if (!live(deferred[i].comm)) {
			violation("ncclGroupEnd: a call of the group used a communicator destroyed before the group ended");
			continue;
		}
		post(&deferred[i]);
	}
	pthread_mutex_unlock(&mu);
	ndeferred = 0;
	return ncclSuccess;
}

int standin_nccl_group_depth(void) { return group_depth; }
