#!/usr/bin/env bash
# Times ferry's CPU training step of nanoGPT's "baby GPT" against PyTorch
# 1.13's, side by side: 6 layers, 6 heads, embedding 384, sequence 256,
# vocabulary 65, batch 8, dropout 0, tanh GELU; forward, cross-entropy,
# backward, AdamW (bench/gptstep for ferry, bench/gpt_step.py for PyTorch).
# Each round runs every contender once (a fresh process: warm-up steps, then
# STEPS timed steps, median kept), in an order that alternates from round to
# round, so that load from other processes falls on all of them alike. It
# prints each round's medians and ratios, then the median ratio over the
# rounds.
#
# Fair PyTorch: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both
# (set, they force OpenBLAS's AVX2 kernel, far slower than its AVX-512 one
# on this machine), and PyTorch runs with glibc's malloc thresholds raised
# (MALLOC_MMAP_THRESHOLD_ at glibc's 64-bit maximum of 32 MiB, a 4 GiB trim
# threshold, a 1 GiB top pad), which stops its per-step page faults.
#
# Usage: bench/gpt_step.sh [rounds [layers heads embd seq vocab batch [steps]]]
#        (defaults 5 rounds, 6 6 384 256 65 8, 5 steps)
# BACKENDS lists ferry's matrix-product backends to run (default "auto go":
# OpenBLAS when present, and the pure-Go kernel); a backend with the suffix
# -bf16 ("go-bf16") runs the forward in bfloat16 mixed precision. CONTENDERS=pytorch times
# PyTorch alone.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}; L=${2:-6}; H=${3:-6}; C=${4:-384}; T=${5:-256}; V=${6:-65}; B=${7:-8}; S=${8:-5}
BACKENDS=${BACKENDS:-auto go}
PY=${PYTHON:-/usr/bin/python3}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
MALLOC=(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=1073741824)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
contenders=(${CONTENDERS:-pytorch $BACKENDS})
ferry=()
for c in "${contenders[@]}"; do [[ $c == pytorch ]] || ferry+=("$c"); done
if ((${#ferry[@]})); then
  CGO_ENABLED=0 go build -o "$tmp/gptstep" ./bench/gptstep
  "$tmp/gptstep" -layers 1 -heads 2 -embd 8 -seq 4 -vocab 5 -batch 1 -steps 1 -warmup 0 | sed -n 1p
fi
median() { awk '$1 == "median" {print $2}'; }
echo "rounds $ROUNDS, GPT $L layers $H heads embd $C seq $T vocab $V, batch $B, $S timed steps per run; nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${contenders[@]}")
  if ((r % 2 == 0)); then order=($(printf '%s\n' "${contenders[@]}" | tac)); fi
  declare -A t=()
  for c in "${order[@]}"; do
    if [[ $c == pytorch ]]; then
      t[$c]=$(env "${MALLOC[@]}" "$PY" bench/gpt_step.py "$L" "$H" "$C" "$T" "$V" "$B" "$S" | tee -a "$tmp/log" | median)
    else
      t[$c]=$("$tmp/gptstep" -layers "$L" -heads "$H" -embd "$C" -seq "$T" -vocab "$V" -batch "$B" -steps "$S" -backend "${c%-bf16}" -precision "$([[ $c == *-bf16 ]] && echo bf16 || echo fp32)" | tee -a "$tmp/log" | median)
    fi
  done
  line="round $r: pytorch ${t[pytorch]:-} s"
  echo "pytorch ${t[pytorch]:-}" >>"$tmp/py"
  for c in "${ferry[@]}"; do
    ratio=$(awk -v a="${t[$c]}" -v b="${t[pytorch]:-0}" 'BEGIN {printf "%.3f", b ? a / b : 0}')
    line+="  ferry($c) ${t[$c]} s = ${ratio}x"
    echo "$c $ratio ${t[$c]} ${t[pytorch]:-0}" >>"$tmp/ratios"
  done
  echo "$line"
  unset t
done
med='function med(a, n,   i, j, x) { for (i = 1; i < n; i++) { x = a[i]; for (j = i - 1; j >= 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
  return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }'
awk "$med"' BEGIN {n = 0} {p[n++] = $2} END {printf "median over %d rounds: pytorch %.4f s\n", n, med(p, n)}' "$tmp/py"
for c in "${ferry[@]}"; do
  awk -v c="$c" "$med"' BEGIN {n = 0} $1 == c {r[n] = $2; f[n] = $3; p[n++] = $4}
    END {printf "median over %d rounds: ferry(%s) / pytorch = %.3f   (ferry %.4f s, pytorch %.4f s)\n", n, c, med(r, n), med(f, n), med(p, n)}' "$tmp/ratios"
done
