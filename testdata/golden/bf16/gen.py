#!/usr/bin/python3
"""Golden data for ferry's bfloat16 mixed precision (Tape.Autocast), computed
by PyTorch with explicit casts (float32 arithmetic on bfloat16-rounded
values, CPU).

Run from the repository root with Debian's PyTorch 1.13:

    /usr/bin/python3 testdata/golden/bf16/gen.py

It writes model.json beside this script; bf16_golden_test.go reads it.

Why explicit casts: PyTorch 1.13's CPU autocast cannot serve as the
reference (its bfloat16 LayerNorm fails, and its bfloat16 matmul
accumulates in bfloat16). So the reference is float32 PyTorch in which
every value that ferry holds as a bfloat16 tensor is rounded, and so is
its gradient, following ferry's rules (ops_precision.go) exactly:

  - bf16(t) is t.bfloat16().float(): round to nearest, ties to even, as
    ferry's conversion. Matrix products are float32 products of such
    rounded operands, accumulated in float32.
  - A bfloat16 tensor's gradient is bfloat16. Round(t) below rounds the
    value in forward and the gradient in backward; it stands at every point
    where ferry holds a bfloat16 tensor: the cast copies of a Linear's x and
    W, the Linear's output, the GELU's output, the attention's output and
    its q, k, v (views of the c_attn output, already rounded there).
  - Linear under autocast: y = bf16(bf16(x) @ bf16(W).T + bf16(b)): the
    bias rounded, added in float32, one rounding of the result. The bias
    gradient is not rounded (float32, the sum of the bfloat16 output
    gradient): the bias enters as b + (bf16(b) - b).detach(). W's gradient
    is the float32 value of the rounded gradient of its cast copy (the
    tied wte: that plus the embedding's float32 gradient).
  - LayerNorm, softmax, losses compute in float32 on widened inputs and
    return float32; the residual stream (float32 + widened bfloat16) is
    float32; embeddings are float32.
  - Attention (ferry's fused kernel, attentionBF16): float32 on the
    bfloat16 q, k, v, causal softmax in float32, the output rounded. Its
    backward is FlashAttention's, on the rounded output: D_i = Σ dO·O with
    O the bfloat16 output, dS = P∘(dP - D_i); dq, dk, dv computed in float32
    and rounded (AttentionBF16 below).
  - GELU (tanh) and ReLU take a bfloat16 input, compute in float32 and
    round (ReLU exactly).

Models:

  gpt  nanoGPT's structure (pre-LN blocks, fused c_attn, tanh GELU, tied
       wte/lm_head, dropout 0, bias), vocab 65, block 16, 2 layers, 4
       heads, embedding 32; one batch of 2 × 16 tokens for all 20 AdamW
       steps (lr 1e-2, betas (0.9, 0.999), eps 1e-8; weight decay 0.1 on
       ≥2-D parameters, 0 on biases and LayerNorms, nanoGPT's groups). The
       tokens mostly follow t+3 mod V; the loss falls from 4.2 to about 0.4
       and the logits grow over the run.
  mlp  the origin model (models/mlp): 3 × (Linear(32, 32) + ReLU), the last
       layer too, MSE against a float32 target; batch 4, one batch for all
       20 AdamW steps (lr 1e-2, weight decay 0.01 on every parameter).

For each model it stores the initial parameters (PyTorch's initialisation
rounded to 4 significant digits, so the file stays small; they are float32
values, not bfloat16 ones), the data, the first step's logits (outputs) of
the bfloat16 reference, each step's loss of the bfloat16 reference
("losses") and of plain float32 PyTorch ("losses_fp32"), the losses of the
reference's rules evaluated in float64 and rounded to float32 after each op
("losses_reordered": how far mere summation order moves the losses, through
bfloat16 roundings that fall the other way), and the losses of references
with one rule changed ("variants"), which tell how far a wrong rule moves
them. bf16_golden_test.go chooses its tolerances between the two.

Seeds are fixed; rerunning gives the same file on one machine.
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gen as base  # noqa: E402  testdata/golden/gen.py: enc, dumps

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
GEN = torch.Generator().manual_seed(20261203)
STEPS = 20


def randn(*shape, scale=1.0):
    return torch.randn(tuple(shape), generator=GEN, dtype=torch.float32) * scale


def short(t):
    """t rounded to 4 significant decimal digits, as float32."""
    a = np.array([float(f"{v:.4g}") for v in t.reshape(-1).tolist()], dtype=np.float32)
    return torch.from_numpy(a).reshape(t.shape)


# ------------------------------------------------------------ the rules

class Rules:
    """Which of ferry's rules a reference follows: all of them by default
    (the reference); a variant switches one off, and fp32 all of them."""

    def __init__(self, fp32=False, round_grads=True, round_linear_out=True, bias_grad_rounded=False,
                 attn_d_rounded_out=True, f64=False):
        self.fp32 = fp32
        self.f64 = f64  # the same rules, arithmetic in float64 rounded to float32 after each op
        self.round_grads = round_grads
        self.round_linear_out = round_linear_out
        self.bias_grad_rounded = bias_grad_rounded
        self.attn_d_rounded_out = attn_d_rounded_out


def bf16(t):
    return t.bfloat16().float()


class Round(torch.autograd.Function):
    """A bfloat16 tensor: the value rounded in forward, the gradient in
    backward."""

    @staticmethod
    def forward(ctx, t):
        return bf16(t)

    @staticmethod
    def backward(ctx, g):
        return bf16(g)


class RoundValue(torch.autograd.Function):
    """The value rounded, the gradient passed as it is (a variant)."""

    @staticmethod
    def forward(ctx, t):
        return bf16(t)

    @staticmethod
    def backward(ctx, g):
        return g


def rnd(t, R):
    if R.fp32:
        return t
    return (Round if R.round_grads else RoundValue).apply(t)


def linear(x, W, b, R):
    """F.linear under autocast (ferry's Linear, linearInPrecision)."""
    if R.fp32:
        return F.linear(x, W, b)
    xb, Wb = rnd(x, R), rnd(W, R)
    if b is not None:
        b = rnd(b, R) if R.bias_grad_rounded else b + (bf16(b) - b).detach()
    if R.f64:
        y = xb.double() @ Wb.double().t()
        y = (y if b is None else y + b.double()).float()
    else:
        y = xb @ Wb.t()
        if b is not None:
            y = y + b
    return rnd(y, R) if R.round_linear_out else y


def f64(fn, R, *args, **kw):
    """fn on args, in float64 when R.f64 (the result rounded to float32)."""
    if not R.f64:
        return fn(*args, **kw)
    return fn(*(a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args), **kw).float()


def attention_fp32(q, k, v):
    """nanoGPT's slow path on [B, H, T, D], causal, scale 1/sqrt(D)."""
    T, D = q.shape[-2], q.shape[-1]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class AttentionBF16(torch.autograd.Function):
    """ferry's attentionBF16 with the CPU kernels' backward: float32 on the
    bfloat16 q, k, v; the output rounded; backward from the rounded output
    (D_i = Σ dO·O), dq, dk, dv rounded."""

    @staticmethod
    def forward(ctx, q, k, v, d_rounded_out, f64):
        if f64:
            q, k, v = q.double(), k.double(), v.double()
        T, D = q.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(D)
        s = (q @ k.transpose(-2, -1)) * scale
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        p = F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        o = p @ v
        out = bf16(o.float()).to(q.dtype)
        ctx.save_for_backward(q, k, v, p, out if d_rounded_out else o)
        ctx.scale = scale
        return out.float()

    @staticmethod
    def backward(ctx, g):
        q, k, v, p, o = ctx.saved_tensors
        g = bf16(g).to(q.dtype)
        dv = p.transpose(-2, -1) @ g
        dp = g @ v.transpose(-2, -1)
        d = (g * o).sum(-1, keepdim=True)
        ds = p * (dp - d)
        dq = (ds @ k) * ctx.scale
        dk = (ds.transpose(-2, -1) @ q) * ctx.scale
        return bf16(dq.float()), bf16(dk.float()), bf16(dv.float()), None, None


def attention(q, k, v, R):
    if R.fp32:
        return attention_fp32(q, k, v)
    if not R.round_grads:  # values as ferry, gradients float32
        return RoundValue.apply(attention_fp32(q, k, v))
    return AttentionBF16.apply(q, k, v, R.attn_d_rounded_out, R.f64)


def adamw(groups, lr, wd):
    return torch.optim.AdamW([{"params": g, "weight_decay": w} for g, w in zip(groups, wd)],
                             lr=lr, betas=(0.9, 0.999), eps=1e-8)


# ------------------------------------------------------------ the GPT

GPT = {"vocab": 65, "seq": 16, "layers": 2, "heads": 4, "embd": 32, "dropout": 0.0, "bias": True}
GPT_BATCH, GPT_LR, GPT_WD = 2, 1e-2, 0.1


def gpt_init():
    """nanoGPT's initialisation, biases and LayerNorms perturbed (as
    testdata/golden/gpt/gen.py), in nanoGPT's parameter order."""
    V, S, L, C = GPT["vocab"], GPT["seq"], GPT["layers"], GPT["embd"]
    p = {"transformer.wte.weight": 0.02 * randn(V, C), "transformer.wpe.weight": 0.02 * randn(S, C)}
    proj = 0.02 / math.sqrt(2 * L)
    for i in range(L):
        h = f"transformer.h.{i}."
        p[h + "ln_1.weight"] = 1 + 0.02 * randn(C)
        p[h + "ln_1.bias"] = 0.02 * randn(C)
        p[h + "attn.c_attn.weight"] = 0.02 * randn(3 * C, C)
        p[h + "attn.c_attn.bias"] = 0.02 * randn(3 * C)
        p[h + "attn.c_proj.weight"] = proj * randn(C, C)
        p[h + "attn.c_proj.bias"] = 0.02 * randn(C)
        p[h + "ln_2.weight"] = 1 + 0.02 * randn(C)
        p[h + "ln_2.bias"] = 0.02 * randn(C)
        p[h + "mlp.c_fc.weight"] = 0.02 * randn(4 * C, C)
        p[h + "mlp.c_fc.bias"] = 0.02 * randn(4 * C)
        p[h + "mlp.c_proj.weight"] = proj * randn(C, 4 * C)
        p[h + "mlp.c_proj.bias"] = 0.02 * randn(C)
    p["transformer.ln_f.weight"] = 1 + 0.02 * randn(C)
    p["transformer.ln_f.bias"] = 0.02 * randn(C)
    return {n: short(t) for n, t in p.items()}


def gpt_data():
    """One batch of GPT_BATCH sequences of seq+1 tokens, each next token the
    previous + 3 (mod V) or, with probability 0.2, a random one; every step
    trains on it, so the loss falls and the logits grow over the run."""
    V, T = GPT["vocab"], GPT["seq"]
    seqs = torch.empty(GPT_BATCH, T + 1, dtype=torch.int64)
    seqs[:, 0] = torch.randint(0, V, (GPT_BATCH,), generator=GEN)
    for t in range(1, T + 1):
        jump = torch.rand((GPT_BATCH,), generator=GEN) < 0.2
        rnd_tok = torch.randint(0, V, (GPT_BATCH,), generator=GEN)
        seqs[:, t] = torch.where(jump, rnd_tok, (seqs[:, t - 1] + 3) % V)
    return seqs[:, :-1].to(torch.int32), seqs[:, 1:].to(torch.int32)


def gpt_forward(p, idx, R):
    """nanoGPT's GPT.forward (dropout 0) under ferry's autocast rules R."""
    L, H, C = GPT["layers"], GPT["heads"], GPT["embd"]
    B, T = idx.shape
    x = F.embedding(idx, p["transformer.wte.weight"]) + p["transformer.wpe.weight"][:T]
    for i in range(L):
        h = f"transformer.h.{i}."
        a = f64(F.layer_norm, R, x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"], R)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
        y = attention(q, k, v, R).transpose(1, 2).contiguous().view(B, T, C)
        x = x + linear(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"], R)
        m = f64(F.layer_norm, R, x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        z = linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"], R)
        g = rnd(f64(F.gelu, R, z, approximate="tanh"), R)
        x = x + linear(g, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"], R)
    x = f64(F.layer_norm, R, x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps=1e-5)
    return linear(x, p["transformer.wte.weight"], None, R)  # lm_head, tied


def gpt_run(init, tokens, targets, R):
    names = list(init)
    p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    opt = adamw([[p[n] for n in names if p[n].dim() >= 2], [p[n] for n in names if p[n].dim() < 2]],
                GPT_LR, [GPT_WD, 0.0])
    losses, logits0 = [], None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = gpt_forward(p, tokens.long(), R)
        loss = f64(F.cross_entropy, R, logits.view(-1, logits.size(-1)), targets.view(-1).long())
        loss.backward()
        if step == 0:
            logits0 = logits.detach().clone()
        losses.append(float(loss))
        opt.step()
    return losses, logits0


# ------------------------------------------------------------ the MLP

MLP = {"layers": 3, "width": 32, "batch": 4}
MLP_LR, MLP_WD = 1e-2, 0.01


def mlp_init():
    """Linear layers initialised as nn.Linear (uniform ±1/√in)."""
    W = MLP["width"]
    bound = 1 / math.sqrt(W)
    out = []
    for _ in range(MLP["layers"]):
        w = (torch.rand((W, W), generator=GEN) * 2 - 1) * bound
        b = (torch.rand((W,), generator=GEN) * 2 - 1) * bound
        out += [short(w), short(b)]
    return out


def mlp_forward(ps, x, R):
    """models/mlp: every layer Linear then ReLU, the last one too."""
    h = x
    for i in range(0, len(ps), 2):
        h = F.relu(linear(h, ps[i], ps[i + 1], R))
        h = rnd(h, R)  # a bfloat16 tensor: no change in value
    return h


def mlp_run(init, x, y, R):
    ps = [t.clone().requires_grad_(True) for t in init]
    opt = adamw([ps], MLP_LR, [MLP_WD])
    losses, out0 = [], None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        out = mlp_forward(ps, x, R)
        loss = f64(F.mse_loss, R, out, y)
        loss.backward()
        if step == 0:
            out0 = out.detach().clone()
        losses.append(float(loss))
        opt.step()
    return losses, out0


# ------------------------------------------------------------ the file

VARIANTS = {
    # Gradients stay float32 (values rounded as ferry).
    "float32_gradients": Rules(round_grads=False),
    # A Linear's output is float32 (only its operands rounded).
    "linear_output_not_rounded": Rules(round_linear_out=False),
    # The bias is a bfloat16 copy whose gradient is rounded too.
    "bias_gradient_rounded": Rules(bias_grad_rounded=True),
    # Attention's backward from the float32 output rather than the rounded.
    "attention_backward_fp32_output": Rules(attn_d_rounded_out=False),
}


# The same rules with every op's arithmetic in float64, rounded to float32
# after each op: how far other summation orders (ferry accumulates its
# reductions in float64) move the losses, through bfloat16 roundings that
# fall the other way.
REORDERED = Rules(f64=True)


def max_diff(a, b):
    return max(abs(u - v) for u, v in zip(a, b))


def gen():
    out = {}
    init = gpt_init()
    tokens, targets = gpt_data()
    losses, logits0 = gpt_run(init, tokens, targets, Rules())
    fp32, _ = gpt_run(init, tokens, targets, Rules(fp32=True))
    variants = {k: gpt_run(init, tokens, targets, R)[0] for k, R in VARIANTS.items()}
    reordered = gpt_run(init, tokens, targets, REORDERED)[0]
    out["gpt"] = {
        "config": GPT, "batch": GPT_BATCH,
        "optimizer": {"lr": GPT_LR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": GPT_WD},
        "names": list(init), "init": {n: base.enc(t) for n, t in init.items()},
        "tokens": base.enc(tokens), "targets": base.enc(targets),
        "logits0": base.enc(logits0), "losses": losses, "losses_fp32": fp32, "variants": variants,
        "losses_reordered": reordered,
    }
    report("gpt", losses, fp32, variants, reordered)

    init = mlp_init()
    x, y = randn(MLP["batch"], MLP["width"]), randn(MLP["batch"], MLP["width"])
    losses, out0 = mlp_run(init, x, y, Rules())
    fp32, _ = mlp_run(init, x, y, Rules(fp32=True))
    # The ReLU commutes with rounding, so an unrounded Linear output changes
    # nothing in the MLP; the MLP has no attention.
    skip = ("linear_output_not_rounded", "attention_backward_fp32_output")
    variants = {k: mlp_run(init, x, y, R)[0] for k, R in VARIANTS.items() if k not in skip}
    reordered = mlp_run(init, x, y, REORDERED)[0]
    out["mlp"] = {
        "config": MLP,
        "optimizer": {"lr": MLP_LR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": MLP_WD},
        "init": [base.enc(t) for t in init], "x": base.enc(x), "y": base.enc(y),
        "out0": base.enc(out0), "losses": losses, "losses_fp32": fp32, "variants": variants,
        "losses_reordered": reordered,
    }
    report("mlp", losses, fp32, variants, reordered)
    return out


def report(name, losses, fp32, variants, reordered):
    print(f"{name}: losses {losses[0]:.6f} .. {losses[-1]:.6f}; max |bf16 - fp32| {max_diff(losses, fp32):.3g}")
    print(f"  the rules in float64 arithmetic: max |reordered - bf16| {max_diff(reordered, losses):.3g}",
          " ".join(f"{abs(u - v):.1e}" for u, v in zip(reordered, losses)))
    for k, v in variants.items():
        print(f"  variant {k}: max |variant - bf16| {max_diff(v, losses):.3g}",
              " ".join(f"{abs(u - w):.1e}" for u, w in zip(v, losses)))


if __name__ == "__main__":
    obj = dict({"generator": "testdata/golden/bf16/gen.py", "torch": torch.__version__}, **gen())
    path = os.path.join(HERE, "model.json")
    with open(path, "w") as f:
        f.write(base.dumps(obj) + "\n")
    print(f"{path}: {os.path.getsize(path)} bytes")
