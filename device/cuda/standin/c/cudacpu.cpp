// The CPU runtime of ferry's CUDA kernel sources (see cudacpu.h): it runs
// a launch that the stand-in (standin.c) hands to its kernel runner, block
// after block, each block's threads as fibers on the calling thread.
//
// Why fibers, and why not ucontext: a barrier must stop a thread in the
// middle of its code and resume it later, so each CUDA thread needs its
// own stack. OS threads (one per CUDA thread, a pthread barrier) would be
// faithful too but cost a kernel round trip per switch and 1024 threads
// per block; glibc's swapcontext also enters the kernel on every switch
// (it saves the signal mask). Here a switch is a handful of instructions
// (ferry_fiber_switch below saves the callee-saved registers and the
// stack pointer), on x86-64; elsewhere ucontext does the same, slower
// (forced on x86-64, TestKernelSource took 395 s instead of 25 s).
// Threads of a block run in order, each until it waits at a barrier or
// ends; a barrier releases its threads only once every thread it waits
// for has arrived (threads that ended count as arrived, as on the GPU).
//
// Shared memory is checked for races through the thread-sanitizer
// instrumentation the kernels are compiled with (-fsanitize=thread; the
// hooks below stand in for its runtime, as the Linux kernel's KCSAN does):
// each 4-byte word of shared memory remembers, since the last barrier of
// the block, which thread wrote it and which read it; a write by one
// thread with another's read or write of the word before the next barrier
// is a race, reported through standin_violation; so is a read of a word
// that no thread of the block has written yet. Global memory is checked
// too (check_global): within a launch, a word written by one thread and
// read or written by another is a race unless the two are of one block
// with a barrier between. Warp barriers
// (__syncwarp, shuffles, votes) do not order shared-memory accesses here:
// warp-synchronous code is reported as racy (no ferry kernel is).
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "cudacpu.h"
extern "C" {
#include "standin.h"
}

#define EXPORT extern "C" __attribute__((visibility("default")))

ferry_builtins_t ferry_builtins;

// ---- the registry ----

struct kernel {
  const char* name;
  void* fn;
  void (*invoke)(void* fn, void* const* params);
  int nparams;
  const int* sizes;
  long long runs, max_threads, max_blocks;
};
static std::vector<kernel>* registry;

extern "C" void ferry_register(const char* name, void* fn, void (*invoke)(void*, void* const*), int nparams,
                               const int* sizes) {
  if (!registry) registry = new std::vector<kernel>;
  registry->push_back(kernel{name, fn, invoke, nparams, sizes, 0, 0, 0});
}

