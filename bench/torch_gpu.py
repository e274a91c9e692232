#!/usr/bin/env python3
"""PyTorch baselines for `ferry demo` on a GPU, at the same configuration.

Two models, as `ferry demo --model` has them (internal/demo):

  mlp  L layers of Linear(W, W) + ReLU at batch B, MSE loss against a target
       kept on the host until forward ends, plain SGD (lr 1e-3), gradients
       dropped after each step.
  gpt  nanoGPT's GPT (bench/nanogpt_model.py) on random tokens, cross-entropy
       against random targets, AdamW (model.py's configure_optimizers,
       lr 1e-3); GPT-2 124M is --layers 12 --heads 12 --embd 768 --seq 1024
       --vocab 50257 --batch 8.

For each mode it measures memory as the original user did
(torch.cuda.memory_allocated before and after forward, max_memory_allocated
during forward, and during the whole step) and the median time of whole
steps (forward, backward, optimizer, synchronised), after one warm-up step.

Precision (--precision): fp32 (the default), or bf16: PyTorch's automatic
mixed precision as nanoGPT trains in bfloat16, the forward and the loss
under torch.autocast("cuda", dtype=torch.bfloat16), parameters, gradients
and optimizer state in float32, no loss scaling. The comparison for
`ferry demo --precision bf16`.

Modes:
  none               no offloading
  naive              (mlp) the origin: each layer input copied with
                     .to('cpu', non_blocking=True) and the copy thrown away
                     (saves nothing)
  save_on_cpu        torch.autograd.graph.save_on_cpu(pin_memory=True)
  offload            a stream-based offloader in the style of torchtune's
                     OffloadActivations: a side copy stream with events, the
                     GPU tensor kept alive until its copy has finished,
                     parameters skipped (by storage, so the weight.t() view
                     addmm saves is skipped too), tensors under 1 KiB kept, no
                     deduplication, and during backward each unpack
                     prefetches the tensor the next one will need. Under
                     bf16 the bfloat16 copies autocast makes of the
                     parameters (and the views of them that are saved) are
                     kept too, like the parameters themselves: only
                     activations move.
  recompute          torch.utils.checkpoint (reentrant) around each layer or
                     block: only its input is kept (the MLP's first layer is
                     not checkpointed: a reentrant checkpoint needs an input
                     that requires grad)
  recompute_offload  recompute under save_on_cpu: the kept inputs go to the
                     host

Usage: python3 bench/torch_gpu.py [--model mlp --layers 40 --width 4096
       --batch 1024 --steps 3 --modes none,naive,save_on_cpu,offload
       --precision fp32 --json FILE]
Prints one table; with --json also writes the numbers as JSON (after each
mode, so a run cut short keeps the modes it finished). Exits 3 when torch
cannot be imported, 2 when it sees no GPU.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError as err:
    print(f"torch_gpu.py: skipped, cannot import torch: {err}", file=sys.stderr)
    sys.exit(3)

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
        self.params = {id(p) for p in params}
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

    # Where a saved tensor is a view or an autocast copy of a parameter, the
    # functions its grad_fn chain goes through back to the parameter's
    # AccumulateGrad.
    PARAM_PATH = ("ToCopyBackward", "TBackward", "TransposeBackward", "PermuteBackward",
                  "ViewBackward", "UnsafeViewBackward", "ExpandBackward")

    def _from_param(self, t):
        """Whether t is a parameter's copy (autocast's bfloat16 cast) or a
        view of one: grad_fn leads back to a parameter through casts and
        views only."""
        fn = t.grad_fn
        for _ in range(4):
            if fn is None:
                return False
            if type(fn).__name__ == "AccumulateGrad":
                return id(fn.variable) in self.params
            if not type(fn).__name__.startswith(self.PARAM_PATH) or not fn.next_functions:
                return False
            fn = fn.next_functions[0][0]
        return False

    def _drop_finished(self):
        for i in [i for i, (_, ev) in self.fwd_stash.items() if ev.query()]:
            del self.fwd_stash[i]

    def pack(self, t):
        tid = self.next_id
        self.next_id += 1
        nbytes = t.numel() * t.element_size()
        if (not t.is_cuda or nbytes < self.MIN_BYTES
                or t.untyped_storage().data_ptr() in self.param_storages
                or (t.dtype != torch.float32 and self._from_param(t))):
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


class MLP:
    """The origin model: Linear(W, W) + ReLU layers, MSE loss, SGD."""

    def __init__(self, args, dev):
        self.layers = [torch.nn.Linear(args.width, args.width, device=dev) for _ in range(args.layers)]
        self.params = [p for l in self.layers for p in l.parameters()]
        self.opt = torch.optim.SGD(self.params, lr=1e-3)
        self.x = torch.randn(args.batch, args.width, device=dev)
        self.target = torch.randn(args.batch, args.width)  # on the host until forward ends
        self.dev = dev

    def forward(self, mode):
        h = self.x
        for i, l in enumerate(self.layers):
            prev = h
            if mode.startswith("recompute") and i > 0:
                h = checkpoint(lambda h, l=l: F.relu(l(h)), h, use_reentrant=True)
            else:
                h = F.relu(l(h))
            if mode == "naive":
                prev.to("cpu", non_blocking=True)  # the copy is thrown away
        return h

    def loss(self, y):
        return F.mse_loss(y, self.target.to(self.dev))


class GPTWorkload:
    """nanoGPT's GPT on random tokens, cross-entropy, AdamW."""

    def __init__(self, args, dev):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from nanogpt_model import GPT, GPTConfig

        cfg = GPTConfig(vocab=args.vocab, seq=args.seq, layers=args.layers, heads=args.heads, embd=args.embd, dropout=0.0)
        self.model = GPT(cfg).to(dev).train()
        self.params = list(self.model.parameters())
        self.opt = self.model.optimizer(lr=1e-3)
        self.idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
        self.targets = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)

    def forward(self, mode):
        if mode == "naive":
            raise ValueError("gpt has no naive mode")
        tr = self.model.transformer
        pos = torch.arange(0, self.idx.size(1), dtype=torch.long, device=self.idx.device)
        x = tr.drop(tr.wte(self.idx) + tr.wpe(pos))
        for block in tr.h:
            x = checkpoint(block, x, use_reentrant=True) if mode.startswith("recompute") else block(x)
        logits = self.model.lm_head(tr.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), self.targets.view(-1))

    def loss(self, y):
        return y


