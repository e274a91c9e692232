#!/usr/bin/python3
"""Golden data for ferry's Llama (nn/llama.go), from a reference written by
hand in PyTorch with the structure, names and numerics of Hugging Face's
LlamaForCausalLM (eager attention; no `transformers` package needed).

Run from the repository root with Debian's PyTorch 1.13:

    /usr/bin/python3 testdata/llama/gen.py

It writes, beside this script (safetensors files by ../safetensors/st.py):

  llama.safetensors     the initial weights under Hugging Face's names
                        (model.embed_tokens.weight, model.layers.N.self_attn.
                        q_proj.weight, ..., model.norm.weight, lm_head.weight);
                        the config in __metadata__
  llama_io.safetensors  tokens and targets [5, B, T] (I32), logits0 (the
                        first step's logits), losses [5], grad.<name> (the
                        first step's gradients), final.<name> (every
                        parameter after 5 AdamW steps), cos and sin (the
                        rotary tables [T, D]); in __metadata__ the optimizer
                        and PyTorch's saved bytes per block (see below)

The model: vocab 64, seq 16, 2 layers, 4 query heads sharing 2 key/value
heads (grouped-query attention), embd 32, SwiGLU hidden 48, rope theta
10000, RMSNorm eps 1e-5, untied head, no biases. Rotary embeddings in the
"rotate_half" convention of LlamaRotaryEmbedding / apply_rotary_pos_emb.
Weights are drawn larger than Hugging Face's 0.02 (and the norms away from
1) so that every term matters in the comparison.

AdamW: lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices
and embeddings, 0 on the RMSNorm weights (nanoGPT's groups).

Saved bytes: torch.autograd.graph.saved_tensors_hooks sees every tensor
forward saves for backward; counted as bench/gpt_saved_bytes.py counts
(each storage once at its full size, parameters excluded, charged to the
block that saved it first; the rotary tables, shared by the blocks, go to
block 0). Recorded for the golden model at batch 2 (saved.golden.N) and for
one block of TinyLlama's width (embd 2048, 32 heads, 4 KV heads, hidden
5632) at batch 1 x 1024 (saved.tinyllama.0).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "safetensors"))
import st  # noqa: E402

CONFIG = dict(vocab=64, seq=16, layers=2, heads=4, kv_heads=2, embd=32, hidden=48, rope_theta=10000.0, norm_eps=1e-5)
BATCH, STEPS = 2, 5
OPT = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)


class RMSNorm(nn.Module):
    """LlamaRMSNorm."""

    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x


def rope_tables(T, D, theta):
    """LlamaRotaryEmbedding's cos and sin [T, D]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))
    t = torch.arange(T, dtype=inv_freq.dtype)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n):
    B, KV, T, D = x.shape
    if n == 1:
        return x
    return x[:, :, None, :, :].expand(B, KV, n, T, D).reshape(B, KV * n, T, D)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, H, KV = c["embd"], c["heads"], c["kv_heads"]
        D = C // H
        self.H, self.KV, self.D = H, KV, D
        self.q_proj = nn.Linear(C, H * D, bias=False)
        self.k_proj = nn.Linear(C, KV * D, bias=False)
        self.v_proj = nn.Linear(C, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.H // self.KV)
        v = repeat_kv(v, self.H // self.KV)
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.D)
        mask = torch.full((T, T), float("-inf")).triu(1)
        att = att + mask
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(att, v)
        y = y.transpose(1, 2).contiguous().reshape(B, T, C)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["embd"], c["hidden"], bias=False)
        self.up_proj = nn.Linear(c["embd"], c["hidden"], bias=False)
        self.down_proj = nn.Linear(c["hidden"], c["embd"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["embd"], c["norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["embd"], c["norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["embd"])
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["layers"])])
        self.norm = RMSNorm(c["embd"], c["norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Model(c)
        self.lm_head = nn.Linear(c["embd"], c["vocab"], bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        cos, sin = rope_tables(T, self.c["embd"] // self.c["heads"], self.c["rope_theta"])
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def saved_bytes(model, idx):
    """Saved bytes per block of one forward (see the module comment)."""
    params = {p.storage().data_ptr() for p in model.parameters()}
    where = ["outside"]
    seen = {}

    def pre(i):
        def hook(mod, inp):
            where[0] = i
        return hook

    def post(mod, inp, out):
        where[0] = "outside"

    hs = []
    for i, blk in enumerate(model.model.layers):
        hs.append(blk.register_forward_pre_hook(pre(i)))
        hs.append(blk.register_forward_hook(post))

    def pack(t):
        s = t.storage()
        ptr = s.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr] = (where[0], s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(idx)
    for h in hs:
        h.remove()
    per = [0] * len(model.model.layers)
    for owner, n in seen.values():
        if owner != "outside":
            per[owner] += n
    del logits
    return per


def main():
    torch.set_num_threads(2)
    c = CONFIG
    torch.manual_seed(0)
    m = LlamaForCausalLM(c)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.normal_(0, 1.0)
            else:
                p.normal_(0, 0.1)
    init = {n: p.detach().clone() for n, p in m.named_parameters()}
    tokens = torch.randint(0, c["vocab"], (STEPS, BATCH, c["seq"]))
    targets = torch.randint(0, c["vocab"], (STEPS, BATCH, c["seq"]))

    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    losses, out = [], {}
    for step in range(STEPS):
        logits = m(tokens[step])
        loss = F.cross_entropy(logits.view(-1, c["vocab"]), targets[step].view(-1))
        opt.zero_grad()
        loss.backward()
        if step == 0:
            out["logits0"] = logits.detach().clone()
            for n, p in m.named_parameters():
                out["grad." + n] = p.grad.detach().clone()
        losses.append(loss.item())
        opt.step()
    for n, p in m.named_parameters():
        out["final." + n] = p.detach().clone()
    out["tokens"] = tokens.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    cos, sin = rope_tables(c["seq"], c["embd"] // c["heads"], c["rope_theta"])
    out["cos"], out["sin"] = cos, sin

    # Saved bytes: the golden model at batch 2, and a TinyLlama-wide block.
    torch.manual_seed(0)
    g = LlamaForCausalLM(c).train()
    per = saved_bytes(g, tokens[0])
    tiny = dict(vocab=256, seq=1024, layers=1, heads=32, kv_heads=4, embd=2048, hidden=5632, rope_theta=10000.0, norm_eps=1e-5)
    t = LlamaForCausalLM(tiny).train()
    tper = saved_bytes(t, torch.randint(0, tiny["vocab"], (1, tiny["seq"])))
    print(f"pytorch {torch.__version__}: saved bytes per block, golden model at batch {BATCH}: {per}; "
          f"TinyLlama-wide block at 1 x 1024: {tper[0]}")

    meta = {"format": "pt"}
    meta.update({k: str(v) for k, v in c.items()})
    io_meta = {k: str(v) for k, v in OPT.items()}
    io_meta["pytorch"] = torch.__version__
    for i, n in enumerate(per):
        io_meta[f"saved.golden.{i}"] = str(n)
    io_meta["saved.tinyllama.0"] = str(tper[0])
    st.write(os.path.join(HERE, "llama.safetensors"), init, meta)
    st.write(os.path.join(HERE, "llama_io.safetensors"), out, io_meta)
    print("losses", losses)


if __name__ == "__main__":
    main()
