#!/usr/bin/env bash
# GPU check for ferry's CUDA device, in two halves:
#
#   scripts/gpu-check.sh build   on any machine with Go: static binaries in ./out
#                                (CGO_ENABLED=0: ferry, cuda.test, nccl.test)
#   scripts/gpu-check.sh run     on the GPU machine (no Go needed), in one go:
#     probe         nvidia-smi, cuBLAS, `ferry doctor --json`
#     conformance   the device conformance suite on the GPU (FP32, then the
#                   matrix products in TF32), a training step against the CPU,
#                   bfloat16 (Convert bit for bit, products through cuBLAS's
#                   cublasGemmStridedBatchedEx against float64)
#     mlp-demo      ferry demo at the origin configuration (40 x 4096 x 1024):
#                   modes none and offload as text (a short limit; the
#                   summary's figures come from the next run), then every
#                   mode with --json (mlp-demo-json); and with parameters,
#                   gradients and optimizer state in host memory
#                   (mlp-state-host)
#     gpt-demo      ferry demo --model gpt, GPT-2 124M at batch 8 x 1024,
#                   every mode, --json (two runs, so a timeout loses half)
#     gpt-bf16      the same GPT in bfloat16 mixed precision (--precision
#                   bf16), modes none and offload, --json
#     torch-*       python3 bench/torch_gpu.py: PyTorch at both configurations
#                   in fp32, and the GPT under autocast bf16 (--precision
#                   bf16, modes none and offload) beside gpt-bf16
#     bandwidth     pinned host<->device copy bandwidth each way, launch cost
#     attention     ferry's attention kernels at GPT-2's shape (B 8, H 12,
#                   T 1024, D 64, causal, fp32), forward and with backward,
#                   beside PyTorch's scaled_dot_product_attention
#                   (bench/torch_attention.py: fp32 and bf16)
#     nccl          a single-rank NCCL clique through ferry's binding: every
#                   collective checked on the GPU, a 64 MiB all-reduce timed
#                   (libnccl from the loader, or PyTorch's nvidia wheel)
#     zero3         a one-rank ZeRO-3 step (dist.FullShard: gathers,
#                   reduce-scatters, the optimizer over shards) against the
#                   unsharded step, bit for bit, on the GPU, in fp32 and in
#                   bf16 (the weights gathered as bfloat16 copies), and
#                   offloaded (shards and AdamW state in host memory,
#                   stepped beside the device)
#   scripts/gpu-check.sh         both (build, then run)
#
# Outputs go to $OUT (default ./out/gpu-check): one file per step, steps.tsv
# (name, limit, seconds, verdict), and one summary, summary.txt and
# summary.json (scripts/gpu_check_summary.py). Binaries are taken from
# $GPU_CHECK_BIN (default ./out).
#
# Time: the whole run fits GPU_CHECK_BUDGET seconds (default 480). Each step
# has a time limit, a fixed share of the budget (the shares sum to the
# budget), enforced with timeout(1) including its kill grace; a failed or
# timed-out step does not stop the others. Where cuBLAS is missing, ferry's
# fallback matrix product is several times slower, so the demos time fewer
# steps. The exit status is non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

build() {
  mkdir -p out || return 1
  echo "== build (CGO_ENABLED=0)"
  CGO_ENABLED=0 go build -o ./out/ferry ./cmd/ferry || return 1
  CGO_ENABLED=0 go test -c -o ./out/cuda.test ./device/cuda || return 1
  CGO_ENABLED=0 go test -c -o ./out/nccl.test ./dist/nccl || return 1
  ls -la out/ferry out/cuda.test out/nccl.test
}

# Shares of a 480 s budget. They sum to 480: the limits always fit the
# budget, whatever the budget is.
declare -A SHARE=(
  [nvidia-smi]=5 [cublas]=10 [doctor]=15
  [conformance]=90
  [mlp-demo]=15 [mlp-demo-json]=40 [mlp-state-host]=10
  [gpt-demo-1]=45 [gpt-demo-2]=35 [gpt-bf16]=20
  [torch-mlp]=45 [torch-gpt]=50 [torch-gpt-bf16]=15
  [attention]=10 [torch-attention]=10
  [bandwidth]=25 [launch]=10 [nccl-library]=5 [nccl]=10 [zero3]=5
  [summary]=10
)

