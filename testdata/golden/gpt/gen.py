#!/usr/bin/python3
"""Golden data for ferry's GPT ops and a small GPT-2-style model, computed by
PyTorch (float32, CPU).

Run from the repository root with Debian's PyTorch 1.13:

    /usr/bin/python3 testdata/golden/gpt/gen.py

It writes, beside this script:

  ops.json    one case per op and variant, in the format of
              testdata/golden/ops.json (whose writer, testdata/golden/gen.py,
              this script imports): inputs, output, the upstream gradient G
              and the gradient of every float input, i.e. backward of
              (out * G).sum(). golden_gpt_ops_test.go reads it.
  model.json  a GPT-2-style model with nanoGPT's structure (model.py:
              pre-LN blocks, fused c_attn, tanh GELU, tied wte/lm_head,
              dropout 0, bias true): its config, its initial weights under
              PyTorch's names (the tied weight once, as
              transformer.wte.weight), the token batch and targets of each
              step, the loss of each step, the gradients of the first step
              and every parameter after 5 AdamW steps.
              gpt_model_golden_test.go reads it.

Optimizer (the issue leaves it open): AdamW, lr 1e-3, betas (0.9, 0.999),
eps 1e-8, with nanoGPT's decay groups (configure_optimizers): weight decay
0.1 on every parameter with two or more dimensions (the embeddings and the
Linear weights), 0 on the biases and LayerNorm parameters.

The sequence T of the batch (12) is shorter than the model's block size
(Seq 16), so the position embedding is used through wpe[:T] (a narrow) and
its last rows get exactly zero gradient. Two targets are -100 (ignored by
cross-entropy, PyTorch's default ignore_index), so the loss is the mean over
the other rows.

Attention is written out as nanoGPT's slow path (q @ k^T * scale,
masked_fill(-inf) above the diagonal, softmax, @ v), so the data does not
depend on PyTorch's fused kernels.

Seeds are fixed; rerunning gives the same files on one machine.
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gen as base  # noqa: E402  testdata/golden/gen.py: enc, dumps, case

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
base.GEN.manual_seed(20261202)
randn, rand, enc, case = base.randn, base.rand, base.enc, base.case


def attention(q, k, v, causal=True, scale=0.0):
    """nanoGPT's slow path on [B, H, T, D]; scale 0 means 1/sqrt(D)."""
    T, D = q.shape[-2], q.shape[-1]
    s = scale or 1.0 / math.sqrt(D)
    att = (q @ k.transpose(-2, -1)) * s
    if causal:
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v


def heads(x, h):
    """[B, T, C] -> [B, H, T, C/H], a view, as nanoGPT splits heads."""
    B, T, C = x.shape
    return x.view(B, T, h, C // h).transpose(1, 2)


def _ln(args, a):
    x = args[0]
    w = args[1] if a.get("weight", True) else None
    b = args[1 + int(a.get("weight", True))] if a.get("bias", True) else None
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=a["eps"])


def _split(args, a):
    pieces = args[0].split(a["size"], dim=a["dim"])
    if "index" in a:
        return pieces[a["index"]]
    return torch.cat(pieces[::-1], dim=a["dim"])  # every piece, reordered


def _heads_qkT(args, a):
    return heads(args[0], a["heads"]) @ heads(args[1], a["heads"]).transpose(-2, -1)


def _merge_heads(args, a):
    y = args[0]
    B, H, T, D = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, H * D)


def _qkv_attention(args, a):
    """nanoGPT's CausalSelfAttention between c_attn and c_proj: split the
    fused [B, T, 3C] into q, k, v, split heads, attend, merge heads."""
    C, h = a["embd"], a["heads"]
    q, k, v = args[0].split(C, dim=2)
    y = attention(heads(q, h), heads(k, h), heads(v, h), causal=True)
    return _merge_heads([y], a)


