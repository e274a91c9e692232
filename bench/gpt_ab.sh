#!/usr/bin/env bash
# Runs builds of bench/gptstep (and PyTorch) side by side on the baby GPT,
# alternating the order every round, and prints each run's median step
# time as wall/CPU seconds (CPU: every thread, user + system). Use it to
# compare two trees or two settings on a machine shared with other work,
# where wall times swing with the load and CPU times much less.
#
# Usage: bench/gpt_ab.sh rounds steps label:binary:backend[:VAR=v,VAR=v] ...
#   binary "pytorch" runs bench/gpt_step.py (with the malloc settings of
#   bench/gpt_step.sh); other binaries are built bench/gptstep programs.
# Example, AVX2 paths forced on an AVX-512 machine (docs/perf.md "AVX2"):
#   go build -o /tmp/before ./bench/gptstep   (in the old tree)
#   go build -o /tmp/after ./bench/gptstep
#   OPENBLAS_CORETYPE=Haswell bench/gpt_ab.sh 3 3 \
#     torch:pytorch::ATEN_CPU_CAPABILITY=avx2 \
#     before:/tmp/before:blas:FERRY_GEMM_KERNEL=avx2 after:/tmp/after:blas:FERRY_CPU=avx2
set -euo pipefail
cd "$(dirname "$0")/.."
R=$1; S=$2; shift 2
PY=${PYTHON:-/usr/bin/python3}
MALLOC="MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=1073741824"
echo "rounds $R, $S timed steps per run; nproc $(nproc); ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE}"
for ((r = 1; r <= R; r++)); do
  line="round $r load $(cut -d' ' -f1 /proc/loadavg):"
  specs=("$@")
  if ((r % 2 == 0)); then specs=($(printf '%s\n' "$@" | tac)); fi
  for c in "${specs[@]}"; do
    IFS=: read -r lab bin be envs <<<"$c"
    envs=${envs//,/ }
    if [[ $bin == pytorch ]]; then
      out=$(env $MALLOC $envs "$PY" bench/gpt_step.py 6 6 384 256 65 8 "$S" 3)
    else
      out=$(env $envs "$bin" -steps "$S" -backend "$be")
    fi
    line+=" $lab=$(awk '$1 == "median" {w = $2} $1 == "median_cpu" {c = $2} END {print w "/" c}' <<<"$out")"
  done
  echo "$line"
done
