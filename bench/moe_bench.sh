#!/bin/sh
# Mixture of experts against dense on the CPU, batched: writes the two random models of
# bench/gen_moe_models.py (Qwen3-30B-A3B's ratios scaled down; a dense twin of the same active
# parameter count) into a temporary directory and runs build/bench/moe_bench on them (alternating
# rounds, ratio in one run). Run from the repository root:
#   bench/moe_bench.sh [moe_bench options, e.g. --seqs 64 --tokens 32 --rounds 3 --threads 2]
# Environment: PLLM_BUILD (default build), MOE_TYPE (Q8_0, Q4_0 or F16; default Q8_0),
# MOE_HEADS (query heads, default 16: Qwen3-30B-A3B's ratios; 8 for the earlier shape), MOE_LAYERS
# (default 2; 16 puts both models' weights out of cache, as a real model's are).
set -eu
B=${PLLM_BUILD:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 bench/gen_moe_models.py "$T" --type "${MOE_TYPE:-Q8_0}" --heads "${MOE_HEADS:-16}" \
    --layers "${MOE_LAYERS:-2}" >/dev/null
"$B/bench/moe_bench" "$T/moe.gguf" "$T/dense.gguf" "$@"
