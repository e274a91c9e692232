#!/usr/bin/env python3
"""Times PyTorch's CPU AdamW (torch.optim.AdamW, foreach=True) on the sizes
BenchmarkHostAdamW (internal/optkernel/bench_test.go) uses, so that ferry's
host optimizer and PyTorch's read side by side.

Usage: python3 scripts/bench-host-adamw.py [--iters N] [--threads T]

For each size n (float32 elements, one parameter) it prints the median
and the best time of one optimizer step and the bandwidth (at the median)
over the bytes an update touches, 28 per element (reads param, grad, exp_avg, exp_avg_sq; writes
param, exp_avg, exp_avg_sq), the unit the Go benchmark reports, and the
same for a copy_ of 14·n bytes into another buffer (28·n bytes touched).
Threads default to every core (torch.set_num_threads), like GOMAXPROCS.

PyTorch's CPU AdamW makes parameter-sized temporaries each step; glibc
serves those above 32 MiB with mmap and returns them at once, so every step
page-faults them in again (on this VM, 16M elements: ~0.5 GB/s). Run with
MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 to keep them in the
heap, as a caching allocator would; the script says which it ran with.
"""
import argparse
import os
import statistics
import time

import torch

SIZES = [1 << 20, 1 << 24]


def seconds(fn, iters):
    """The median and the best time of fn over iters calls."""
    fn()  # warm up: the optimizer makes its state at the first step
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tuned = os.environ.get("MALLOC_MMAP_MAX_") == "0"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"glibc mmap for large temporaries {'off' if tuned else 'on (see the doc string)'}")
    for n in SIZES:
        p = torch.nn.Parameter(torch.randn(n))
        p.grad = torch.randn(n) * 0.01
        for foreach in (True, False):
            opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, foreach=foreach)
            s, best = seconds(opt.step, args.iters)
            print(f"n={n:<9d} AdamW(foreach={foreach!s:5}) {s * 1e3:9.3f} ms (best {best * 1e3:8.3f})  {28 * n / s / 1e9:7.2f} GB/s")
        src = torch.empty(14 * n // 4).fill_(1.0)
        dst = torch.empty_like(src).fill_(0.0)
        s, best = seconds(lambda: dst.copy_(src), args.iters)
        print(f"n={n:<9d} copy_ of 14n bytes        {s * 1e3:9.3f} ms (best {best * 1e3:8.3f})  {28 * n / s / 1e9:7.2f} GB/s")


if __name__ == "__main__":
    main()
