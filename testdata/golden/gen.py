#!/usr/bin/python3
"""Golden data for ferry's numerics, computed by PyTorch (float32, CPU).

Run from the repository root with Debian's PyTorch:

    /usr/bin/python3 testdata/golden/gen.py

It writes testdata/golden/ops.json (one case per op and variant: inputs,
output, the upstream gradient G and the gradient of every differentiable
input, i.e. backward of (out * G).sum()) and testdata/golden/train.json
(small models trained a few steps with SGD and AdamW: initial parameters,
inputs, the loss at every step, the final parameters). golden_test.go reads
both. Seeds are fixed, so rerunning gives the same files on one machine;
PyTorch's own kernels may differ in the last bits across builds, which the
tests' tolerances absorb.

Every float in a data array is a float32 written as its shortest decimal
(numpy's repr of a float32), so it parses back, as a float32, to the same
value; hyper-parameters are Python floats (float64 repr).
"""

import json
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)  # deterministic reduction order in PyTorch itself
torch.use_deterministic_algorithms(True)

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = torch.Generator().manual_seed(20240601)


def randn(*shape, scale=1.0):
    return torch.randn(tuple(shape), generator=GEN, dtype=torch.float32) * scale


def rand(*shape, lo=0.0, hi=1.0):
    return lo + (hi - lo) * torch.rand(tuple(shape), generator=GEN, dtype=torch.float32)


class F32(list):
    """float32 values, written as their shortest float32 decimal."""


def enc(t):
    """A tensor as {shape, data} with data flat, row-major."""
    t = t.detach().contiguous()
    if t.dtype in (torch.int32, torch.int64):
        return {"shape": list(t.shape), "dtype": "int32", "data": [int(v) for v in t.reshape(-1).tolist()]}
    assert t.dtype == torch.float32, t.dtype
    return {"shape": list(t.shape), "data": F32(t.reshape(-1).numpy())}


def dumps(obj):
    """JSON with float32 arrays written compactly: numpy's repr of a float32
    is the shortest decimal that parses back (as float32) to the same value."""
    if isinstance(obj, F32):
        vals = []
        for v in obj:
            if np.isnan(v):
                vals.append('"nan"')  # JSON has no NaN or infinity
            elif np.isinf(v):
                vals.append('"inf"' if v > 0 else '"-inf"')
            else:
                vals.append(repr(np.float32(v)))
        return "[" + ",".join(vals) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + dumps(v) for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    if isinstance(obj, float):
        assert np.isfinite(obj)
        return repr(obj)
    return json.dumps(obj)


CASES = []


def case(name, op, inputs, attrs=None, views=None):
    """Records one case of OPS[op].

    inputs: leaf tensors; float32 ones get gradients, int32 ones (class
    targets) none. views: per input, None or a pair (a, b): the op sees the
    leaf transposed on axes a and b, a view, as the Go test does with
    Tensor.Transpose; the gradient is the leaf's. The upstream gradient G is
    random, so that backward of (out * G).sum() tests more than ones.
    """
    attrs = attrs or {}
    views = views or [None] * len(inputs)
    leaves = [t.detach().clone().requires_grad_(t.dtype == torch.float32) for t in inputs]
    args = [leaf if v is None else leaf.transpose(*v) for leaf, v in zip(leaves, views)]
    out = OPS[op](args, attrs)
    G = randn(*out.shape)
    (out * G).sum().backward()
    CASES.append({
        "name": name, "op": op, "attrs": attrs,
        "inputs": [dict(enc(t), grad=l.requires_grad, view=list(v) if v else None)
                   for t, l, v in zip(inputs, leaves, views)],
        "out": enc(out),
        "G": enc(G),
        "grads": [enc(l.grad) if l.requires_grad else None for l in leaves],
    })


