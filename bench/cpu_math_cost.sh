#!/bin/sh
# What float32 math costs against the default int8 math on the CPU, on the default model: the same
# bench commands alternating the two (int8, f32, int8, f32), so that load from elsewhere hits both;
# prints output throughput per run and the f32/int8 ratio of the means. README quotes its figures.
#   bench/cpu_math_cost.sh [PLLM_BINARY]     (default build/pllm; run from the repository root)
set -eu
P=${1:-build/pllm}
D=${PLLM_SHARED_DATA:-../shared/data}/sharegpt/ShareGPT_V3_filtered_1000.json
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run() { # name, then bench arguments
  name=$1; shift
  for m in int8 f32 int8 f32; do
    "$P" bench "$@" --warmup 2 --cpu-math "$m" --stats-json "$T/$m.json" --overwrite -q 2>/dev/null
    python3 -c "import json,sys; print(sys.argv[1], json.load(open(sys.argv[2]))['output_throughput'])" "$m" "$T/$m.json"
  done | python3 -c "
import sys
v = {}
for line in sys.stdin:
    m, x = line.split(); v.setdefault(m, []).append(float(x))
i8, f = sum(v['int8']) / 2, sum(v['f32']) / 2
print(f'$name: output tok/s int8 {v[\"int8\"]}, f32 {v[\"f32\"]}; f32/int8 = {f / i8:.2f}')"
}
run "sharegpt 16 prompts x 32 tokens" --dataset sharegpt --dataset-path "$D" --num-prompts 16 --output-len 32
run "random 16 x (32 in, 64 out)" --dataset random --input-len 32 --output-len 64 --num-prompts 16
