#!/usr/bin/env bash
# The planner's clock against the CPU (issue 36): for each model and each
# placement kind, the step the meta device predicts under a CPU profile
# (ferry demo --device meta --profile P) beside the step the CPU device
# measures (ferry demo --device cpu), same flags. Rounds alternate: in each
# round every kind is predicted and then measured, one kind after the
# other; each run's figure is its fast step (below), and the table gives the
# median over the rounds of each, the median of the rounds' ratios
# (predicted / measured) and the measured range. The load average is printed before and after.
# A run's figure is its fast step (demo's step_seconds_fast, the tenth
# percentile of its steps: the machine with nothing else running, which
# is what ferry calibrate fits the profile to); the table also gives the
# ratio to the run's median step.
# Usage:
#   bash bench/cpu_clock.sh [ferry binary]
# Environment: ROUNDS (3), MLP_STEPS, GPT_STEPS and GPT8_STEPS (timed
# steps per measured run, 10, 40 and 20), MLP_PROFILE
# (cpu), GPT_PROFILE (cpu-gpt, both GPTs), MODELS (mlp gpt; gpt8 the
# larger GPT), KINDS (all), FIT=1 to
# fit each model's profile first (ferry calibrate on the
# model, saved in the work directory: the machine as it is now, rather
# than as the built-in profile found it) or
# FIT=round to fit it again before each round of each model (each
# measurement is then set against a profile of the machine as it was a
# few seconds before: on a machine whose speed drifts by a fifth over
# minutes, the clock checked apart from the drift), FIT_SECONDS (1)
# for ferry calibrate's --seconds in those fits,
# FERRY_CLOCK_QUIET=0 not to wait for quiet cores, and
# FERRY_CLOCK_RAW=FILE to keep every run's figure (model kind round
# predicted measured load median, one line each: measured is the fast
# step, load the 1-minute load average as the measured run started,
# median the run's median step).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/ferry
	go build -o "$bin" ./cmd/ferry
fi
rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
raw=${FERRY_CLOCK_RAW:-$work/raw}
: >"$raw"

declare -A model_args model_profile model_steps
model_args[mlp]="--model mlp --layers 16 --width 1024 --batch 128 --optimizer sgd"
model_args[gpt]="--model gpt --layers 4 --heads 4 --embd 128 --seq 64 --vocab 256 --batch 4"
# gpt8: the same GPT at twice the sequence and batch 8 (four times the
# tokens): a step of tens of milliseconds rather than 15, where the
# runtime's fixed costs per tensor weigh less (docs/plan.md).
model_args[gpt8]="--model gpt --layers 4 --heads 4 --embd 128 --seq 128 --vocab 256 --batch 8"
model_profile[gpt8]=${GPT_PROFILE:-cpu-gpt}
model_steps[gpt8]=${GPT8_STEPS:-20}
model_profile[mlp]=${MLP_PROFILE:-cpu}
model_profile[gpt]=${GPT_PROFILE:-cpu-gpt}
model_steps[mlp]=${MLP_STEPS:-10}
model_steps[gpt]=${GPT_STEPS:-40}

# kind|flags: the six placement kinds of issue 36, and mode none for
# reference.
state="--optimizer-state host --gradients host"
all_kinds=(
	"none|--modes none"
	"act-host|--modes offload"
	"act-disk|--modes offload-disk --disk-dir $work"
	"recompute|--modes recompute"
	"state-host|--modes none $state"
	"params-host|--modes none $state --parameters host"
	"in-backward|--modes none $state --parameters host --optimizer-in-backward"
)
kinds=()
for k in "${all_kinds[@]}"; do
	if [ -z "${KINDS:-}" ] || [[ " $KINDS " == *" ${k%%|*} "* ]]; then
		kinds+=("$k")
	fi
done

# quiet waits (up to 120 s) until nothing but this script has run for a
# second (the running count of /proc/loadavg, sampled every 0.1 s), so that
# a measured run starts on idle cores; another job may still start during
# it, which is what the rounds and medians are for.
quiet() {
	[ "${FERRY_CLOCK_QUIET:-1}" = 0 ] && return
	local calm=0 waited=0 l1 l5 l15 running rest
	while [ "$calm" -lt 10 ] && [ "$waited" -lt 1200 ]; do
		# read, a builtin: no other process of ours runs while it looks.
		read -r l1 l5 l15 running rest </proc/loadavg
		if [ "${running%%/*}" -le 1 ]; then
			calm=$((calm + 1))
		else
			calm=0
		fi
		sleep 0.1
		waited=$((waited + 1))
	done
}

step() { # device args...: the run's fast step and its median step
	"$bin" demo --device "$@" --json | python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"][0]; print(r["step_seconds_fast"], r["step_seconds"])'
}

# fit MODEL [WHEN]: ferry calibrate on the model, its profile from now on.
fit() {
	# shellcheck disable=SC2086
	"$bin" calibrate ${model_args[$1]/--optimizer sgd/} --seconds "${FIT_SECONDS:-1}" --save "$work/$1.json" >/dev/null 2>&1
	model_profile[$1]=$work/$1.json
	echo "$1${2:+ $2}: fitted $(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print("products %.0f GFLOP/s, elementwise %.1f GB/s, host optimizer %.1f GB/s, copy share %.2f" % (p["matmul_flops"]/1e9, p["memory_bytes_per_sec"]/1e9, p["host_optimizer_bytes_per_sec"]/1e9, p["copy_compute_share"]))' "$work/$1.json")"
}
if [ "${FIT:-0}" = 1 ]; then
	for m in ${MODELS:-mlp gpt}; do
		fit "$m"
	done
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in ${MODELS:-mlp gpt}; do
	for r in $(seq 1 "$rounds"); do
		if [ "${FIT:-0}" = round ]; then
			quiet
			fit "$m" "round $r"
		fi
		for k in "${kinds[@]}"; do
			name=${k%%|*} flags=${k#*|}
			# shellcheck disable=SC2086
			p=$(step meta --profile "${model_profile[$m]}" ${model_args[$m]} $flags --steps 3)
			quiet
			load=$(cut -d' ' -f1 /proc/loadavg)
			# shellcheck disable=SC2086
			t=$(step cpu ${model_args[$m]} $flags --steps "${model_steps[$m]}")
			echo "$m $name $r ${p%% *} ${t%% *} $load ${t#* }" >>"$raw"
		done
	done
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
for m in ${MODELS:-mlp gpt}; do
	echo "$m: ferry demo ${model_args[$m]} (predicted: --device meta --profile ${model_profile[$m]}; measured: --device cpu --steps ${model_steps[$m]})"
done
python3 bench/cpu_clock_table.py <"$raw"