def inplace(name, op, dst, src, attrs=None):
    """An in-place op: no gradient, only the value of dst afterwards."""
    d = dst.clone()
    a = attrs or {}
    if op == "add_":
        d.add_(src)
    elif op == "sub_":
        d.sub_(src)
    elif op == "mul_":
        d.mul_(src)
    elif op == "scale_":
        d.mul_(a["alpha"])
    elif op == "fill_":
        d.fill_(a["value"])
    elif op == "copy_":  # from a transposed view of src
        d.copy_(src.t())
    ins = [dict(enc(dst), grad=False, view=None)]
    if src is not None:
        ins.append(dict(enc(src), grad=False, view=None))
    CASES.append({"name": name, "op": op, "attrs": a, "inputs": ins, "out": enc(d)})


def _reduce(fn):
    """sum or mean over attrs["axes"] (all when empty), keepdim or not."""
    def run(args, a):
        x = args[0]
        axes = tuple(a["axes"]) or tuple(range(x.dim()))
        return fn(x, dim=axes, keepdim=a["keepdim"])
    return run


OPS = {
    "matmul": lambda x, a: torch.matmul(x[0], x[1]),
    "linear": lambda x, a: F.linear(x[0], x[1], x[2] if len(x) > 2 else None),
    "add": lambda x, a: x[0] + x[1],
    "sub": lambda x, a: x[0] - x[1],
    "mul": lambda x, a: x[0] * x[1],
    "div": lambda x, a: x[0] / x[1],
    "scale": lambda x, a: x[0] * a["alpha"],
    "neg": lambda x, a: -x[0],
    "add_scalar": lambda x, a: x[0] + a["c"],
    "exp": lambda x, a: torch.exp(x[0]),
    "log": lambda x, a: torch.log(x[0]),
    "sqrt": lambda x, a: torch.sqrt(x[0]),
    "square": lambda x, a: torch.square(x[0]),
    "relu": lambda x, a: F.relu(x[0]),
    "gelu": lambda x, a: F.gelu(x[0]),
    "gelu_tanh": lambda x, a: F.gelu(x[0], approximate="tanh"),
    "tanh": lambda x, a: torch.tanh(x[0]),
    "sigmoid": lambda x, a: torch.sigmoid(x[0]),
    "sum": _reduce(torch.sum),
    "mean": _reduce(torch.mean),
    "reshape": lambda x, a: x[0].reshape(a["shape"]),
    "transpose": lambda x, a: x[0].transpose(a["a"], a["b"]),
    "contiguous": lambda x, a: x[0].contiguous(),
    "clone": lambda x, a: x[0].clone(),
    "to_host": lambda x, a: x[0].to("cpu"),  # ferry: to the host device and back
    "softmax": lambda x, a: F.softmax(x[0], dim=-1),
    "log_softmax": lambda x, a: F.log_softmax(x[0], dim=-1),
    "mse_loss": lambda x, a: F.mse_loss(x[0], x[1]),
    "cross_entropy": lambda x, a: F.cross_entropy(x[0], x[1].long()),
    "nll_loss": lambda x, a: F.nll_loss(x[0], x[1].long()),
    # Compositions that send a non-contiguous gradient into an op's backward.
    "sum_T_mul": lambda x, a: x[0].sum(dim=0).t() * x[1],  # Sum's backward sees a transposed gradient
    "reshape_T": lambda x, a: x[0].t().reshape(a["shape"]) * x[1],  # Reshape of a view copies
    "linear_T_out": lambda x, a: F.linear(x[0], x[1], x[2]).t() * x[3],  # Linear's gradient transposed
    "softmax_T": lambda x, a: F.softmax(x[0], dim=-1).t() * x[1],
    # One tensor used twice: its gradient is the sum of both uses.
    "mul_self": lambda x, a: x[0] * x[0],
    "add_self_T": lambda x, a: x[0] + x[0].t(),
    "matmul_self_T": lambda x, a: torch.matmul(x[0], x[0].t()),
}


