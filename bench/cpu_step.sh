#!/usr/bin/env bash
# Times ferry's CPU training step against PyTorch's on this machine, side by
# side: the origin model, L x (Linear(W, W) + ReLU) at batch B, MSE, SGD
# (bench/cpustep for ferry, bench/cpu_step.py for PyTorch 1.13 from Debian,
# which multiplies matrices with the same OpenBLAS). Each round runs every
# contender once (a fresh process: one warm-up step, then STEPS timed steps,
# median kept), in an order that alternates from round to round, so that
# load from other processes falls on all of them alike. It prints each
# round's medians and ratios, then the median ratio over the rounds.
#
# Usage: bench/cpu_step.sh [rounds [layers width batch [steps]]]
#        (defaults 5 rounds, 40 1024 256, 5 steps)
# BACKENDS lists ferry's matrix-product backends to run (default "auto go":
# OpenBLAS when present, and the pure-Go kernel as with FERRY_BLAS=off).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}; L=${2:-40}; W=${3:-1024}; B=${4:-256}; S=${5:-5}
BACKENDS=${BACKENDS:-auto go}
PY=${PYTHON:-/usr/bin/python3}
# PyTorch's steps swing on page faults unless glibc keeps its freed
# memory (bench/gpt_step.sh says more).
MALLOC=(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=1073741824)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -o "$tmp/cpustep" ./bench/cpustep
median() { awk '/^median/ {print $2}'; }
contenders=(pytorch $BACKENDS)
echo "rounds $ROUNDS, $L x Linear($W)+ReLU, batch $B, $S timed steps per run; nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/cpustep" -layers 1 -width 8 -batch 2 -steps 1 | sed -n 1p
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${contenders[@]}")
  if ((r % 2 == 0)); then order=($(printf '%s\n' "${contenders[@]}" | tac)); fi
  declare -A t=()
  for c in "${order[@]}"; do
    if [[ $c == pytorch ]]; then
      t[$c]=$(env "${MALLOC[@]}" "$PY" bench/cpu_step.py "$L" "$W" "$B" "$S" | median)
    else
      t[$c]=$("$tmp/cpustep" -layers "$L" -width "$W" -batch "$B" -steps "$S" -backend "$c" | median)
    fi
  done
  line="round $r: pytorch ${t[pytorch]} s"
  for c in $BACKENDS; do
    ratio=$(awk -v a="${t[$c]}" -v b="${t[pytorch]}" 'BEGIN {printf "%.3f", a / b}')
    line+="  ferry($c) ${t[$c]} s = ${ratio}x"
    echo "$c $ratio ${t[$c]} ${t[pytorch]}" >>"$tmp/ratios"
  done
  echo "$line"
  unset t
done
for c in $BACKENDS; do
  awk -v c="$c" 'BEGIN {n = 0} $1 == c {r[n] = $2; f[n] = $3; p[n++] = $4}
    function med(a, n,   i, j, x) { for (i = 1; i < n; i++) { x = a[i]; for (j = i - 1; j >= 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
    END {printf "median over %d rounds: ferry(%s) / pytorch = %.3f   (ferry %.4f s, pytorch %.4f s)\n", n, c, med(r, n), med(f, n), med(p, n)}' "$tmp/ratios"
done