base.OPS.update({
    "embedding": lambda x, a: F.embedding(x[1].long(), x[0]),
    "layer_norm": _ln,
    "narrow": lambda x, a: x[0].narrow(a["dim"], a["start"], a["length"]),
    "split": _split,
    "cat": lambda x, a: torch.cat(x, dim=a["dim"]),
    "permute": lambda x, a: x[0].permute(*a["dims"]),
    "heads_qkT": _heads_qkT,
    "merge_heads": _merge_heads,
    "attention": lambda x, a: attention(x[0], x[1], x[2], causal=a["causal"], scale=a["scale"]),
    "qkv_attention": _qkv_attention,
    "cross_entropy_3d": lambda x, a: F.cross_entropy(x[0].reshape(-1, x[0].shape[-1]), x[1].reshape(-1).long()),
})


def gen_ops():
    # --- embedding: repeated indices (their gradient rows are sums), a 1-D
    # and a 2-D index tensor, an unused row (zero gradient).
    idx = torch.tensor([[3, 1, 3, 0], [6, 3, 1, 1], [0, 0, 0, 3]], dtype=torch.int32)
    case("embedding/repeated_2d", "embedding", [randn(8, 5), idx])
    case("embedding/1d", "embedding", [randn(37, 6), torch.tensor([36, 0, 5, 5, 36, 17], dtype=torch.int32)])
    case("embedding/single_row", "embedding", [randn(1, 3), torch.zeros(2, 3, dtype=torch.int32)])

    # --- layer_norm over the last axis, eps 1e-5 (nn.LayerNorm's default).
    for tag, shape in [("2d", (5, 8)), ("3d", (2, 3, 32)), ("odd", (3, 7))]:
        C = shape[-1]
        case(f"layer_norm/{tag}", "layer_norm", [randn(*shape), 1 + 0.3 * randn(C), 0.2 * randn(C)],
             attrs={"eps": 1e-5})
    case("layer_norm/no_affine", "layer_norm", [randn(4, 9)], attrs={"eps": 1e-5, "weight": False, "bias": False})
    case("layer_norm/weight_only", "layer_norm", [randn(4, 9), 1 + 0.3 * randn(9)],
         attrs={"eps": 1e-5, "bias": False})
    # A mean large against the spread: the variance must not be E[x²]-E[x]².
    case("layer_norm/large_mean", "layer_norm", [300 + 0.01 * randn(3, 16), randn(16), randn(16)],
         attrs={"eps": 1e-5})
    case("layer_norm/eps_1e-3_small_var", "layer_norm", [0.01 * randn(3, 8), randn(8), randn(8)],
         attrs={"eps": 1e-3})
    case("layer_norm/transposed_view", "layer_norm", [randn(8, 5), randn(8), randn(8)],
         attrs={"eps": 1e-5}, views=[(0, 1), None, None])

    # --- narrow, split, cat, permute
    case("narrow/rows", "narrow", [randn(16, 6)], attrs={"dim": 0, "start": 0, "length": 12})  # wpe[:T]
    case("narrow/middle_last_axis", "narrow", [randn(3, 4, 10)], attrs={"dim": 2, "start": 3, "length": 5})
    case("narrow/negative_dim", "narrow", [randn(3, 4, 10)], attrs={"dim": -2, "start": 1, "length": 2})
    case("narrow/of_transposed", "narrow", [randn(6, 5)], attrs={"dim": 1, "start": 2, "length": 3},
         views=[(0, 1)])
    for i in range(3):  # q, k, v of a fused [B, T, 3C]
        case(f"split/qkv_{i}", "split", [randn(2, 3, 12)], attrs={"size": 4, "dim": 2, "index": i})
    case("split/uneven_all", "split", [randn(7, 3)], attrs={"size": 3, "dim": 0})  # 3, 3, 1
    case("split/negative_dim_all", "split", [randn(2, 10)], attrs={"size": 4, "dim": -1})
    case("cat/dim0", "cat", [randn(2, 5), randn(3, 5), randn(1, 5)], attrs={"dim": 0})
    case("cat/last_dim", "cat", [randn(2, 3, 4), randn(2, 3, 1), randn(2, 3, 2)], attrs={"dim": -1})
    case("cat/middle_dim_with_view", "cat", [randn(2, 3, 4), randn(2, 4, 2)], attrs={"dim": 1},
         views=[None, (1, 2)])
    case("permute/0213", "permute", [randn(2, 3, 4, 5)], attrs={"dims": [0, 2, 1, 3]})
    case("permute/3021", "permute", [randn(2, 3, 4, 5)], attrs={"dims": [3, 0, 2, 1]})

    # --- 4-D batched matrix products on [B, H, T, D], transposes included.
    B, H, T, D = 2, 3, 5, 4
    case("matmul/4d", "matmul", [randn(B, H, T, D), randn(B, H, D, T)])
    case("matmul/4d_qkT", "matmul", [randn(B, H, T, D), randn(B, H, T, D)], views=[None, (2, 3)])
    case("matmul/4d_aT", "matmul", [randn(B, H, D, T), randn(B, H, D, 6)], views=[(2, 3), None])
    case("matmul/4d_att_v", "matmul", [rand(B, H, T, T), randn(B, H, T, D)])
    # Heads split off a [B, T, C] as nanoGPT does (view, transpose(1, 2)):
    # batch axes that do not flatten to one stride.
    case("matmul/4d_heads_view", "heads_qkT", [randn(2, 5, 12), randn(2, 5, 12)], attrs={"heads": 3})
    case("matmul/4d_from_permuted_views", "matmul", [randn(B, T, H, D), randn(B, D, H, T)],
         views=[(1, 2), (1, 2)])
    case("merge_heads", "merge_heads", [randn(2, 3, 5, 4)])

    # --- causal scaled-dot-product attention (nanoGPT's slow path).
    case("attention/causal", "attention", [randn(2, 3, 6, 4), randn(2, 3, 6, 4), randn(2, 3, 6, 4)],
         attrs={"causal": True, "scale": 0.0})
    case("attention/causal_d8_t16", "attention", [randn(1, 4, 16, 8), randn(1, 4, 16, 8), randn(1, 4, 16, 8)],
         attrs={"causal": True, "scale": 0.0})
    case("attention/not_causal", "attention", [randn(2, 2, 5, 3), randn(2, 2, 5, 3), randn(2, 2, 5, 3)],
         attrs={"causal": False, "scale": 0.0})
    case("attention/causal_scale", "attention", [randn(1, 2, 4, 5), randn(1, 2, 4, 5), randn(1, 2, 4, 5)],
         attrs={"causal": True, "scale": 0.25})
    case("attention/causal_t1", "attention", [randn(2, 2, 1, 4), randn(2, 2, 1, 4), randn(2, 2, 1, 4)],
         attrs={"causal": True, "scale": 0.0})
    case("attention/causal_large_logits", "attention",
         [randn(1, 2, 7, 4, scale=8.0), randn(1, 2, 7, 4, scale=8.0), randn(1, 2, 7, 4)],
         attrs={"causal": True, "scale": 0.0})
    # q, k, v as views [B, H, T, D] of [B, T, H, D] tensors (transpose(1, 2)).
    case("attention/causal_head_views", "attention", [randn(2, 6, 3, 4), randn(2, 6, 3, 4), randn(2, 6, 3, 4)],
         attrs={"causal": True, "scale": 0.0}, views=[(1, 2), (1, 2), (1, 2)])
    case("attention/qkv_split_heads", "qkv_attention", [randn(2, 7, 3 * 12)], attrs={"embd": 12, "heads": 3})

    # --- GELU (tanh) at a GPT's shape; cross-entropy on [B, T, V] logits.
    case("gelu_tanh/3d", "gelu_tanh", [randn(2, 5, 16, scale=2.0)])
    tgt = torch.randint(0, 11, (3, 5), generator=base.GEN, dtype=torch.int32)
    tgt[0, 2] = tgt[2, 0] = tgt[2, 4] = -100
    case("cross_entropy/3d_ignore", "cross_entropy_3d", [randn(3, 5, 11), tgt])
    tgt = torch.tensor([-100, 4, -100, -100, 0, -100], dtype=torch.int32)
    case("cross_entropy/mostly_ignored", "cross_entropy", [randn(6, 5), tgt])