run() {
  local out="${OUT:-$PWD/out/gpu-check}" bin="${GPU_CHECK_BIN:-./out}"
  mkdir -p "$out"
  local budget="${GPU_CHECK_BUDGET:-480}" start=$SECONDS failed=0
  local steps="$out/steps.tsv"
  printf 'name\tlimit_s\tseconds\tverdict\n' >"$steps"

  # limit NAME: the step's share of the budget, in whole seconds (at least
  # 2; under a budget too small for that, the steps that come last find
  # the budget spent and are skipped).
  limit() {
    local l=$((budget * SHARE[$1] / 480))
    ((l < 2)) && l=2
    echo "$l"
  }
  # step NAME CMD...: runs CMD under its limit (kill grace included; never
  # past what is left of the budget), stdout to $out/NAME.txt and stderr
  # to $out/NAME.err, and records the verdict in steps.tsv.
  step() {
    local name=$1 lim
    shift
    lim=$(limit "$name")
    local left=$((budget - (SECONDS - start)))
    ((lim > left)) && lim=$left
    if ((lim < 2)); then
      printf '%s\t%d\t0\tskipped: budget spent\n' "$name" 0 >>"$steps"
      echo "== $name: skipped, the ${budget}s budget is spent"
      failed=1
      return
    fi
    local grace=$((lim >= 10 ? 2 : 1))
    local t0=$SECONDS
    timeout --kill-after="$grace" "$((lim - grace))" "$@" >"$out/$name.txt" 2>"$out/$name.err"
    local rc=$?
    local verdict=ok
    if ((rc == 124 || rc == 137)); then verdict="timed out"; elif ((rc != 0)); then verdict="failed (exit $rc)"; fi
    ((rc != 0)) && failed=1
    printf '%s\t%d\t%d\t%s\n' "$name" "$lim" "$((SECONDS - t0))" "$verdict" >>"$steps"
    echo "== $name: $verdict in $((SECONDS - t0))s (limit ${lim}s)"
  }

  [[ -x $bin/cuda.test && -x $bin/ferry ]] || { echo "no binaries in $bin: run '$0 build' first"; exit 2; }

  step nvidia-smi nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  # Not in a pipeline nor under step: find_cublas exports LD_LIBRARY_PATH
  # into this shell.
  find_cublas "$(limit cublas)" >"$out/cublas.txt"
  printf '%s\t%d\t%d\t%s\n' cublas "$(limit cublas)" 0 "$(head -1 "$out/cublas.txt")" >>"$steps"
  step doctor "$bin/ferry" doctor --json
  export FERRY_CUDA_REAL=1

  # Fewer timed steps where the matrix products run on ferry's fallback
  # kernel (no cuBLAS), so that every mode still fits its limit.
  local mlp_steps=3 gpt_steps=2
  if ! grep -q '"cublas_library": *"[^"]' "$out/doctor.txt" 2>/dev/null; then
    mlp_steps=1 gpt_steps=1
    echo "== no cuBLAS for ferry: the demos time $mlp_steps step per mode"
  fi

  step conformance "$bin/cuda.test" -test.run '^(TestProbeReal|TestRealGPUConformance|TestRealTraining|TestRealBFloat16)$' -test.v -test.timeout "$(($(limit conformance) * 9 / 10))s"
  local mlp=(--device cuda --layers 40 --width 4096 --batch 1024 --steps "$mlp_steps")
  step mlp-demo "$bin/ferry" demo "${mlp[@]}" --modes none,offload
  step mlp-demo-json "$bin/ferry" demo "${mlp[@]}" --json
  # The whole training state in host memory: parameters streamed, gradients
  # out as backward makes them, the optimizer on the host beside backward.
  step mlp-state-host "$bin/ferry" demo "${mlp[@]}" --modes none,offload --steps 2 --json \
    --optimizer-state host --gradients host --parameters host --optimizer-in-backward
  local gpt=(--device cuda --model gpt --layers 12 --heads 12 --embd 768 --seq 1024 --vocab 50257 --batch 8 --steps "$gpt_steps" --json)
  step gpt-demo-1 "$bin/ferry" demo "${gpt[@]}" --modes none,offload,recompute,recompute-offload
  step gpt-demo-2 "$bin/ferry" demo "${gpt[@]}" --modes none,save-on-host,offload-disk
  step gpt-bf16 "$bin/ferry" demo "${gpt[@]}" --modes none,offload --precision bf16
  step torch-mlp python3 bench/torch_gpu.py --layers 40 --width 4096 --batch 1024 --steps 3 \
    --modes none,naive,save_on_cpu,offload,recompute,recompute_offload --json "$out/torch-mlp.json"
  step torch-gpt python3 bench/torch_gpu.py --model gpt --layers 12 --heads 12 --embd 768 --seq 1024 --vocab 50257 --batch 8 --steps 2 \
    --modes none,save_on_cpu,offload,recompute,recompute_offload --json "$out/torch-gpt.json"
  step torch-gpt-bf16 python3 bench/torch_gpu.py --model gpt --layers 12 --heads 12 --embd 768 --seq 1024 --vocab 50257 --batch 8 --steps 2 \
    --modes none,offload --precision bf16 --json "$out/torch-gpt-bf16.json"
  step bandwidth "$bin/cuda.test" -test.run '^$' -test.bench 'BenchmarkRealCopy' -test.benchtime 20x -test.v
  step launch "$bin/cuda.test" -test.run '^$' -test.bench 'BenchmarkRealLaunch' -test.benchtime 20000x -test.v
  step attention "$bin/cuda.test" -test.run '^$' -test.bench 'BenchmarkRealAttention' -test.benchtime 10x -test.v
  step torch-attention python3 bench/torch_attention.py --json "$out/torch-attention.json"
  if [[ -x $bin/nccl.test ]]; then
    # Not under step: find_nccl exports FERRY_LIBNCCL into this shell.
    find_nccl "$(limit nccl-library)" >"$out/nccl-library.txt"
    step nccl "$bin/nccl.test" -test.run '^TestRealGPUSingleRank$' -test.v
    step zero3 "$bin/nccl.test" -test.run '^TestRealGPUFullShardOneRank$' -test.v
  else
    printf '%s\t%d\t0\tskipped: no %s\n' nccl 0 "$bin/nccl.test" >>"$steps"
  fi

  local lim
  lim=$(limit summary)
  if ! timeout --kill-after=1 "$((lim > 1 ? lim - 1 : 1))" python3 scripts/gpu_check_summary.py "$out" "$budget" "$((SECONDS - start))"; then
    # No python3: the verdicts alone.
    { echo "gpu-check: no summary (python3 failed); step verdicts:"; cat "$steps"; } >"$out/summary.txt"
    failed=1
  fi
  echo
  cat "$out/summary.txt"
  return $failed
}