def gen_ops():
    # --- matmul: 2-D, batched, broadcast batch, transposed operands, odd sizes.
    for m, k, n in [(7, 33, 1), (1, 7, 33), (33, 7, 7), (1, 1, 1), (5, 33, 7)]:
        for ta in (False, True):
            for tb in (False, True):
                a = randn(k, m) if ta else randn(m, k)
                b = randn(n, k) if tb else randn(k, n)
                case(f"matmul/2d_{m}x{k}x{n}_ta{int(ta)}_tb{int(tb)}", "matmul", [a, b],
                     views=[(0, 1) if ta else None, (0, 1) if tb else None])
    for ta in (False, True):
        for tb in (False, True):
            a = randn(3, 33, 7) if ta else randn(3, 7, 33)
            b = randn(3, 5, 33) if tb else randn(3, 33, 5)
            case(f"matmul/batched_3x7x33x5_ta{int(ta)}_tb{int(tb)}", "matmul", [a, b],
                 views=[(1, 2) if ta else None, (1, 2) if tb else None])
    for tb in (False, True):  # 3-D @ 2-D: one B for the whole batch
        for ta in (False, True):
            a = randn(4, 33, 7) if ta else randn(4, 7, 33)
            b = randn(5, 33) if tb else randn(33, 5)
            case(f"matmul/bcast_3d_2d_ta{int(ta)}_tb{int(tb)}", "matmul", [a, b],
                 views=[(1, 2) if ta else None, (0, 1) if tb else None])
    for ta in (False, True):  # 2-D @ 3-D
        for tb in (False, True):
            a = randn(33, 7) if ta else randn(7, 33)
            b = randn(3, 5, 33) if tb else randn(3, 33, 5)
            case(f"matmul/bcast_2d_3d_ta{int(ta)}_tb{int(tb)}", "matmul", [a, b],
                 views=[(0, 1) if ta else None, (1, 2) if tb else None])
    case("matmul/bcast_4d_3d", "matmul", [randn(2, 1, 7, 3), randn(3, 3, 5)])
    case("matmul/bcast_size1_batch", "matmul", [randn(1, 4, 6), randn(3, 6, 2)])
    case("matmul/batch_transposed_0_1", "matmul", [randn(7, 3, 5), randn(3, 5, 4)], views=[(0, 1), None])
    # Batch axes that do not flatten to one stride: one product per matrix.
    case("matmul/batch_axes_swapped_4d", "matmul", [randn(3, 2, 4, 5), randn(2, 3, 5, 6)], views=[(0, 1), None])
    # Matrix axes with no unit stride: the operand is copied first.
    case("matmul/operand_not_gemm_layout", "matmul", [randn(5, 4, 2), randn(2, 5, 3)], views=[(0, 2), None])

    # --- linear
    for shape in [(5, 8), (2, 3, 8), (1, 8)]:
        for bias in (True, False):
            ins = [randn(*shape), randn(6, 8) * 0.3] + ([randn(6)] if bias else [])
            case(f"linear/{'x'.join(map(str, shape))}_bias{int(bias)}", "linear", ins)
    case("linear/1d_input", "linear", [randn(8), randn(6, 8), randn(6)])
    case("linear/x_transposed", "linear", [randn(8, 5), randn(6, 8), randn(6)], views=[(0, 1), None, None])
    case("linear/x3d_transposed", "linear", [randn(2, 8, 3), randn(6, 8), randn(6)], views=[(1, 2), None, None])
    case("linear/T_out", "linear_T_out", [randn(5, 8), randn(6, 8), randn(6), randn(6, 5)])

    # --- broadcasting binary ops
    shapes = [
        ("same", (4, 5), (4, 5)),
        ("row", (4, 5), (5,)),
        ("row2d", (4, 5), (1, 5)),
        ("col", (4, 5), (4, 1)),
        ("scalar1", (4, 5), (1,)),
        ("lead", (3, 4, 5), (4, 5)),
        ("lead_rev", (4, 5), (3, 4, 5)),
        ("both", (3, 1, 5), (4, 1)),
    ]
    for op in ("add", "sub", "mul", "div"):
        for tag, sa, sb in shapes:
            a = randn(*sa)
            b = randn(*sb)
            if op == "div":  # keep |b| away from 0: the gradient is a/b²
                b = torch.sign(b) * (0.5 + b.abs())
            case(f"{op}/{tag}", op, [a, b])
        case(f"{op}/transposed_view", op, [randn(5, 4), rand(4, 5, lo=0.5, hi=2.0)], views=[(0, 1), None])

    # --- unary
    x = randn(3, 7)
    case("scale", "scale", [x], attrs={"alpha": -1.75})
    case("neg", "neg", [randn(3, 7)])
    case("add_scalar", "add_scalar", [randn(3, 7)], attrs={"c": 2.5})
    case("exp", "exp", [randn(3, 7, scale=2.0)])
    case("log", "log", [rand(3, 7, lo=0.05, hi=20.0)])
    case("sqrt", "sqrt", [rand(3, 7, lo=0.05, hi=20.0)])
    case("square", "square", [randn(3, 7)])
    case("exp/transposed_view", "exp", [randn(7, 3)], views=[(0, 1)])
    for op in ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid"):
        case(op, op, [randn(4, 9, scale=2.5)])
        case(f"{op}/transposed_view", op, [randn(9, 4, scale=2.5)], views=[(0, 1)])
    # Non-finite values propagate as in PyTorch (NaN through ReLU too).
    special = torch.tensor([float("nan"), float("-inf"), float("inf"), -100.0, -1.0, -0.0, 0.0, 0.5, 100.0])
    for op in ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "exp", "square", "neg"):
        case(f"{op}/nonfinite", op, [special.clone()])
    case("gelu/wide_range", "gelu", [torch.linspace(-12, 12, 49)])
    case("gelu_tanh/wide_range", "gelu_tanh", [torch.linspace(-12, 12, 49)])
    case("sigmoid/wide_range", "sigmoid", [torch.linspace(-30, 30, 49)])
    case("tanh/wide_range", "tanh", [torch.linspace(-12, 12, 49)])

    # --- reductions
    x3 = randn(3, 4, 5)
    for op in ("sum", "mean"):
        for axes in ([], [0], [1], [2], [-1], [0, 2], [0, 1], [1, 2], [0, 1, 2]):
            for keep in (False, True):
                case(f"{op}/axes{''.join(map(str, axes)) or '_all'}_keep{int(keep)}", op, [x3.clone()],
                     attrs={"axes": axes, "keepdim": keep})
        case(f"{op}/transposed_view_axis1", op, [randn(5, 6)], attrs={"axes": [1], "keepdim": False}, views=[(0, 1)])
        case(f"{op}/transposed3d_axes02", op, [randn(3, 4, 5)], attrs={"axes": [0, 2], "keepdim": True}, views=[(0, 2)])
    case("sum/4d_axes13", "sum", [randn(2, 3, 4, 5)], attrs={"axes": [1, 3], "keepdim": False})
    case("mean/4d_axes02_keep", "mean", [randn(2, 3, 4, 5)], attrs={"axes": [0, 2], "keepdim": True})
    case("sum/long_rows", "sum", [randn(3, 4099)], attrs={"axes": [1], "keepdim": False})
    case("mean/long_all", "mean", [randn(16387)], attrs={"axes": [], "keepdim": False})
    case("sum/T_mul", "sum_T_mul", [randn(3, 4, 5), randn(5, 4)])
    case("mul/self", "mul_self", [randn(3, 5)])
    case("add/self_T", "add_self_T", [randn(4, 4)])
    case("matmul/self_T", "matmul_self_T", [randn(5, 7)])

    # --- shape
    case("reshape/contiguous", "reshape", [randn(3, 4, 5)], attrs={"shape": [4, 15]})
    case("reshape/infer", "reshape", [randn(3, 4, 5)], attrs={"shape": [-1, 5, 2]})
    case("reshape/of_transposed", "reshape_T", [randn(4, 6), randn(3, 8)], attrs={"shape": [3, 8]})
    case("transpose/01", "transpose", [randn(3, 4, 5)], attrs={"a": 0, "b": 1})
    case("transpose/02", "transpose", [randn(3, 4, 5)], attrs={"a": 0, "b": 2})
    case("transpose/neg", "transpose", [randn(3, 4, 5)], attrs={"a": -1, "b": -2})
    case("contiguous/of_transposed", "contiguous", [randn(4, 6)], views=[(0, 1)])
    case("contiguous/already", "contiguous", [randn(4, 6)])
    case("clone/of_transposed", "clone", [randn(4, 6)], views=[(0, 1)])
    case("to/host_and_back", "to_host", [randn(4, 6)], views=[(0, 1)])

    # --- softmax
    for op in ("softmax", "log_softmax"):
        case(f"{op}/small", op, [randn(4, 7)])
        case(f"{op}/3d", op, [randn(2, 3, 5)])
        case(f"{op}/large_magnitude", op, [randn(4, 9, scale=1000.0)])
        big = randn(3, 6) + torch.tensor([[1e4], [-1e4], [5e3]])  # huge offsets per row
        case(f"{op}/large_offset", op, [big])
        case(f"{op}/equal_row", op, [torch.full((2, 5), 88.5)])
        case(f"{op}/transposed_view", op, [randn(7, 4)], views=[(0, 1)])
        case(f"{op}/one_class", op, [randn(3, 1)])
        masked = randn(3, 5)
        masked[0, 1] = masked[1, 0] = masked[1, 4] = masked[2, 2] = float("-inf")  # attention-style masks
        case(f"{op}/masked_-inf", op, [masked])
    case("softmax/T_grad", "softmax_T", [randn(4, 7), randn(7, 4)])

    # --- losses
    case("mse_loss/2d", "mse_loss", [randn(5, 4), randn(5, 4)])
    case("mse_loss/3d", "mse_loss", [randn(2, 3, 4), randn(2, 3, 4)])
    case("mse_loss/transposed_view", "mse_loss", [randn(4, 5), randn(5, 4)], views=[(0, 1), None])
    tgt = torch.tensor([3, 0, 6, -100, 2, 6], dtype=torch.int32)
    case("cross_entropy/ignore", "cross_entropy", [randn(6, 7), tgt])
    case("cross_entropy/plain", "cross_entropy", [randn(5, 3), torch.tensor([0, 2, 1, 1, 0], dtype=torch.int32)])
    case("cross_entropy/large", "cross_entropy",
         [randn(4, 6, scale=500.0), torch.tensor([5, 0, -100, 3], dtype=torch.int32)])
    case("cross_entropy/transposed_view", "cross_entropy",
         [randn(7, 6), torch.tensor([3, 0, 6, 1, -100, 2], dtype=torch.int32)], views=[(0, 1), None])
    masked = randn(4, 5)
    masked[0, 1] = masked[2, 0] = masked[2, 4] = float("-inf")
    case("cross_entropy/masked_-inf", "cross_entropy", [masked, torch.tensor([2, 3, 1, -100], dtype=torch.int32)])
    logp = F.log_softmax(randn(6, 7), dim=-1)
    case("nll_loss/ignore", "nll_loss", [logp, tgt])
    case("nll_loss/raw_values", "nll_loss", [randn(4, 3), torch.tensor([2, -100, 0, 0], dtype=torch.int32)])

    # --- in-place ops (values only)
    inplace("add_/row", "add_", randn(4, 5), randn(5))
    inplace("add_/same", "add_", randn(4, 5), randn(4, 5))
    inplace("sub_/col", "sub_", randn(4, 5), randn(4, 1))
    inplace("mul_/lead", "mul_", randn(3, 4, 5), randn(4, 5))
    inplace("scale_", "scale_", randn(4, 5), None, {"alpha": 0.37})
    inplace("fill_", "fill_", randn(4, 5), None, {"value": -2.25})
    inplace("copy_/transposed_src", "copy_", randn(4, 5), randn(5, 4))


