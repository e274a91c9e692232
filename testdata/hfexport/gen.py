#!/usr/bin/python3
"""Golden data for ferry's Hugging Face export (nn/export_hf.go), checked
the way transformers' from_pretrained would read it, without transformers.

Run from the repository root with Debian's PyTorch 1.13 and Go:

    /usr/bin/python3 testdata/hfexport/gen.py

1. It has Go write ferry's export of two models into this directory:
   `FERRY_WRITE_HF_EXPORT=1 go test ./nn -run TestSaveHFMatchesPyTorch`
   writes gpt2/ and llama/, each a config.json and a model.safetensors, by
   nn.SaveHF, from the weights of testdata/hf/gpt2.safetensors (a GPT-2 of
   vocab 50, seq 16, 2 layers, 2 heads, embd 32) and
   testdata/llama/llama.safetensors (vocab 64, seq 16, 2 layers, 4 heads,
   2 key/value heads, embd 32, hidden 48).
2. It builds, from each config.json alone, a module of transformers'
   structure and names written here in plain PyTorch: GPT2LMHeadModel
   (Conv1D projections, whose weight is [in, out]; gelu_new; the head tied
   to transformer.wte as from_pretrained ties it) and LlamaForCausalLM
   (testdata/llama/gen.py's reference: rotate_half rotary embeddings,
   grouped-query attention, SwiGLU, RMSNorm). It loads model.safetensors
   into it by name with strict=True: every tensor must be there with its
   shape, nothing else, the tied lm_head.weight the only key the file may
   lack (save_pretrained writes a tied tensor once).
3. It writes io.safetensors: for each model, tokens [2, 16] (I32) drawn
   from a fixed seed and the module's logits [2, 16, vocab].

nn/export_hf_test.go then checks that ferry's export is still byte for
byte these files and that ferry's logits are PyTorch's within 1e-5.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "safetensors"))
import st  # noqa: E402


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


llama_ref = load_module("llama_ref", os.path.join(HERE, "..", "llama", "gen.py"))


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer whose weight is
    [in, out] (transposed relative to nn.Linear)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_dim, self.num_heads = c["n_embd"], c["n_head"]
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def split_heads(self, t):
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.embed_dim, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
        T = x.shape[1]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
        w = torch.where(causal, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = F.softmax(w, dim=-1)
        y = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        y = y.view(y.size()[:-2] + (self.embed_dim,))
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c.get("n_inner") or 4 * c["n_embd"]
        self.c_fc = Conv1D(inner, c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], inner)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=eps)
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=eps)
        self.mlp = GPT2MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])

    def forward(self, idx):
        pos = torch.arange(idx.shape[1]).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, c):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)

    def tie_weights(self):
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


def from_pretrained(directory):
    """Builds the model config.json names and loads model.safetensors into
    it by name, strictly (the tied head may be absent from the file)."""
    with open(os.path.join(directory, "config.json")) as f:
        c = json.load(f)
    if c["model_type"] == "gpt2":
        assert c["architectures"] == ["GPT2LMHeadModel"], c["architectures"]
        assert c["activation_function"] == "gelu_new" and c["tie_word_embeddings"] is True, c
        model = GPT2LMHeadModel(c)
    elif c["model_type"] == "llama":
        assert c["architectures"] == ["LlamaForCausalLM"], c["architectures"]
        assert c["hidden_act"] == "silu" and c["tie_word_embeddings"] is False and c["rope_scaling"] is None, c
        assert not c["attention_bias"] and not c["mlp_bias"], c
        assert c["head_dim"] * c["num_attention_heads"] == c["hidden_size"], c
        model = llama_ref.LlamaForCausalLM(dict(
            vocab=c["vocab_size"], seq=c["max_position_embeddings"], layers=c["num_hidden_layers"],
            heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"], embd=c["hidden_size"],
            hidden=c["intermediate_size"], rope_theta=float(c["rope_theta"]), norm_eps=float(c["rms_norm_eps"])))
    else:
        raise ValueError(c["model_type"])
    state, meta = st.read(os.path.join(directory, "model.safetensors"))
    assert meta.get("format") == "pt", meta
    for name, t in state.items():
        assert t.dtype == torch.float32, (name, t.dtype)
    tied = getattr(model, "_tied_weights_keys", [])
    result = model.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    assert set(result.missing_keys) <= set(tied), result.missing_keys
    if tied:
        model.tie_weights()
    return c, model.eval()


def main():
    env = dict(os.environ, FERRY_WRITE_HF_EXPORT="1")
    subprocess.run(["go", "test", "./nn", "-run", "^TestSaveHFMatchesPyTorch$", "-count=1"], cwd=ROOT, env=env, check=True)
    torch.set_grad_enabled(False)
    torch.set_num_threads(2)
    torch.manual_seed(37)
    out = {}
    for name in ["gpt2", "llama"]:
        c, model = from_pretrained(os.path.join(HERE, name))
        seq = c.get("n_positions") or c["max_position_embeddings"]
        tokens = torch.randint(0, c["vocab_size"], (2, seq))
        logits = model(tokens)
        out[name + ".tokens"] = tokens.to(torch.int32)
        out[name + ".logits"] = logits.contiguous()
        print(f"{name}: logits {tuple(logits.shape)}, |max| {logits.abs().max().item():.3f}")
    st.write(os.path.join(HERE, "io.safetensors"), out)


if __name__ == "__main__":
    main()
