#!/usr/bin/env bash
# Probes ferry's CLI as a hostile but fair user would and counts the outcomes:
# clear error / ok / wrong exit 0 / panic / hang / files left behind.
# Then kills runs midway (SIGKILL and SIGINT, KILLS times each) and checks
# that no file survives in the directories they used.
#
# Usage: scripts/abuse.sh [KILLS]     (default 30; CI runs a short version
# through cmd/ferry's tests, this script is the long one)
set -u
cd "$(dirname "$0")/.."
KILLS=${1:-30}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bin=$work/ferry
go build -o "$bin" ./cmd/ferry || exit 1
mkdir -p "$work/ro" && chmod 555 "$work/ro"
echo x > "$work/file"
echo '{"version":1,"default":"disk"}' > "$work/disk-policy.json"
echo '{"version":1,"default":"keep","layers":{"layers.99":"host"}}' > "$work/bad-policy.json"
echo 'not json' > "$work/garbage.json"
declare -A count
probe() { # expect(ok|err) args...
  local expect=$1; shift
  local d="$work/run"; rm -rf "$d"; mkdir -p "$d"
  (cd "$d" && timeout 120 "$bin" "$@" >"$work/out" 2>"$work/err"); local rc=$?
  local left; left=$(ls -A "$d" | grep -v '^ferry-plan.json$' | head -3)
  local what
  if grep -qE '^(panic:|fatal error:)|^goroutine [0-9]+ \[' "$work/err"; then what=panic
  elif [ $rc -eq 124 ]; then what=hang
  elif [ -n "$left" ] && [ "$expect" = err ]; then what=files-left
  elif [ $rc -eq 0 ] && [ "$expect" = err ]; then what=wrong-exit-0
  elif [ $rc -ne 0 ] && [ "$expect" = ok ]; then what=unexpected-error
  elif [ $rc -eq 0 ]; then what=ok
  else what=clear-error; fi
  count[$what]=$(( ${count[$what]:-0} + 1 ))
  printf '%-16s rc=%-3s ferry %s\n' "$what" "$rc" "$*"
  [ "$what" = clear-error ] && printf '%18s%s\n' '' "$(head -c 160 "$work/err" | head -1)"
}
M="--device meta --steps 1"
roexp=err; [ "$(id -u)" = 0 ] && roexp=ok   # root writes into read-only directories
probe err demo --device cpu --width 10000000
probe err demo --batch 10500000 --width 1024 --layers 1 --capacity 4GiB
probe err demo --batch 1000000 --width 1024 --layers 10
probe err demo $M --batch 9223372036854775807
probe err demo $M --layers 9223372036854775807
probe err demo $M --width 3037000500 --batch 3037000500
for v in 1e19 1e300GiB NaN Inf -Inf -1 -3GiB abc 3XB '' 0x10; do probe err plan --budget "$v"; done
probe err plan --budget 2.6GiB --out ""
probe err plan --budget 3GiB --host-budget NaN
probe err plan --budget 3GiB --layers 9000000000 --out ""
probe err plan --budget 3GiB --layers 100000 --out ""
G="plan --model gpt --budget 1GiB --out """
for f in layers embd heads seq vocab batch; do
  for v in 0 -3 abc 1.5 99999999999999999999 1000000000 4611686018427387904; do probe err $G --$f "$v"; done
done
probe err $G --heads 5
probe err $G --heads 7 --embd 64
probe err $G --dropout 1
probe err $G --dropout NaN
probe err $G --width 64
probe err plan --model gpt --budget 1KiB --layers 1 --embd 8 --heads 2 --seq 4 --vocab 8 --batch 1 --out ""
probe ok plan --model gpt --budget 1GiB --layers 2 --embd 32 --heads 2 --seq 16 --vocab 64 --batch 2 --out ""
for f in width batch layers steps max-in-flight lookahead; do
  for v in -5 0 abc 1.5 99999999999999999999; do probe err demo $M --$f "$v"; done
done
probe err demo $M --keep-last -5
for v in NaN -1 Inf 1e30; do probe err demo $M --min-bytes "$v"; done
for v in "cpu:0junk" "cpu:-1" "cuda:x" ":0" "tpu" "meta:1" "cpu: 0"; do probe err demo --device "$v" --steps 1; done
probe err demo $M --device-param foo=1
probe err demo --device-param copy_delay=abc --steps 1
probe err demo $M --modes fast
probe err demo $M --modes ""
for p in /dev/zero "$work/garbage.json" "$work/missing.json" "$work/bad-policy.json" "$work" ; do probe err demo $M --policy "$p"; done
probe err demo $M --modes offload --policy "$work/disk-policy.json"
for p in /dev/zero "$work/garbage.json" "$work/missing.json" "$work"; do probe err demo $M --profile "$p"; done
probe err demo $M --profile h200-pcie5 --device cpu
probe "$roexp" demo --device cpu --layers 2 --width 64 --batch 8 --steps 1 --modes offload-disk --disk-dir "$work/ro"
for d in "$work/missing" "$work/file"; do probe err demo --device cpu --layers 2 --width 64 --batch 8 --steps 1 --modes offload-disk --disk-dir "$d"; done
probe err demo $M --trace /dev/full/x
probe "$roexp" demo $M --cpuprofile "$work/ro/p.prof"
probe err calibrate --seconds NaN
probe err calibrate --seconds -1
probe err calibrate --width 0
probe err calibrate --disk-dir "$work/file" --seconds 0.05
probe err calibrate --save /dev/full --seconds 0.05 --width 64 --batch 8
probe err nonsense
probe ok demo $M
probe ok demo $M --json
probe ok demo --device cpu --layers 3 --width 64 --batch 8 --steps 1 --json
probe ok plan --budget 3GiB --out ""
probe ok doctor --json

# Kills midway.
kdir=$work/kill; mkdir -p "$kdir"
killed=0; left=0
for sig in KILL INT; do
  for i in $(seq "$KILLS"); do
    "$bin" demo --device cpu --modes offload-disk --layers 400 --width 128 --batch 4 --steps 3 --disk-dir "$kdir" >/dev/null 2>&1 &
    pid=$!
    sleep "0.$(( RANDOM % 9 + 1 ))"
    kill -s "$sig" "$pid" 2>/dev/null; sleep 0.05; kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true; killed=$((killed + 1))
    n=$(ls -A "$kdir" | wc -l); left=$((left + n)); rm -rf "${kdir:?}"/*
  done
done
for i in $(seq 5); do
  "$bin" calibrate --disk-dir "$kdir" --seconds 0.3 >/dev/null 2>&1 &
  pid=$!; sleep "0.$(( RANDOM % 9 + 1 ))"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  killed=$((killed + 1)); n=$(ls -A "$kdir" | wc -l); left=$((left + n)); rm -rf "${kdir:?}"/*
done
echo
echo "probes: clear-error ${count[clear-error]:-0} · ok ${count[ok]:-0} · wrong-exit-0 ${count[wrong-exit-0]:-0} · panic ${count[panic]:-0} · hang ${count[hang]:-0} · files-left ${count[files-left]:-0} · unexpected-error ${count[unexpected-error]:-0}"
echo "kills: $killed runs killed midway (demo offload-disk with SIGKILL and SIGINT, calibrate with SIGKILL); files left behind: $left"
bad=$(( ${count[wrong-exit-0]:-0} + ${count[panic]:-0} + ${count[hang]:-0} + ${count[files-left]:-0} + ${count[unexpected-error]:-0} + left ))
[ "$bad" -eq 0 ]