# ---------------------------------------------------------------- training

def mlp_params(sizes):
    """Linear layers initialised as nn.Linear does (fixed seed)."""
    layers = []
    for fan_in, fan_out in sizes:
        bound = 1 / fan_in ** 0.5
        w = rand(fan_out, fan_in, lo=-bound, hi=bound)
        b = rand(fan_out, lo=-bound, hi=bound)
        layers.append((w, b))
    return layers


def run(name, sizes, acts, init, xs, ys, loss_fn, make_opt, spec):
    params = []
    for w, b in init:
        params += [w.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    opt = make_opt(params)
    losses, grads0 = [], None
    for step in range(len(xs)):
        opt.zero_grad(set_to_none=True)
        h = xs[step]
        for i in range(len(sizes)):
            h = F.linear(h, params[2 * i], params[2 * i + 1])
            if i < len(acts):
                h = {"relu": F.relu, "gelu": F.gelu, "tanh": torch.tanh}[acts[i]](h)
        loss = loss_fn(h, ys[step])
        loss.backward()
        if step == 0:
            grads0 = [enc(p.grad) for p in params]
        losses.append(float(loss))
        opt.step()
    return dict(spec, name=name, losses=losses, grads0=grads0, final=[enc(p) for p in params])


def gen_train():
    out = []
    # MLP: Linear(8,16) ReLU Linear(16,16) GELU Linear(16,4), batch 5, MSE.
    sizes, acts, steps = [(8, 16), (16, 16), (16, 4)], ["relu", "gelu"], 5
    init = mlp_params(sizes)
    xs = [randn(5, 8) for _ in range(steps)]
    ys = [randn(5, 4) for _ in range(steps)]
    base = {"sizes": sizes, "acts": acts, "loss": "mse",
            "init": [[enc(w), enc(b)] for w, b in init],
            "x": [enc(x) for x in xs], "y": [enc(y) for y in ys]}
    runs = []
    for nesterov in (False, True):
        spec = {"optim": "sgd", "lr": 0.05, "momentum": 0.9, "dampening": 0.0, "weight_decay": 1e-2,
                "nesterov": nesterov}
        runs.append(run(f"sgd_momentum_nesterov{int(nesterov)}", sizes, acts, init, xs, ys, F.mse_loss,
                        lambda ps, s=spec: torch.optim.SGD(ps, lr=s["lr"], momentum=s["momentum"],
                                                           dampening=s["dampening"],
                                                           weight_decay=s["weight_decay"],
                                                           nesterov=s["nesterov"]), spec))
    spec = {"optim": "adamw", "lr": 1e-2, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    runs.append(run("adamw", sizes, acts, init, xs, ys, F.mse_loss,
                    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01), spec))
    base["runs"] = runs
    out.append(dict(base, name="mlp"))

    # Classifier: Linear(6,12) Tanh Linear(12,5), batch 7 (one ignored row), cross-entropy.
    sizes, acts, steps = [(6, 12), (12, 5)], ["tanh"], 4
    init = mlp_params(sizes)
    xs = [randn(7, 6) for _ in range(steps)]
    ys = [torch.randint(0, 5, (7,), generator=GEN, dtype=torch.int32) for _ in range(steps)]
    for y in ys:
        y[3] = -100
    ce = lambda h, y: F.cross_entropy(h, y.long())
    base = {"sizes": sizes, "acts": acts, "loss": "cross_entropy",
            "init": [[enc(w), enc(b)] for w, b in init],
            "x": [enc(x) for x in xs], "y": [enc(y) for y in ys]}
    spec = {"optim": "sgd", "lr": 0.5, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.0, "nesterov": False}
    runs = [run("sgd_dampening", sizes, acts, init, xs, ys, ce,
                lambda ps: torch.optim.SGD(ps, lr=0.5, momentum=0.9, dampening=0.1), spec)]
    spec = {"optim": "sgd", "lr": 0.3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}
    runs.append(run("sgd_plain", sizes, acts, init, xs, ys, ce, lambda ps: torch.optim.SGD(ps, lr=0.3), spec))
    spec = {"optim": "adamw", "lr": 3e-2, "weight_decay": 0.1, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}
    runs.append(run("adamw_custom", sizes, acts, init, xs, ys, ce,
                    lambda ps: torch.optim.AdamW(ps, lr=3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
                    spec))
    base["runs"] = runs
    out.append(dict(base, name="classifier"))
    return out


def write(name, obj):
    path = os.path.join(HERE, name)
    with open(path, "w") as f:
        f.write(dumps(obj) + "\n")
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    gen_ops()
    write("ops.json", {"generator": "testdata/golden/gen.py", "torch": torch.__version__, "cases": CASES})
    write("train.json", {"generator": "testdata/golden/gen.py", "torch": torch.__version__, "models": gen_train()})