def autocast(args):
    """The forward's (and the loss's) precision context: autocast to
    bfloat16 under --precision bf16, nothing under fp32."""
    if args.precision == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def run_mode(mode, args, dev):
    torch.manual_seed(1)
    w = GPTWorkload(args, dev) if args.model == "gpt" else MLP(args, dev)
    counter = Counter()
    off = StreamOffloader(w.params, counter) if mode == "offload" else None
    res = {"mode": mode, "step_seconds_all": []}
    for step in range(args.steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        counter.bytes = 0
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with autocast(args):
            if mode in ("save_on_cpu", "recompute_offload"):
                with save_on_cpu_hooks(counter):
                    y = w.forward(mode)
            elif mode == "offload":
                off.reset()
                with off.hooks():
                    y = w.forward(mode)
            else:
                y = w.forward(mode)
        after = torch.cuda.memory_allocated()
        peak = torch.cuda.max_memory_allocated()
        with autocast(args):
            loss = w.loss(y)
        del y
        loss.backward()
        w.opt.step()
        w.opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if step == 0:
            res["loss"] = loss.item()
            continue
        res["step_seconds_all"].append(elapsed)
        res.update(before_forward_bytes=before, after_forward_bytes=after, peak_forward_bytes=peak,
                   peak_step_bytes=torch.cuda.max_memory_allocated(), offloaded_bytes=counter.bytes)
    res["step_seconds"] = statistics.median(res["step_seconds_all"])
    del w, off, loss
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "gpt"])
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12, help="gpt")
    ap.add_argument("--embd", type=int, default=768, help="gpt")
    ap.add_argument("--seq", type=int, default=1024, help="gpt")
    ap.add_argument("--vocab", type=int, default=50257, help="gpt")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--modes", default="none,naive,save_on_cpu,offload")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: forward and loss under torch.autocast to bfloat16, float32 parameters")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    head = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "model": args.model, "layers": args.layers, "batch": args.batch, "steps": args.steps,
        "precision": args.precision,
    }
    if args.model == "gpt":
        head.update(heads=args.heads, embd=args.embd, seq=args.seq, vocab=args.vocab)
        what = (f"GPT ({args.layers} layers, {args.heads} heads, embedding {args.embd}, sequence {args.seq}, "
                f"vocabulary {args.vocab}), AdamW")
    else:
        head.update(width=args.width, activation_bytes=args.batch * args.width * (2 if args.precision == "bf16" else 4),
                    parameter_bytes=args.layers * (args.width * args.width + args.width) * 4)
        what = f"{args.layers} x Linear({args.width}, {args.width}) + ReLU, SGD"
    if args.precision == "bf16":
        what += ", autocast bf16 (float32 parameters)"
    print(f"PyTorch {head['torch']} (CUDA {head['cuda']}) on {head['gpu']}, allow_tf32={head['allow_tf32']}: "
          f"{what}, batch {args.batch}, median of {args.steps} steps after a warm-up", flush=True)
    runs = []
    for mode in args.modes.split(","):
        runs.append(run_mode(mode.strip(), args, dev))
        print(f"{runs[-1]['mode']}: {runs[-1]['step_seconds'] * 1e3:.1f} ms/step", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**head, "runs": runs}, f, indent=1)
    print(f"{'mode':<17} {'before MiB':>11} {'after MiB':>10} {'peak MiB':>9} {'step peak MiB':>14} {'step ms':>8} "
          f"{'to host MiB/step':>17}")
    for r in runs:
        print(f"{r['mode']:<17} {r['before_forward_bytes'] / MiB:>11.2f} {r['after_forward_bytes'] / MiB:>10.2f} "
              f"{r['peak_forward_bytes'] / MiB:>9.2f} {r['peak_step_bytes'] / MiB:>14.2f} {r['step_seconds'] * 1e3:>8.1f} "
              f"{r['offloaded_bytes'] / MiB:>17.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
