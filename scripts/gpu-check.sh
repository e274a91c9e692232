#!/usr/bin/env bash
# GPU check for ferry's CUDA device, in two halves:
#
#   scripts/gpu-check.sh build   on any machine with Go: static binaries in ./out
#                                (CGO_ENABLED=0: ferry, cuda.test)
#   scripts/gpu-check.sh run     on the GPU machine (no Go needed), in one go:
#     0. probe: driver, cuBLAS, GPUs (as `ferry doctor` will show them)
#     a. op-by-op correctness of the CUDA device against the CPU device on
#        fresh random data (FP32 rel. error < 1e-4, TF32 < 1e-2), a training
#        step, an asynchronous side-stream copy
#     b. ferry demo at the origin configuration, text and --json
#     c. python3 bench/torch_gpu.py: PyTorch's numbers at the same configuration
#     d. pinned host<->device copy bandwidth each way, and kernel launch cost
#   scripts/gpu-check.sh         both (build, then run)
#
# Outputs go to $OUT if set (else ./out/gpu-check), one file per step plus
# summary.txt. Each step has a time limit and the whole run a budget of
# about 8 minutes (GPU_CHECK_BUDGET seconds); a failed step does not stop
# the others; the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

build() {
  mkdir -p out || return 1
  echo "== build (CGO_ENABLED=0)"
  CGO_ENABLED=0 go build -o ./out/ferry ./cmd/ferry || return 1
  CGO_ENABLED=0 go test -c -o ./out/cuda.test ./device/cuda || return 1
  ls -la out/ferry out/cuda.test
}

# find_cublas puts a libcublas on LD_LIBRARY_PATH when the dynamic loader
# cannot find one: the CUDA toolkit's, or the one in PyTorch's nvidia wheels.
find_cublas() {
  if ldconfig -p 2>/dev/null | grep -qE 'libcublas\.so\.1[123]'; then return; fi
  local d
  for d in $(python3 - 2>/dev/null <<'PY'
import importlib, os
for mod in ("nvidia.cublas", "torch"):
    try:
        m = importlib.import_module(mod)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        for sub in ("lib", ""):
            print(os.path.join(p, sub))
PY
  ) ${CONDA_PREFIX:+$CONDA_PREFIX/lib} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if ls "$d"/libcublas.so.1[123]* >/dev/null 2>&1; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cuBLAS: using $d"
      return
    fi
  done
  echo "cuBLAS: not found; matrix products will use ferry's fallback kernel"
}

run() {
  local out="${OUT:-$PWD/out/gpu-check}"
  mkdir -p "$out"
  local budget="${GPU_CHECK_BUDGET:-480}" start=$SECONDS failed=0
  local summary="$out/summary.txt"
  : >"$summary"
  # step NAME LIMIT CMD...: runs CMD with a time limit (never past the
  # budget), output to the terminal and $out/NAME.txt.
  step() {
    local name=$1 limit=$2
    shift 2
    local left=$((budget - (SECONDS - start)))
    if ((left < 10)); then
      echo "== $name: skipped, the ${budget}s budget is spent" | tee -a "$summary"
      failed=1
      return
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.txt"
    local rc=${PIPESTATUS[0]}
    local verdict=ok
    if ((rc == 124 || rc == 137)); then verdict="TIMED OUT"; elif ((rc != 0)); then verdict="FAILED (exit $rc)"; fi
    ((rc != 0)) && failed=1
    echo "== $name: $verdict in $((SECONDS - t0))s" | tee -a "$summary"
  }

  [[ -x out/cuda.test && -x out/ferry ]] || { echo "no binaries in ./out: run '$0 build' first"; exit 2; }
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true; } | tee "$out/nvidia-smi.txt"
  # Not in a pipeline: a pipeline runs find_cublas in a subshell, and the
  # LD_LIBRARY_PATH it exports would be lost.
  find_cublas >"$out/cublas.txt"
  tee -a "$summary" <"$out/cublas.txt"
  export FERRY_CUDA_REAL=1

  step 0-probe 60 ./out/cuda.test -test.run 'TestProbeReal' -test.v
  step a-correctness 200 ./out/cuda.test -test.run 'TestReal' -test.v -test.timeout 190s
  local demo=(--device cuda --layers 40 --width 4096 --batch 1024 --modes none,naive,save-on-host,offload,offload-disk --steps 3)
  step b-demo 120 ./out/ferry demo "${demo[@]}"
  step b-demo-json 120 bash -c 'set -o pipefail; ./out/ferry demo "$@" --json | tee "$0"' "$out/demo.json" "${demo[@]}"
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step c-torch 150 python3 bench/torch_gpu.py --layers 40 --width 4096 --batch 1024 --steps 3 --json "$out/torch.json"
  else
    echo "== c-torch: skipped, python3 cannot import torch with CUDA" | tee -a "$summary"
  fi
  step d-bandwidth 60 ./out/cuda.test -test.run '^$' -test.bench 'BenchmarkRealCopy' -test.benchtime 20x -test.v
  step d-launch 30 ./out/cuda.test -test.run '^$' -test.bench 'BenchmarkRealLaunch' -test.benchtime 20000x -test.v

  echo
  echo "== summary ($((SECONDS - start))s; outputs in $out)"
  cat "$summary"
  return $failed
}

case "${1:-all}" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build|run|all]"; exit 2 ;;
esac