# wheel_dirs LIMIT MODULE prints the directories where python3's MODULE
# (one of PyTorch's nvidia wheels) and torch keep their libraries, the
# query held to LIMIT seconds.
wheel_dirs() {
  timeout --kill-after=1 "$(($1 > 1 ? $1 - 1 : 1))" python3 - "$2" 2>/dev/null <<'PY'
import importlib, os, sys
for mod in (sys.argv[1], "torch"):
    try:
        m = importlib.import_module(mod)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        for sub in ("lib", ""):
            print(os.path.join(p, sub))
PY
}

# find_cublas LIMIT puts a libcublas on LD_LIBRARY_PATH when the dynamic
# loader cannot find one: the CUDA toolkit's, or the one in PyTorch's
# nvidia wheels (python3's query is held to LIMIT seconds).
find_cublas() {
  # Not grep -q: under pipefail, ldconfig killed by SIGPIPE when grep
  # stops early would fail the test.
  if ldconfig -p 2>/dev/null | grep -E 'libcublas\.so\.1[123]' >/dev/null; then
    echo "cuBLAS: registered with the dynamic loader"
    return
  fi
  local d
  for d in $(wheel_dirs "$1" nvidia.cublas) ${CONDA_PREFIX:+$CONDA_PREFIX/lib} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if ls "$d"/libcublas.so.1[123]* >/dev/null 2>&1; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cuBLAS: using $d"
      return
    fi
  done
  echo "cuBLAS: not found; matrix products will use ferry's fallback kernel"
}

# find_nccl LIMIT sets FERRY_LIBNCCL when the dynamic loader has no
# libnccl.so.2: the one in PyTorch's nvidia wheels, if there is one.
find_nccl() {
  if ldconfig -p 2>/dev/null | grep -E 'libnccl\.so\.2' >/dev/null; then
    echo "NCCL: registered with the dynamic loader"
    return
  fi
  local d
  for d in $(wheel_dirs "$1" nvidia.nccl) ${CONDA_PREFIX:+$CONDA_PREFIX/lib} /usr/local/cuda/lib64; do
    if [[ -e $d/libnccl.so.2 ]]; then
      export FERRY_LIBNCCL="$d/libnccl.so.2"
      echo "NCCL: using $d/libnccl.so.2"
      return
    fi
  done
  echo "NCCL: not found (the nccl step will say so)"
}

case "${1:-all}" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build|run|all]"; exit 2 ;;
esac
