#!/usr/bin/env bash
# Plan quality (issue 36's must-show): for each model, profile and budget
# (100, 60, 35 and 15 % of the model's unlimited peak), the predicted step
# over its busiest resource (step_over_bound), the planning time, and
# whether ferry demo's replay of the written policy on the meta device
# peaks at the predicted bytes (replay: exact, or the two peaks); also the
# predicted step, the copies in flight and lookahead the plan chose, and
# how many parameters keep their optimizer state on the device (kept).
# One line each; a ratio above 1.15 is marked; visit is how many
# parameters' state visits the device to step (optim.StateVisits).
# ONLY, a bash regular expression, keeps the models whose names match.
# Usage:
#   [ONLY='GPT-2 124M'] bash bench/plan_quality.sh [ferry binary]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/ferry
	go build -o "$bin" ./cmd/ferry
fi
gpt="--model gpt --seq 1024 --vocab 50257"
models=(
	"origin|"
	"GPT-2 124M b1|$gpt --layers 12 --heads 12 --embd 768 --batch 1"
	"GPT-2 124M b4|$gpt --layers 12 --heads 12 --embd 768 --batch 4"
	"GPT-2 355M b1|$gpt --layers 24 --heads 16 --embd 1024 --batch 1"
	"GPT-2 355M b4|$gpt --layers 24 --heads 16 --embd 1024 --batch 4"
	"GPT-2 XL b1|$gpt --layers 48 --heads 25 --embd 1600 --batch 1"
	"GPT-2 XL b4|$gpt --layers 48 --heads 25 --embd 1600 --batch 4"
	"TinyLlama b2|--model llama --batch 2"
	"Llama-2-7B b1 bf16|--model llama --layers 32 --heads 32 --kv-heads 32 --embd 4096 --hidden 11008 --vocab 32000 --seq 4096 --batch 1 --precision bf16"
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-20s %-11s %5s %-10s %-6s %-8s %-9s %-8s %-6s %-5s %-4s %-5s %s\n' model profile "%" budget fits ratio step seconds copies ahead kept visit replay
for m in "${models[@]}"; do
	name=${m%%|*} args=${m#*|}
	[[ $name =~ ${ONLY:-.} ]] || continue
	for prof in h100-pcie5 h200-pcie5; do
		# shellcheck disable=SC2086
		peak=$("$bin" plan $args --profile "$prof" --budget 1000TiB --json 2>/dev/null |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["unlimited"]["peak_bytes"])')
		for pct in 100 60 35 15; do
			budget=$((peak * pct / 100))
			t0=$(date +%s.%N)
			# shellcheck disable=SC2086
			out=$("$bin" plan $args --profile "$prof" --budget "$budget" --out "$work/p.json" --json 2>/dev/null || true)
			secs=$(echo "$(date +%s.%N) - $t0" | bc)
			replay=-
			cmd=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("replay_command", ""))' 2>/dev/null || true)
			if [ -n "$cmd" ]; then
				cmd=${cmd//DIR/$work} # a plan with disk placements replays with a disk tier
				# shellcheck disable=SC2086
				replay=$("$bin" ${cmd#ferry } --modes policy --json 2>/dev/null | python3 -c '
import json, sys
want = int(sys.argv[1])
got = json.load(sys.stdin)["runs"][0]["peak_step_bytes"]
print("exact" if got == want else "%d/%d" % (got, want))' \
					"$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["predicted"]["peak_bytes"])')" || echo error)
			fi
			echo "$out" | python3 -c '
import json, sys
name, prof, pct, budget, secs, replay = sys.argv[1:7]
try:
    p = json.load(sys.stdin)
except Exception:
    print("%-20s %-11s %5s %-10s error" % (name, prof, pct, budget)); sys.exit()
pr = p.get("predicted") or {}
r = pr.get("step_over_bound") or (pr.get("step_seconds", 0) / pr["bound_seconds"] if pr.get("bound_seconds") else 0)
mark = " *" if p.get("fits") and r > 1.15 else ""
print("%-20s %-11s %5s %-10.3g %-6s %-8s %-9s %-8.2f %-6s %-5s %-4s %-5s %s%s" % (name, prof, pct, float(budget) / 2**30, p.get("fits"),
      ("%.3f" % r) if p.get("fits") else "-", ("%.4g" % pr["step_seconds"]) if p.get("fits") else "-", float(secs),
      p.get("copies_in_flight", ""), p.get("lookahead", ""), len(p.get("optimizer_state_on_device") or []),
      len(p.get("optimizer_state_visiting") or []), replay, mark))
' "$name" "$prof" "$pct" "$budget" "$secs" "$replay"
		done
	done
done
