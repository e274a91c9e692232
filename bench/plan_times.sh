#!/usr/bin/env bash
# Planning time and the planner's own peak memory (max resident set) for
# every model docs/plan.md shows, in float32 and bfloat16: one line each,
# the slowest last. Usage: bash bench/plan_times.sh [ferry binary]
# (default: builds one). Needs GNU time (/usr/bin/time, Debian's "time").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/ferry
	go build -o "$bin" ./cmd/ferry
fi
[ -x /usr/bin/time ] || { echo "plan_times: needs /usr/bin/time (apt-get install -y time)" >&2; exit 1; }
xl="--model gpt --layers 48 --heads 25 --embd 1600 --seq 1024 --vocab 50257"
cases=(
	"--budget 3GiB"
	"--budget 1GiB"
	"--budget 512MiB"
	"--budget 3GiB --profile h100-pcie5"
	"--budget 512MiB --profile h100-pcie5"
	"--budget 100MiB"
	"--model gpt --batch 8 --profile h100-pcie5 --budget 4GiB"
	"--model gpt --batch 8 --profile h100-pcie5 --budget 6GiB"
	"--model gpt --batch 8 --profile h100-pcie5 --budget 10GiB"
	"$xl --batch 1 --budget 16GiB"
	"$xl --batch 4 --budget 24GiB"
	"$xl --batch 4 --budget 16GiB"
	"$xl --batch 4 --budget 8GiB"
	"--model llama --budget 2GiB"
	"--model llama --budget 4GiB"
	"--model llama --budget 2GiB --host-budget 40GiB"
	"--model llama --budget 2GiB --profile h100-pcie5"
)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for c in "${cases[@]}"; do
	for prec in fp32 bf16; do
		# shellcheck disable=SC2086
		/usr/bin/time -f '%e %M' -o "$out" "$bin" plan $c --precision $prec --json >"$out.json" 2>/dev/null || true
		# GNU time writes "Command exited with non-zero status N" first
		# for a refusal (exit 1): the figures are its last line.
		read -r secs kb < <(tail -n 1 "$out")
		# (the plan's own "fits", not the first in the file: a baseline's)
		fits=$(python3 -c 'import json,sys; print(str(json.load(open(sys.argv[1]))["fits"]).lower())' "$out.json" 2>/dev/null || true)
		printf '%-8s %-8d %-6s %s\n' "$secs" $((kb / 1024)) "${fits:-error}" "$c --precision $prec"
	done
done >"$out.lines"
printf '%-8s %-8s %-6s %s\n' seconds "RSS MB" fits "ferry plan ..."
sort -n -k1,1 "$out.lines"
echo "slowest: $(sort -n -k1,1 "$out.lines" | tail -n 1)"
echo "largest: $(sort -n -k2,2 "$out.lines" | tail -n 1)"
rm -f "$out.lines"
rm -f "$out.json"
