#!/usr/bin/env python3
"""Writes the one summary of scripts/gpu-check.sh run: summary.txt for
people and summary.json with the same figures, from the step files in OUT.

Usage: python3 scripts/gpu_check_summary.py OUT BUDGET_S ELAPSED_S

Figures: each step's verdict and limit; the GPU and its PCIe link; the
conformance suite's leaf tests passed, failed and skipped; pinned copy
bandwidth each way as a fraction of the link's peak; per configuration
(the origin MLP, GPT-2 124M, GPT-2 124M in bfloat16 mixed precision), each
mode's step time and its ratio to none, for ferry and PyTorch side by side,
the peaks, the bytes moved and the time the copies would take at the
measured pinned bandwidth; for bf16 also ferry against PyTorch autocast and
each against its own fp32 run, per mode. A missing or malformed file leaves
its section saying so; it never stops the summary.
"""
import json
import os
import re
import sys

MiB = 1 << 20
# PCIe per-lane rate per direction, GB/s, by generation.
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}


def read(out, name):
    try:
        with open(os.path.join(out, name), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_json(out, name):
    text = read(out, name)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        start = text.find("{")  # tolerate a line printed before the object
        try:
            return json.loads(text[start:]) if start >= 0 else None
        except ValueError:
            return None


def steps(out):
    rows = []
    for line in (read(out, "steps.tsv") or "").splitlines()[1:]:
        f = line.split("\t")
        if len(f) == 4:
            row = {"name": f[0], "limit_s": int(f[1]), "seconds": int(f[2]), "verdict": f[3]}
            if f[3].startswith(("failed", "timed out")):
                # Why: the step's first line of errors (a traceback's last),
                # else the last line of its output.
                err = [x.strip() for x in (read(out, f[0] + ".err") or "").splitlines() if x.strip()]
                txt = [x.strip() for x in (read(out, f[0] + ".txt") or "").splitlines() if x.strip()]
                why = (err[-1] if err[0].startswith("Traceback") else err[0]) if err else (txt[-1] if txt else "")
                if why:
                    row["why"] = why[:200]
            rows.append(row)
    return rows


def gpu(out):
    line = (read(out, "nvidia-smi.txt") or "").strip().splitlines()
    f = [x.strip() for x in line[0].split(",")] if line else []
    g = {"name": f[0] if f else None, "memory": f[1] if len(f) > 1 else None,
         "driver": f[2] if len(f) > 2 else None}
    try:
        gen, width = int(f[3]), int(f[4])
        g.update(pcie_gen=gen, pcie_width=width, pcie_gbps=LANE_GBPS.get(gen, 0) * width)
    except (IndexError, ValueError):
        pass
    return g


def conformance(out):
    text = read(out, "conformance.txt")
    if text is None:
        return None
    result = {}
    for m in re.finditer(r"^\s*--- (PASS|FAIL|SKIP): (\S+)", text, re.M):
        result[m.group(2)] = m.group(1)
    leaves = [n for n in result if not any(o.startswith(n + "/") for o in result)]
    c = {"passed": sum(result[n] == "PASS" for n in leaves), "failed": sum(result[n] == "FAIL" for n in leaves),
         "skipped": sum(result[n] == "SKIP" for n in leaves),
         "failed_tests": [n for n in leaves if result[n] == "FAIL"],
         "timed_out": "panic: test timed out" in text}
    skips = re.findall(r"^\s*\S+\.go:\d+: (no CUDA[^\n]*|a GPU is present[^\n]*)", text, re.M)
    if skips:
        c["skip_reason"] = skips[0]
    return c


def nccl(out):
    """The single-rank NCCL smoke test: verdict, library and the timed all-reduce."""
    text = read(out, "nccl.txt")
    if text is None:
        return None
    r = {"passed": bool(re.search(r"^--- PASS: TestRealGPUSingleRank", text, re.M)),
         "library": (read(out, "nccl-library.txt") or "").strip()}
    m = re.search(r"NCCL (\d+) from (\S+)", text)
    if m:
        r["version"], r["path"] = int(m.group(1)), m.group(2)
    m = re.search(r"all-reduce of 64 MiB on one rank: (\S+) per call, ([\d.]+) GB/s", text)
    if m:
        r["allreduce_64mib"], r["allreduce_gbps"] = m.group(1), float(m.group(2))
    m = re.search(r"^\s*real_test\.go:\d+: (.*)$", text, re.M)
    if not r["passed"] and m:
        r["why"] = m.group(1)[:200]
    return r


def zero3(out):
    """The one-rank ZeRO-3 step against the unsharded one: verdict and time."""
    text = read(out, "zero3.txt")
    if text is None:
        return None
    r = {"passed": bool(re.search(r"^--- PASS: TestRealGPUFullShardOneRank", text, re.M))}
    m = re.search(r"one ZeRO-3 step of a 2-layer MLP on .*?: (\S+) \(median of 3\)", text)
    if m:
        r["step"] = m.group(1)
    m = re.search(r"the same in bf16, the weights gathered as bfloat16 copies: (\S+) \(median of 3\)", text)
    if m:
        r["step_bf16"] = m.group(1)
    m = re.search(r"the same offloaded, the shards and AdamW's state in host memory, stepped beside the device: (\S+) \(median of 3\)", text)
    if m:
        r["step_offload"] = m.group(1)
    m = re.search(r"^\s*zero3_test\.go:\d+: (.*)$", text, re.M)
    if not r["passed"] and m:
        r["why"] = m.group(1)[:200]
    return r


def attention(out):
    """ferry's attention kernels and PyTorch's SDPA at the same shape: pass -> figures."""
    a = {}
    for m in re.finditer(r"^BenchmarkRealAttention/(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) tflops", read(out, "attention.txt") or "", re.M):
        a.setdefault(m.group(1), {})["ferry_ms"] = float(m.group(2)) / 1e6
        a[m.group(1)]["ferry_tflops"] = float(m.group(3))
    for r in (read_json(out, "torch-attention.json") or {}).get("runs", []):
        p = a.setdefault(r["pass"], {})
        p[f"torch_{r['dtype']}_ms"] = r["seconds"] * 1e3
        if r["dtype"] == "float32" and p.get("ferry_ms"):
            p["ferry_over_torch_float32"] = p["ferry_ms"] / (r["seconds"] * 1e3)
    return a


def bench(out, name):
    """name -> (ns/op, MB/s or None) from a Go benchmark's output."""
    r = {}
    for m in re.finditer(r"^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) MB/s)?", read(out, name) or "", re.M):
        r[m.group(1)] = (float(m.group(2)), float(m.group(3)) if m.group(3) else None)
    return r


def bandwidth(out, g):
    b = {}
    for k, (ns, mbs) in bench(out, "bandwidth.txt").items():
        if mbs:
            d = k.split("/")[-1]
            b[d + "_gbps"] = mbs / 1e3
            if g.get("pcie_gbps") and d in ("HtoD", "DtoH"):
                b[d + "_of_pcie_peak"] = mbs / 1e3 / g["pcie_gbps"]
    for k, (ns, _) in bench(out, "launch.txt").items():
        b["launch_us"] = ns / 1e3
    return b


def ferry_runs(docs):
    """Merges the runs of one or more ferry demo --json documents; each
    mode's ratio is to the none of its own run."""
    runs = {}
    for d in docs:
        if not d:
            continue
        none = next((r for r in d.get("runs", []) if r["mode"] == "none"), None)
        for r in d.get("runs", []):
            if r["mode"] in runs:
                continue
            r = dict(r)
            if none and none["step_seconds"]:
                r["x_none"] = r["step_seconds"] / none["step_seconds"]
            runs[r["mode"]] = r
    return runs


def torch_runs(d):
    runs = {}
    if not d:
        return runs
    none = next((r for r in d.get("runs", []) if r["mode"] == "none"), None)
    for r in d.get("runs", []):
        r = dict(r)
        if none and none["step_seconds"]:
            r["x_none"] = r["step_seconds"] / none["step_seconds"]
        runs[r["mode"]] = r
    return runs


def config(name, ferry_docs, torch_doc, bw, precision="fp32"):
    fr, tr = ferry_runs(ferry_docs), torch_runs(torch_doc)
    h2d, d2h = bw.get("HtoD_gbps"), bw.get("DtoH_gbps")
    for r in fr.values():
        if r.get("to_host_bytes") and h2d and d2h and r["step_seconds"]:
            t = r["to_host_bytes"] / 1e9 / d2h + r["to_host_bytes"] / 1e9 / h2d
            r["copy_seconds_at_pinned_peak"] = t
            r["copy_share_of_step"] = t / r["step_seconds"]
    ratios = {}
    for key, mode in (("ferry_offload", "offload"), ("ferry_save_on_host", "save-on-host"),
                      ("ferry_offload_disk", "offload-disk"), ("ferry_recompute", "recompute"),
                      ("ferry_recompute_offload", "recompute-offload")):
        if "x_none" in fr.get(mode, {}):
            ratios[key] = fr[mode]["x_none"]
    for key, mode in (("torch_save_on_cpu", "save_on_cpu"), ("torch_offload", "offload"),
                      ("torch_recompute", "recompute"), ("torch_recompute_offload", "recompute_offload")):
        if "x_none" in tr.get(mode, {}):
            ratios[key] = tr[mode]["x_none"]
    head = next((d for d in ferry_docs if d), None) or {}
    return {"name": name, "precision": precision, "ferry": fr, "torch": tr, "ratios_to_none": ratios,
            "matmul_backend": head.get("matmul_backend"), "description": head.get("description"),
            "torch_version": (torch_doc or {}).get("torch")}


def ratio(a, b):
    return a / b if a is not None and b else None


def bf16_pair(bf, fp, step_rows, ferry_step, torch_step, modes=("none", "offload")):
    """Per mode: ferry bf16 against PyTorch autocast bf16 (step time, step
    peak), and each against its own fp32 run where both exist. A side
    without figures says why (its step's verdict)."""
    verdict = {x["name"]: x["verdict"] for x in step_rows}

    def missing(step, mode, runs):
        if runs:
            return f"no mode {mode} in {step}'s output"
        return f"{step}: {verdict[step]}" if step in verdict else f"{step} did not run"

    out = {}
    for m in modes:
        r = {}
        for who, cfg_bf, cfg_fp, step in (("ferry", bf["ferry"], fp["ferry"], ferry_step),
                                          ("torch", bf["torch"], fp["torch"], torch_step)):
            b, f = cfg_bf.get(m), cfg_fp.get(m)
            if not b:
                r[who + "_missing"] = missing(step, m, cfg_bf)
                continue
            r[who + "_step_seconds"] = b.get("step_seconds")
            r[who + "_peak_step_bytes"] = b.get("peak_step_bytes")
            if f:
                r[who + "_step_bf16_over_fp32"] = ratio(b.get("step_seconds"), f.get("step_seconds"))
                r[who + "_peak_bf16_over_fp32"] = ratio(b.get("peak_step_bytes"), f.get("peak_step_bytes"))
        r["step_ferry_over_torch"] = ratio(r.get("ferry_step_seconds"), r.get("torch_step_seconds"))
        r["peak_ferry_over_torch"] = ratio(r.get("ferry_peak_step_bytes"), r.get("torch_peak_step_bytes"))
        out[m] = r
    return out


def skipped(out, name):
    """ (why) where a benchmark's -test.v output says why it skipped."""
    m = re.search(r"^\s*\S+\.go:\d+: (.*)$", read(out, name) or "", re.M)
    return f" ({m.group(1)})" if m else ""


def fmt(x, spec, none="—"):
    return none if x is None else format(x, spec)


def mib(b):
    return fmt(None if b is None else b / MiB, ".0f")


def ms(seconds):
    return fmt(None if seconds is None else seconds * 1e3, ".1f")


def text(s):
    L = []
    L.append(f"ferry gpu-check: {s['elapsed_s']} s of a {s['budget_s']} s budget; outputs in {s['out']}")
    g = s["gpu"]
    link = f", PCIe gen {g['pcie_gen']} x{g['pcie_width']} ({g['pcie_gbps']:.1f} GB/s each way)" if g.get("pcie_gbps") else ""
    L.append(f"GPU: {g.get('name') or 'unknown (nvidia-smi gave nothing)'}, {g.get('memory') or '?'}, driver {g.get('driver') or '?'}{link}")
    c = s.get("cuda") or {}
    L.append(f"CUDA: {'available' if c.get('available') else 'unavailable: ' + str(c.get('reason'))}; driver API {c.get('driver_version')}; "
             f"cuBLAS {c.get('cublas_version') or 'not found'}; {s.get('cublas') or ''}".rstrip("; "))
    L.append("")
    L.append(f"steps (limit s, took s, verdict); their limits sum to {sum(x['limit_s'] for x in s['steps'])} s, "
             "the summary's own limit is the rest of the budget")
    for x in s["steps"]:
        why = f": {x['why']}" if x.get("why") else ""
        L.append(f"  {x['name']:<15} {x['limit_s']:>4} {x['seconds']:>4}  {x['verdict']}{why}")
    L.append("")
    cf = s.get("conformance")
    if cf is None:
        L.append("conformance: no output")
    else:
        more = " (cut off by its time limit)" if cf["timed_out"] else ""
        L.append(f"conformance: {cf['passed']} passed, {cf['failed']} failed, {cf['skipped']} skipped{more}")
        if cf.get("skip_reason"):
            L.append(f"  skipped because: {cf['skip_reason']}")
        for n in cf["failed_tests"][:20]:
            L.append(f"  FAIL {n}")
    b = s["bandwidth"]
    parts = []
    for d in ("HtoD", "DtoH", "DtoD"):
        if d + "_gbps" in b:
            frac = f" ({b[d + '_of_pcie_peak']:.2f} of the link's peak)" if d + "_of_pcie_peak" in b else ""
            parts.append(f"{d} {b[d + '_gbps']:.1f} GB/s{frac}")
    L.append("pinned copies: " + (", ".join(parts) if parts else "no figures" + skipped(s["out"], "bandwidth.txt")))
    L.append("kernel launch: " + (f"{b['launch_us']:.2f} µs" if "launch_us" in b else "no figure" + skipped(s["out"], "launch.txt")))
    at = s.get("attention") or {}
    if not at:
        L.append("attention: no figures" + skipped(s["out"], "attention.txt"))
    for p in ("forward", "forward+backward"):
        r = at.get(p)
        if r:
            L.append(f"attention {p} (B 8, H 12, T 1024, D 64, causal): ferry fp32 {fmt(r.get('ferry_ms'), '.3f')} ms "
                     f"({fmt(r.get('ferry_tflops'), '.1f')} TFLOP/s); PyTorch SDPA fp32 {fmt(r.get('torch_float32_ms'), '.3f')} ms, "
                     f"bf16 {fmt(r.get('torch_bfloat16_ms'), '.3f')} ms; ferry/PyTorch fp32 {fmt(r.get('ferry_over_torch_float32'), '.2f')}")
    n = s.get("nccl")
    if n is None:
        L.append("nccl: not run")
    else:
        what = "passed" if n["passed"] else "FAILED" + (f": {n['why']}" if n.get("why") else "")
        fig = f"; 64 MiB all-reduce {n['allreduce_64mib']} ({n['allreduce_gbps']:.1f} GB/s, one rank)" if "allreduce_64mib" in n else ""
        L.append(f"nccl single rank: {what}; NCCL {n.get('version', '?')}{fig}")
    z = s.get("zero3")
    if z is None:
        L.append("zero3: not run")
    else:
        what = "bit for bit the unsharded step" if z["passed"] else "FAILED" + (f": {z['why']}" if z.get("why") else "")
        L.append(f"zero3 one rank: {what}" + (f"; step {z['step']}" if "step" in z else "")
                 + (f", bf16 gathers {z['step_bf16']}" if "step_bf16" in z else "")
                 + (f", offloaded {z['step_offload']}" if "step_offload" in z else ""))
    for cfg in s["configs"]:
        L.append("")
        L.append(f"== {cfg['name']}: {cfg.get('description') or ''}".rstrip(": "))
        amp = " (autocast bf16)" if cfg.get("precision") == "bf16" and cfg.get("torch_version") else ""
        L.append(f"   ferry matmul: {cfg.get('matmul_backend') or '?'}; PyTorch {cfg.get('torch_version') or 'not run'}{amp}")
        L.append(f"   {'ferry mode':<18} {'step ms':>8} {'x none':>7} {'fwd peak':>9} {'step peak':>10} {'reserved':>9} {'host peak':>10} "
                 f"{'to host':>8} {'to disk':>8} {'stall ms':>9} {'copy@peak':>10}")
        for m, r in cfg["ferry"].items():
            L.append(f"   {m:<18} {r['step_seconds'] * 1e3:>8.1f} {fmt(r.get('x_none'), '.3f'):>7} {mib(r.get('peak_forward_bytes')):>9} "
                     f"{mib(r.get('peak_step_bytes')):>10} {mib(r.get('reserved_peak_bytes')):>9} {mib(r.get('host_peak_bytes')):>10} "
                     f"{mib(r.get('to_host_bytes')):>8} {mib(r.get('to_disk_bytes')):>8} {fmt(r.get('stall_seconds', 0) * 1e3, '.1f'):>9} "
                     f"{fmt(r.get('copy_share_of_step'), '.2f'):>10}")
        if not cfg["ferry"]:
            L.append("   (no ferry figures)")
        else:
            L.append("   (MiB per step; x none: against the none of the same run; copy@peak: the share of the step "
                     "the copies to the host and back would take at the pinned bandwidth above)")
        L.append(f"   {'PyTorch mode':<18} {'step ms':>8} {'x none':>7} {'fwd peak':>9} {'step peak':>10} {'to host':>8}")
        for m, r in cfg["torch"].items():
            L.append(f"   {m:<18} {r['step_seconds'] * 1e3:>8.1f} {fmt(r.get('x_none'), '.3f'):>7} {mib(r.get('peak_forward_bytes')):>9} "
                     f"{mib(r.get('peak_step_bytes')):>10} {mib(r.get('offloaded_bytes')):>8}")
        if not cfg["torch"]:
            L.append("   (no PyTorch figures)")
        q = cfg["ratios_to_none"]
        L.append(f"   offload/none: ferry {fmt(q.get('ferry_offload'), '.3f')} vs PyTorch save_on_cpu/none {fmt(q.get('torch_save_on_cpu'), '.3f')}"
                 f" (PyTorch stream offload/none {fmt(q.get('torch_offload'), '.3f')})")
        if cfg.get("precision") != "bf16":
            L.append(f"   recompute-offload/none: ferry {fmt(q.get('ferry_recompute_offload'), '.3f')} vs PyTorch {fmt(q.get('torch_recompute_offload'), '.3f')}; "
                     f"recompute/none: ferry {fmt(q.get('ferry_recompute'), '.3f')} vs PyTorch {fmt(q.get('torch_recompute'), '.3f')}")
        for m, r in (cfg.get("bf16_pair") or {}).items():
            side = []
            for who, label in (("ferry", "ferry"), ("torch", "PyTorch autocast")):
                if who + "_missing" in r:
                    side.append(f"{label}: no figures ({r[who + '_missing']})")
                else:
                    side.append(f"{label} {ms(r.get(who + '_step_seconds'))} ms, step peak {mib(r.get(who + '_peak_step_bytes'))} MiB")
            L.append(f"   bf16 {m}: {'; '.join(side)}; ferry/PyTorch step {fmt(r.get('step_ferry_over_torch'), '.3f')}, "
                     f"peak {fmt(r.get('peak_ferry_over_torch'), '.3f')}")
            L.append(f"   bf16/fp32 {m}: ferry step {fmt(r.get('ferry_step_bf16_over_fp32'), '.3f')}, peak {fmt(r.get('ferry_peak_bf16_over_fp32'), '.3f')}; "
                     f"PyTorch step {fmt(r.get('torch_step_bf16_over_fp32'), '.3f')}, peak {fmt(r.get('torch_peak_bf16_over_fp32'), '.3f')}")
    return "\n".join(L) + "\n"


def main():
    out, budget, elapsed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    g = gpu(out)
    doctor = read_json(out, "doctor.txt") or {}
    bw = bandwidth(out, g)
    rows = steps(out)
    gpt = config("gpt-2 124M, batch 8 x 1024", [read_json(out, "gpt-demo-1.txt"), read_json(out, "gpt-demo-2.txt")],
                 read_json(out, "torch-gpt.json"), bw)
    gpt_bf16 = config("gpt-2 124M bf16, batch 8 x 1024", [read_json(out, "gpt-bf16.txt")],
                      read_json(out, "torch-gpt-bf16.json"), bw, precision="bf16")
    gpt_bf16["bf16_pair"] = bf16_pair(gpt_bf16, gpt, rows, "gpt-bf16", "torch-gpt-bf16")
    s = {"out": out, "budget_s": budget, "elapsed_s": elapsed, "steps": rows, "gpu": g,
         "cuda": doctor.get("cuda"), "cublas": (read(out, "cublas.txt") or "").strip(),
         "conformance": conformance(out), "bandwidth": bw, "nccl": nccl(out), "zero3": zero3(out), "attention": attention(out),
         "configs": [config("mlp 40 x 4096, batch 1024", [read_json(out, "mlp-demo-json.txt")], read_json(out, "torch-mlp.json"), bw),
                     gpt, gpt_bf16]}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