static kernel* find_kernel(const char* name) {
  if (!registry) return nullptr;
  for (auto& k : *registry)
    if (strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

// ---- shared memory ----

extern "C" char __start_ferry_shared[], __stop_ferry_shared[];
extern "C" char ferry_dynamic_shared[];  // defined by the generated registration unit
extern "C" const unsigned ferry_dynamic_shared_size;

// ---- fibers ----

enum state { READY, AT_BLOCK, AT_WARP, DONE };

struct fiber {
  void* sp;  // saved stack pointer while not running
  char *stack_lo, *stack_hi;
  uint3 tid;
  int linear;
  state st;
  const char* site;
  int op, pred;  // block barrier
  unsigned mask;  // warp exchange
  unsigned long long val, result;
  int src, vote;
};

static const size_t stack_size = 256 << 10;
static char* stacks;  // mmap'd, a guard page below each stack
static size_t n_stacks;
static fiber fibers[1024];
static int cur = -1;       // the running fiber
static bool faulted;       // the block stops: a fiber hit an error
static int block_result;   // of the last __syncthreads_or/and/count
static kernel* running;
static void* const* run_params;
static std::string launch_desc;

// Access checking.
static unsigned epoch = 1;  // advances at every block barrier and block start
struct shadow {
  unsigned epoch;
  int writer, reader;  // thread (linear), -1 none; reader -2: several
  bool reported;
  unsigned block;  // the block that last wrote the word (block_gen)
};
static unsigned block_gen;  // advances at every block start

// The shared variables by offset in ferry_shared, for reports
// (ferry_cpu_name_shared; the loader reads them from the symbol table).
struct shared_var {
  size_t off, size;
  std::string name;
};
static std::vector<shared_var> shared_vars;

// where describes byte off of ferry_shared: the variable and the byte in it.
static std::string where(size_t off) {
  char b[300];
  for (const shared_var& v : shared_vars)
    if (off >= v.off && off < v.off + v.size) {
      snprintf(b, sizeof b, "%s (byte %zu of it)", v.name.c_str(), off - v.off);
      return b;
    }
  snprintf(b, sizeof b, "byte %zu of shared memory", off);
  return b;
}
static long long n_uninit;
static shadow* shadows;
static size_t n_shadows;
static char *dyn_lo, *dyn_hi;  // the launch's dynamic shared memory
struct range {
  char *lo, *hi;
  int param;  // the kernel parameter that points into it
};
static std::vector<range> allowed;  // the launch's device memory
static bool checking;               // inside a launch

// Global memory within one launch (when check_global is on): each 2-byte
// half of a 4-byte word remembers its last writer and last reader, as
// (block, thread, the block's barrier epoch): halves, so that threads
// storing neighbouring 2-byte elements (bfloat16) do not race, as on a
// GPU, whose global memory is byte-addressed (a 1-byte access counts as
// its whole half, which no ferry kernel makes). Two accesses of a word, one a write, by
// different threads are a race unless both threads are of one block with a
// barrier between: nothing orders different blocks of a launch.
// Atomics are not tracked.
struct access_rec {
  long long block;  // linear block index, -1 none
  int thread;
  unsigned epoch;
};
struct gshadow {
  access_rec w[2], r[2];  // per half word
  bool reported;
};
static bool check_global = true;
static std::unordered_map<uintptr_t, gshadow> gshadows;
static long long cur_block;
static long long n_global_races;
static long long n_races, n_oob;

#if defined(__x86_64__)
static void* sched_sp;  // the scheduler's stack pointer while a fiber runs
extern "C" void ferry_fiber_switch(void** save, void* next);
extern "C" void ferry_fiber_start(void);
// ferry_fiber_switch(save, next): saves the callee-saved registers and the
// floating-point control words on the current stack, stores the stack
// pointer in *save, and resumes the stack at next.
asm(R"(
.text
.globl ferry_fiber_switch
.hidden ferry_fiber_switch
.type ferry_fiber_switch,@function
ferry_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size ferry_fiber_switch, .-ferry_fiber_switch
.globl ferry_fiber_start
.hidden ferry_fiber_start
.type ferry_fiber_start,@function
ferry_fiber_start:
  call ferry_fiber_main
  ud2
.size ferry_fiber_start, .-ferry_fiber_start
)");

static void fiber_init(fiber* f) {
  // The frame ferry_fiber_switch pops: control words, six registers, then
  // ferry_fiber_start as the return address, which leaves the stack
  // 16-byte aligned at its call, as the ABI wants.
  uintptr_t top = (uintptr_t)f->stack_hi & ~(uintptr_t)15;
  uint64_t* sp = (uint64_t*)(top - 128);
  memset(sp, 0, 128);
  unsigned mxcsr = 0x1F80;
  unsigned short fpucw = 0x037F;
  memcpy((char*)sp, &mxcsr, 4);
  memcpy((char*)sp + 4, &fpucw, 2);
  sp[7] = (uint64_t)(uintptr_t)&ferry_fiber_start;
  f->sp = sp;
}
static void switch_to(fiber* f) { ferry_fiber_switch(&sched_sp, f->sp); }
static void yield_to_scheduler(fiber* f) { ferry_fiber_switch(&f->sp, sched_sp); }
#else
#include <ucontext.h>
extern "C" void ferry_fiber_main(void);
static ucontext_t sched_uc, fiber_uc[1024];
static void fiber_init(fiber* f) {
  ucontext_t* uc = &fiber_uc[f - fibers];
  getcontext(uc);
  uc->uc_stack.ss_sp = f->stack_lo;
  uc->uc_stack.ss_size = (size_t)(f->stack_hi - f->stack_lo);
  uc->uc_link = nullptr;
  makecontext(uc, ferry_fiber_main, 0);
}
static void switch_to(fiber* f) { swapcontext(&sched_uc, &fiber_uc[f - fibers]); }
static void yield_to_scheduler(fiber* f) { swapcontext(&fiber_uc[f - fibers], &sched_uc); }
#endif

extern "C" __attribute__((used)) void ferry_fiber_main(void) {
  fiber* f = &fibers[cur];
  running->invoke(running->fn, run_params);
  f->st = DONE;
  yield_to_scheduler(f);
  abort();  // never resumed
}

static bool ensure_stacks(size_t n) {
  if (n <= n_stacks) return true;
  const size_t page = 4096, each = stack_size + page;
  char* p = (char*)mmap(nullptr, each * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  for (size_t i = 0; i < n; i++) mprotect(p + i * each, page, PROT_NONE);  // a guard below each stack
  if (stacks) munmap(stacks, each * n_stacks);
  stacks = p;
  n_stacks = n;
  for (size_t i = 0; i < n; i++) {
    fibers[i].stack_lo = p + i * each + page;
    fibers[i].stack_hi = p + (i + 1) * each;
  }
  return true;
}

// ---- violations ----

static void violation(const char* fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  standin_violation(launch_desc.c_str(), msg);
}

extern "C" void ferry_misuse(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  violation("%s", msg);
}

static std::string thread_name(int linear) {
  const fiber& f = fibers[linear];
  char b[64];
  snprintf(b, sizeof b, "thread (%u,%u,%u)", f.tid.x, f.tid.y, f.tid.z);
  return b;
}

// A fault ends the block: the fiber never runs again.
static void fault(void) {
  faulted = true;
  yield_to_scheduler(&fibers[cur]);
  abort();
}

// ---- access hooks (the thread-sanitizer's entry points) ----

static const char* last_barrier = "the block's start";

static void shared_access(char* a, size_t n, bool write) {
  size_t first = (size_t)(a - __start_ferry_shared) / 4, last = (size_t)(a + n - 1 - __start_ferry_shared) / 4;
  for (size_t w = first; w <= last && w < n_shadows; w++) {
    shadow* s = &shadows[w];
    if (s->epoch != epoch) s->epoch = epoch, s->writer = -1, s->reader = -1, s->reported = false;
    if (!write && s->block != block_gen) {
      // Shared memory starts undefined in every block: a read of a word no
      // thread of this block has written reads garbage on a GPU.
      s->block = block_gen;  // report once a block
      n_uninit++;
      violation("block (%u,%u,%u): %s reads %s, which no thread of the block has written", blockIdx.x, blockIdx.y,
                blockIdx.z, thread_name(cur).c_str(), where(w * 4).c_str());
    }
    if (write) s->block = block_gen;
    int other = -1;
    const char* what = nullptr;
    if (write) {
      if (s->writer >= 0 && s->writer != cur)
        other = s->writer, what = "wrote";
      else if (s->reader == -2 || (s->reader >= 0 && s->reader != cur))
        other = s->reader, what = "read";
      s->writer = cur;
    } else {
      if (s->writer >= 0 && s->writer != cur) other = s->writer, what = "wrote";
      s->reader = (s->reader == -1 || s->reader == cur) ? cur : -2;
    }
    if (what && !s->reported) {
      s->reported = true;
      n_races++;
      std::string o = other == -2 ? std::string("other threads") : thread_name(other);
      violation("shared-memory race in block (%u,%u,%u): %s %s %s, which %s %s since the last barrier (%s)", blockIdx.x,
                blockIdx.y, blockIdx.z, thread_name(cur).c_str(), write ? "writes" : "reads", where(w * 4).c_str(),
                o.c_str(), what, last_barrier);
    }
  }
}

// ordered reports whether access a happened before the current one.
static bool ordered(const access_rec& a) {
  return a.block < 0 || (a.block == cur_block && (a.thread == cur || a.epoch != epoch));
}

static void global_access(const range& r, char* a, size_t n, bool write) {
  const uintptr_t lo = (uintptr_t)a, hi = (uintptr_t)a + n;  // [lo, hi)
  for (uintptr_t w = lo / 4; w <= (hi - 1) / 4; w++) {
    auto it = gshadows.find(w);
    if (it == gshadows.end())
      it = gshadows.emplace(w, gshadow{{{-1, 0, 0}, {-1, 0, 0}}, {{-1, 0, 0}, {-1, 0, 0}}, false}).first;
    gshadow& g = it->second;
    access_rec other{-1, 0, 0};
    const char* what = nullptr;
    access_rec me{cur_block, cur, epoch};
    const uintptr_t first = lo > w * 4 ? lo : w * 4, last = hi < w * 4 + 4 ? hi - 1 : w * 4 + 3;
    for (uintptr_t h = (first - w * 4) / 2; h <= (last - w * 4) / 2; h++) {
      if (!what && !ordered(g.w[h]))
        other = g.w[h], what = "wrote";
      else if (!what && write && !ordered(g.r[h]))
        other = g.r[h], what = "read";
      if (write)
        g.w[h] = me;
      else
        g.r[h] = me;
    }
    if (!what || g.reported) continue;
    g.reported = true;
    n_global_races++;
    const fiber& f = fibers[other.thread];
    violation("global-memory race: block (%u,%u,%u) %s %s byte %zu of the allocation of parameter %d, which thread "
              "(%u,%u,%u) of block %lld (linear) %s with nothing ordering the two (%s)",
              blockIdx.x, blockIdx.y, blockIdx.z, thread_name(cur).c_str(), write ? "writes" : "reads",
              (size_t)((char*)(w * 4) - r.lo), r.param, f.tid.x, f.tid.y, f.tid.z, other.block, what,
              other.block == cur_block ? "no barrier between" : "different blocks");
  }
}

static inline void access(void* p, size_t n, bool write) {
  if (!checking || cur < 0) return;
  char* a = (char*)p;
  if (a >= __start_ferry_shared && a < __stop_ferry_shared) {
    if (a >= ferry_dynamic_shared && a < ferry_dynamic_shared + ferry_dynamic_shared_size &&
        (a < dyn_lo || a + n > dyn_hi)) {
      n_oob++;
      violation("%s %s %zu bytes at byte %zu of dynamic shared memory, beyond the %zu bytes launched",
                thread_name(cur).c_str(), write ? "writes" : "reads", n, (size_t)(a - ferry_dynamic_shared),
                (size_t)(dyn_hi - dyn_lo));
      fault();
    }
    shared_access(a, n, write);
    return;
  }
  const fiber& f = fibers[cur];
  if (a >= f.stack_lo && a + n <= f.stack_hi) return;
  if (a >= (char*)&ferry_builtins && a + n <= (char*)(&ferry_builtins + 1)) return;
  for (const range& r : allowed)
    if (a >= r.lo && a + n <= r.hi) {
      if (check_global) global_access(r, a, n, write);
      return;
    }
  n_oob++;
  violation("block (%u,%u,%u) %s %s %zu bytes at %p, outside every allocation the launch was given (an illegal address)",
            blockIdx.x, blockIdx.y, blockIdx.z, thread_name(cur).c_str(), write ? "writes" : "reads", n, p);
  fault();
}

// The hooks are hidden: the instrumented kernels of this library bind to
// them, never to a sanitizer runtime the host process may carry (a Go test
// binary built with -race has one).
#define HOOK extern "C" __attribute__((visibility("hidden")))
#define HOOKS(N)                                                                     \
  HOOK void __tsan_read##N(void* p) { access(p, N, false); }                     \
  HOOK void __tsan_write##N(void* p) { access(p, N, true); }                     \
  HOOK void __tsan_unaligned_read##N(void* p) { access(p, N, false); }           \
  HOOK void __tsan_unaligned_write##N(void* p) { access(p, N, true); }           \
  HOOK void __tsan_volatile_read##N(void* p) { access(p, N, false); }            \
  HOOK void __tsan_volatile_write##N(void* p) { access(p, N, true); }            \
  HOOK void __tsan_unaligned_volatile_read##N(void* p) { access(p, N, false); }  \
  HOOK void __tsan_unaligned_volatile_write##N(void* p) { access(p, N, true); }
HOOKS(1)
HOOKS(2)
HOOKS(4)
HOOKS(8)
HOOKS(16)
HOOK void __tsan_read_range(void* p, size_t n) { access(p, n, false); }
HOOK void __tsan_write_range(void* p, size_t n) { access(p, n, true); }
HOOK void __tsan_init(void) {}
HOOK void __tsan_func_entry(void*) {}
HOOK void __tsan_func_exit(void) {}
HOOK void __tsan_vptr_read(void**) {}
HOOK void __tsan_vptr_update(void**, void*) {}

// ---- barriers ----

static int lane_of(int linear) { return linear & 31; }

extern "C" int ferry_lane(void) { return lane_of(cur); }

extern "C" int ferry_block_barrier(const char* site, int op, int pred) {
  fiber* f = &fibers[cur];
  f->st = AT_BLOCK, f->site = site, f->op = op, f->pred = pred;
  yield_to_scheduler(f);
  return block_result;
}

extern "C" unsigned long long ferry_warp_exchange(const char* site, unsigned mask, unsigned long long v, int src,
                                                  int vote) {
  fiber* f = &fibers[cur];
  if (!(mask >> lane_of(cur) & 1)) {
    violation("%s: %s takes part in a warp operation whose mask %#x leaves out its lane %d", site,
              thread_name(cur).c_str(), mask, lane_of(cur));
    fault();
  }
  f->st = AT_WARP, f->site = site, f->mask = mask, f->val = v, f->src = src, f->vote = vote;
  yield_to_scheduler(f);
  return f->result;
}

// release_warps lets go every warp whose waiting lanes have all their
// partners: it reports whether one went.
static bool release_warps(int n) {
  bool any = false;
  for (int w0 = 0; w0 < n; w0 += 32) {
    int end = w0 + 32 < n ? w0 + 32 : n;
    unsigned exist = end - w0 == 32 ? 0xffffffffu : ((1u << (end - w0)) - 1);
    unsigned waiting = 0, done = 0;
    for (int t = w0; t < end; t++) {
      if (fibers[t].st == AT_WARP) waiting |= 1u << (t - w0);
      if (fibers[t].st == DONE) done |= 1u << (t - w0);
    }
    if (!waiting) continue;
    bool ready = true;
    for (int t = w0; t < end; t++)
      if (waiting >> (t - w0) & 1) {
        unsigned need = fibers[t].mask & exist;
        if ((need & ~(waiting | done)) != 0) ready = false;
      }
    if (!ready) continue;
    const char* site = nullptr;
    for (int t = w0; t < end; t++) {
      fiber* f = &fibers[t];
      if (f->st != AT_WARP) continue;
      if (!site) site = f->site;
      if (strcmp(site, f->site) != 0)
        violation("lanes of warp %d wait at different warp operations: %s and %s", w0 / 32, site, f->site);
      unsigned need = f->mask & exist;
      if (need & done)
        violation("%s: lanes %#x of the mask %#x of %s have exited", f->site, need & done, f->mask,
                  thread_name(t).c_str());
      if (f->mask & ~exist)
        violation("%s: the mask %#x of %s names lanes that the block does not have", f->site, f->mask,
                  thread_name(t).c_str());
      unsigned preds = 0;
      for (int u = w0; u < end; u++)
        if ((need >> (u - w0) & 1) && fibers[u].st == AT_WARP && fibers[u].val) preds |= 1u << (u - w0);
      switch (f->vote) {
        case 1: f->result = (preds & need) == need; break;
        case 2: f->result = preds != 0; break;
        case 3: f->result = preds; break;
        default:
          // A lane outside the mask or the block gives an undefined
          // value on the GPU; here the reader's own.
          f->result = f->val;
          if (f->src >= 0 && f->src < 32 && (need >> f->src & 1) && fibers[w0 + f->src].st == AT_WARP)
            f->result = fibers[w0 + f->src].val;
      }
    }
    for (int t = w0; t < end; t++)
      if (fibers[t].st == AT_WARP) fibers[t].st = READY;
    any = true;
  }
  return any;
}

// run_block runs one block's n threads to the end; false on a fault.
static bool run_block(int n) {
  for (int t = 0; t < n; t++) {
    fibers[t].st = READY;
    fiber_init(&fibers[t]);
  }
  epoch++;
  block_gen++;
  last_barrier = "the block's start";
  int live = n;
  for (;;) {
    for (int t = 0; t < n; t++) {
      if (fibers[t].st != READY) continue;
      cur = t;
      threadIdx = fibers[t].tid;
      switch_to(&fibers[t]);
      cur = -1;
      if (faulted) return false;
      if (fibers[t].st == DONE) live--;
    }
    if (live == 0) return true;
    if (release_warps(n)) continue;
    int at = 0;
    const char* site = nullptr;
    int op = 0, acc = 0, first = -1;
    for (int t = 0; t < n; t++) {
      fiber* f = &fibers[t];
      if (f->st != AT_BLOCK) continue;
      if (!site) site = f->site, op = f->op, acc = op == 2 ? 1 : 0, first = t;
      if (strcmp(site, f->site) != 0 || op != f->op)
        violation("threads of block (%u,%u,%u) wait at different barriers: %s at %s, %s at %s", blockIdx.x,
                  blockIdx.y, blockIdx.z, thread_name(t).c_str(), f->site, thread_name(first).c_str(), site);
      switch (op) {
        case 1: acc |= f->pred; break;
        case 2: acc &= f->pred; break;
        case 3: acc += f->pred; break;
      }
      at++;
    }
    if (at == live) {
      block_result = acc;
      last_barrier = site;
      epoch++;
      for (int t = 0; t < n; t++)
        if (fibers[t].st == AT_BLOCK) fibers[t].st = READY;
      continue;
    }
    std::string who;
    for (int t = 0; t < n && who.size() < 300; t++)
      if (fibers[t].st == AT_WARP || fibers[t].st == AT_BLOCK)
        who += " " + thread_name(t) + (fibers[t].st == AT_WARP ? " at a warp operation " : " at __syncthreads ") +
               fibers[t].site + ";";
    violation("block (%u,%u,%u) deadlocks:%s", blockIdx.x, blockIdx.y, blockIdx.z, who.c_str());
    return false;
  }
}

// ---- the runner ----

EXPORT int ferry_cpu_launch(const struct standin_launch* l) {
  char desc[256];
  snprintf(desc, sizeof desc, "kernel %s <<<(%u,%u,%u), (%u,%u,%u), %u>>> from source", l->name, l->grid[0],
           l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->shared);
  launch_desc = desc;
  kernel* k = find_kernel(l->name);
  if (!k) {
    violation("no CUDA source of this kernel was compiled in");
    return 1;
  }
  if (k->nparams != l->nparams) {
    violation("the source takes %d parameters, the PTX declares %d", k->nparams, l->nparams);
    return 1;
  }
  for (int i = 0; i < k->nparams; i++)
    if (k->sizes[i] != l->sizes[i]) {
      violation("parameter %d is %d bytes in the source, %d in the PTX", i, k->sizes[i], l->sizes[i]);
      return 1;
    }
  if (l->shared > ferry_dynamic_shared_size) {
    violation("%u bytes of dynamic shared memory, more than the %u the CPU build has", l->shared,
              ferry_dynamic_shared_size);
    return 1;
  }
  // The parameters, with every device address mapped to its host bytes.
  std::vector<std::vector<char>> bufs(k->nparams);
  std::vector<void*> params(k->nparams);
  allowed.clear();
  for (int i = 0; i < k->nparams; i++) {
    bufs[i].assign((const char*)l->params[i], (const char*)l->params[i] + l->sizes[i]);
    bufs[i].resize(l->sizes[i] < 16 ? 16 : l->sizes[i]);
    params[i] = bufs[i].data();
    if (l->sizes[i] % 8 != 0) continue;
    // A pointer, or a struct of 64-bit words (common.cuh) that may hold
    // device addresses (a table of tensors): each word in the device
    // range is an address.
    for (int w = 0; w < l->sizes[i] / 8; w++) {
      unsigned long long v;
      memcpy(&v, bufs[i].data() + 8 * w, 8);
      if (v < STANDIN_DEV_BASE || v >= STANDIN_DEV_BASE + STANDIN_DEV_SPAN) continue;
      size_t avail = 0;
      char* h = (char*)standin_resolve(v, &avail);
      if (!h) {
        violation("parameter %d (word %d), %#llx, is not live device memory", i, w, v);
        return 1;
      }
      memcpy(bufs[i].data() + 8 * w, &h, 8);
      allowed.push_back(range{h, h + avail, i});
    }
  }
  unsigned bx = l->block[0], by = l->block[1], bz = l->block[2];
  int n = (int)(bx * by * bz);
  if (n <= 0 || n > 1024 || !ensure_stacks((size_t)n)) {
    violation("cannot run a block of %d threads", n);
    return 1;
  }
  size_t words = (size_t)(__stop_ferry_shared - __start_ferry_shared + 3) / 4;
  if (words > n_shadows) {
    free(shadows);
    shadows = (shadow*)calloc(words, sizeof(shadow));
    n_shadows = words;
  }
  for (int t = 0; t < n; t++) {
    fibers[t].linear = t;
    fibers[t].tid = uint3{(unsigned)t % bx, (unsigned)t / bx % by, (unsigned)t / (bx * by)};
  }
  dyn_lo = ferry_dynamic_shared;
  dyn_hi = ferry_dynamic_shared + l->shared;
  k->runs++;
  if (n > k->max_threads) k->max_threads = n;
  long long blocks = (long long)l->grid[0] * l->grid[1] * l->grid[2];
  if (blocks > k->max_blocks) k->max_blocks = blocks;
  running = k;
  run_params = params.data();
  faulted = false;
  checking = true;
  blockDim = dim3{bx, by, bz};
  gridDim = dim3{l->grid[0], l->grid[1], l->grid[2]};
  bool ok = true;
  gshadows.clear();
  for (unsigned z = 0; z < l->grid[2] && ok; z++)
    for (unsigned y = 0; y < l->grid[1] && ok; y++)
      for (unsigned x = 0; x < l->grid[0] && ok; x++) {
        blockIdx = uint3{x, y, z};
        cur_block = ((long long)z * l->grid[1] + y) * l->grid[0] + x;
        ok = run_block(n);
      }
  gshadows.clear();
  checking = false;
  running = nullptr;
  allowed.clear();
  return ok ? 0 : 1;
}

// ferry_cpu_check_global turns the global-memory race check on or off
// (on by default; it costs a hash lookup per access).
EXPORT void ferry_cpu_check_global(int on) { check_global = on != 0; }

// ferry_cpu_name_shared names the shared variable at [off, off+size) of
// ferry_shared.
EXPORT void ferry_cpu_name_shared(size_t off, size_t size, const char* name) {
  shared_vars.push_back(shared_var{off, size, name});
}

// ferry_cpu_stat reads a statistic: of kernel name ("runs", "max_threads",
// "max_blocks"), or with name NULL of all launches ("races",
// "out_of_bounds", "uninitialised", "global_races", "kernels"); -1 if
// unknown.
EXPORT long long ferry_cpu_stat(const char* name, const char* what) {
  if (!name) {
    if (strcmp(what, "races") == 0) return n_races;
    if (strcmp(what, "out_of_bounds") == 0) return n_oob;
    if (strcmp(what, "uninitialised") == 0) return n_uninit;
    if (strcmp(what, "global_races") == 0) return n_global_races;
    if (strcmp(what, "kernels") == 0) return registry ? (long long)registry->size() : 0;
    return -1;
  }
  kernel* k = find_kernel(name);
  if (!k) return -1;
  if (strcmp(what, "runs") == 0) return k->runs;
  if (strcmp(what, "max_threads") == 0) return k->max_threads;
  if (strcmp(what, "max_blocks") == 0) return k->max_blocks;
  return -1;
}