# ---------------------------------------------------------------- the model

CFG = {"vocab": 37, "seq": 16, "layers": 2, "heads": 4, "embd": 32, "dropout": 0.0, "bias": True}
BATCH, T, STEPS = 3, 12, 5
OPT = {"optim": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
       "weight_decay": 0.1, "decay": "dim>=2"}


def init_weights():
    """nanoGPT's initialisation (normal 0.02, c_proj 0.02/sqrt(2L), zero
    biases, unit LayerNorms), in nanoGPT's parameter order. Biases and
    LayerNorm parameters are then perturbed (normal 0.02 around their init)
    so that a bias that only adds to the output shows up in the data."""
    V, S, L, C = CFG["vocab"], CFG["seq"], CFG["layers"], CFG["embd"]
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
    return p


def forward(p, idx):
    """nanoGPT's GPT.forward (dropout 0), logits for every position."""
    L, H, C = CFG["layers"], CFG["heads"], CFG["embd"]
    B, T_ = idx.shape
    x = F.embedding(idx, p["transformer.wte.weight"]) + p["transformer.wpe.weight"][:T_]
    for i in range(L):
        h = f"transformer.h.{i}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        q, k, v = F.linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]).split(C, dim=2)
        y = attention(heads(q, H), heads(k, H), heads(v, H), causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T_, C)
        x = x + F.linear(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = F.gelu(F.linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps=1e-5)
    return F.linear(x, p["transformer.wte.weight"])  # lm_head, tied


def gen_model():
    init = init_weights()
    names = list(init)
    p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    decay = [p[n] for n in names if p[n].dim() >= 2]
    no_decay = [p[n] for n in names if p[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    tokens, targets, losses, grads0 = [], [], [], None
    for step in range(STEPS):
        idx = torch.randint(0, CFG["vocab"], (BATCH, T), generator=base.GEN, dtype=torch.int32)
        tgt = torch.randint(0, CFG["vocab"], (BATCH, T), generator=base.GEN, dtype=torch.int32)
        tgt[0, 3] = tgt[2, T - 1] = -100
        tokens.append(idx)
        targets.append(tgt)
        opt.zero_grad(set_to_none=True)
        logits = forward(p, idx.long())
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1).long())
        loss.backward()
        if step == 0:
            logits0 = logits.detach().clone()
            grads0 = {n: enc(p[n].grad) for n in names}
        losses.append(float(loss))
        opt.step()
    return {
        "config": CFG, "batch": BATCH, "T": T, "optimizer": OPT,
        "names": names,
        "init": {n: enc(init[n]) for n in names},
        "tokens": [enc(t) for t in tokens], "targets": [enc(t) for t in targets],
        "logits0": enc(logits0),
        "losses": losses, "grads0": grads0,
        "final": {n: enc(p[n]) for n in names},
    }


if __name__ == "__main__":
    base.CASES.clear()
    gen_ops()
    meta = {"generator": "testdata/golden/gpt/gen.py", "torch": torch.__version__}
    for name, obj in [("ops.json", dict(meta, cases=base.CASES)), ("model.json", dict(meta, model=gen_model()))]:
        path = os.path.join(HERE, name)
        with open(path, "w") as f:
            f.write(base.dumps(obj) + "\n")
        print(f"{path}: {os.path.getsize(path)} bytes")
