#!/usr/bin/env python3
"""PyTorch baselines for `ferry demo` on a GPU, at the same configuration.

L layers of Linear(W, W) + ReLU at batch B, MSE loss against a target kept
on the host until forward ends, plain SGD (lr 1e-3), gradients dropped after
each step: the step `ferry demo` times (internal/demo). For each mode it
measures memory as the original user did (torch.cuda.memory_allocated before
and after forward, max_memory_allocated during forward) and the median time
of whole steps (forward, backward, optimizer, synchronised), after one
warm-up step.

Modes:
  none         no offloading
  naive        the origin: each layer input copied with .to('cpu',
               non_blocking=True) and the copy thrown away (saves nothing)
  save_on_cpu  torch.autograd.graph.save_on_cpu(pin_memory=True)
  offload      a stream-based offloader in the style of torchtune's
               OffloadActivations: a side copy stream with events, the GPU
               tensor kept alive until its copy has finished, parameters
               skipped (by storage, so the weight.t() view addmm saves is
               skipped too), tensors under 1 KiB kept, no deduplication, and
               during backward each unpack prefetches the tensor the next
               one will need.

Usage: python3 bench/torch_gpu.py [--layers 40 --width 4096 --batch 1024
       --steps 3 --modes none,naive,save_on_cpu,offload --json FILE]
Prints one table; with --json also writes the numbers as JSON.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

MiB = 1 << 20


class Counter:
    """Counts bytes packed to the host per step."""

    def __init__(self):
        self.bytes = 0


def save_on_cpu_hooks(counter):
    """torch.autograd.graph.save_on_cpu(pin_memory=True), counting bytes."""
    inner = torch.autograd.graph.save_on_cpu(pin_memory=True)

    def pack(t):
        counter.bytes += t.numel() * t.element_size()
        return inner.pack_hook(t)

    return torch.autograd.graph.saved_tensors_hooks(pack, inner.unpack_hook)


class StreamOffloader:
    """Offloads saved activations on a side stream, torchtune style.

    Forward (pack): the side stream waits for compute, copies the tensor to
    a fresh pinned host tensor, and records an event; the GPU tensor stays
    referenced until that event has passed (checked at each later pack, and
    waited for when backward begins), so the caching allocator cannot hand
    its memory out while the copy still reads it.

    Backward (unpack): the tensor is copied back on the side stream into a
    GPU tensor allocated there, compute waits for that copy's event, and the
    tensor is marked as used by compute (record_stream). Each unpack also
    starts the copy of the tensor packed just before it, which backward
    needs next.
    """

    MIN_BYTES = 1024

    def __init__(self, params, counter):
        self.param_storages = {p.untyped_storage().data_ptr() for p in params}
        self.counter = counter
        self.side = torch.cuda.Stream()
        self.reset()

    def reset(self):
        """Starts a step."""
        self.next_id = 0
        self.host = {}  # id -> (host tensor, copy-done event) or ("keep", tensor)
        self.fwd_stash = {}  # id -> (gpu tensor, event): alive until the copy is done
        self.bwd_stash = {}  # id -> (gpu tensor, event): prefetched
        self.in_backward = False

    def _drop_finished(self):
        for i in [i for i, (_, ev) in self.fwd_stash.items() if ev.query()]:
            del self.fwd_stash[i]

    def pack(self, t):
        tid = self.next_id
        self.next_id += 1
        nbytes = t.numel() * t.element_size()
        if (not t.is_cuda or nbytes < self.MIN_BYTES
                or t.untyped_storage().data_ptr() in self.param_storages):
            self.host[tid] = ("keep", t)
            return tid
        self._drop_finished()
        compute = torch.cuda.current_stream()
        self.side.wait_stream(compute)
        with torch.cuda.stream(self.side):
            h = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=True)
            h.copy_(t, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.side)
        self.fwd_stash[tid] = (t, ev)
        self.host[tid] = (h, ev)
        self.counter.bytes += nbytes
        return tid

    def _bring(self, tid):
        if tid in self.bwd_stash or tid not in self.host:
            return
        h, ev = self.host[tid]
        if isinstance(h, str):
            return
        self.side.wait_event(ev)  # the copy out has finished
        with torch.cuda.stream(self.side):
            g = h.to("cuda", non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.side)
        self.bwd_stash[tid] = (g, done)

    def unpack(self, tid):
        if not self.in_backward:
            # Backward begins: every copy out must be done before memory is reused.
            self.in_backward = True
            for t, ev in self.fwd_stash.values():
                ev.synchronize()
            self.fwd_stash.clear()
        h, _ = self.host[tid]
        if isinstance(h, str):
            t = self.host.pop(tid)[1]
            return t
        self._bring(tid)
        # Prefetch the tensor packed before this one: backward needs it next.
        prev = tid - 1
        while prev >= 0 and prev in self.host and isinstance(self.host[prev][0], str):
            prev -= 1
        if prev >= 0:
            self._bring(prev)
        g, done = self.bwd_stash.pop(tid)
        compute = torch.cuda.current_stream()
        compute.wait_event(done)
        g.record_stream(compute)
        del self.host[tid]
        return g

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def run_mode(mode, args, dev):
    torch.manual_seed(1)
    layers = [torch.nn.Linear(args.width, args.width, device=dev) for _ in range(args.layers)]
    params = [p for l in layers for p in l.parameters()]
    opt = torch.optim.SGD(params, lr=1e-3)
    x = torch.randn(args.batch, args.width, device=dev)
    target = torch.randn(args.batch, args.width)  # on the host until forward ends
    counter = Counter()
    off = StreamOffloader(params, counter) if mode == "offload" else None

    def forward(h):
        for l in layers:
            prev = h
            h = F.relu(l(h))
            if mode == "naive":
                prev.to("cpu", non_blocking=True)  # the copy is thrown away
        return h

    res = {"mode": mode, "step_seconds_all": []}
    for step in range(args.steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        counter.bytes = 0
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if mode == "save_on_cpu":
            with save_on_cpu_hooks(counter):
                y = forward(x)
        elif mode == "offload":
            off.reset()
            with off.hooks():
                y = forward(x)
        else:
            y = forward(x)
        after = torch.cuda.memory_allocated()
        peak = torch.cuda.max_memory_allocated()
        loss = F.mse_loss(y, target.to(dev))
        del y
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if step == 0:
            res["loss"] = loss.item()
            continue
        res["step_seconds_all"].append(elapsed)
        res.update(before_forward_bytes=before, after_forward_bytes=after, peak_forward_bytes=peak,
                   peak_step_bytes=torch.cuda.max_memory_allocated(), offloaded_bytes=counter.bytes)
    res["step_seconds"] = statistics.median(res["step_seconds_all"])
    del layers, params, opt, x, off
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--modes", default="none,naive,save_on_cpu,offload")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    head = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "layers": args.layers, "width": args.width, "batch": args.batch, "steps": args.steps,
        "activation_bytes": args.batch * args.width * 4,
        "parameter_bytes": args.layers * (args.width * args.width + args.width) * 4,
    }
    print(f"PyTorch {head['torch']} (CUDA {head['cuda']}) on {head['gpu']}, allow_tf32={head['allow_tf32']}: "
          f"{args.layers} x Linear({args.width}, {args.width}) + ReLU, batch {args.batch}, "
          f"median of {args.steps} steps after a warm-up")
    runs = []
    for mode in args.modes.split(","):
        runs.append(run_mode(mode.strip(), args, dev))
    print(f"{'mode':<12} {'before MiB':>11} {'after MiB':>10} {'peak MiB':>9} {'step ms':>8} {'to host MiB/step':>17}")
    for r in runs:
        print(f"{r['mode']:<12} {r['before_forward_bytes'] / MiB:>11.2f} {r['after_forward_bytes'] / MiB:>10.2f} "
              f"{r['peak_forward_bytes'] / MiB:>9.2f} {r['step_seconds'] * 1e3:>8.1f} {r['offloaded_bytes'] / MiB:>17.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**head, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
