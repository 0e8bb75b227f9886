#!/bin/sh
# bench/gpu/run.sh: the CUDA backend's numbers on a machine with a GPU (run by hand; exits 77
# saying why when no GPU answers).
#
#     bench/gpu/run.sh [BUILD_DIR] [MODEL.gguf ...]
#
# 1. kernel_bench for Llama-3-8B and SmolLM2-135M shapes: every kernel and projection GEMM of a
#    decode step (64 sequences x 1024 positions) and of a 2048-token prefill chunk, timed with
#    CUDA events, with the bytes/FLOPs each must move, the achieved GB/s or TFLOP/s against the
#    device's measured peaks (copy bandwidth, cuBLAS F16 and F32 GEMM), and the time those peaks
#    predict. Compare with the expected H100 times in docs/cuda.md.
# 2. End to end: `pllm bench` on the ShareGPT set (1000 conversations, $PLLM_SHARED_DATA or
#    ../shared/data) on --device cuda, and on --device cpu for scale, for each model given
#    (default: $PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf).
# Results go to bench/gpu/results-<host>-<date>/ (kernel tables, JSON, bench stats).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
home=${PLLM_HOME:-$HOME/.cache/pllm}
data=${PLLM_SHARED_DATA:-$root/../shared/data}
sharegpt=$data/sharegpt/ShareGPT_V3_filtered_1000.json
models=${*:-$home/models/SmolLM2-135M-Instruct.Q4_1.gguf}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIPPED: bench/gpu/run.sh needs an NVIDIA GPU (nvidia-smi finds none)"
    exit 77
fi
for f in "$build/bench/kernel_bench" "$build/pllm"; do
    if [ ! -x "$f" ]; then
        echo "bench/gpu/run.sh: $f is missing: build with nvcc found (cmake -S . -B $build && cmake --build $build)" >&2
        exit 2
    fi
done
out=$here/results-$(hostname)-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.csv"

status=0
for dims in llama3-8b smollm2-135m; do
    echo "== kernel_bench --dims $dims"
    "$build/bench/kernel_bench" --dims "$dims" --json "$out/kernels-$dims.json" | tee "$out/kernels-$dims.txt" || status=1
done

for m in $models; do
    name=$(basename "$m" .gguf)
    for dev in cuda cpu; do
        echo "== pllm bench --device $dev --model $name (ShareGPT)"
        n=1000
        [ "$dev" = cpu ] && n=100 # the CPU is for scale only
        "$build/pllm" bench --device "$dev" --model "$m" --dataset sharegpt --dataset-path "$sharegpt" \
            --num-prompts $n --max-seqs 256 --max-batched-tokens 8192 --warmup 8 \
            --stats-json "$out/bench-$name-$dev.json" 2>&1 | tee "$out/bench-$name-$dev.txt" || status=1
    done
done
echo "results in $out"
exit $status
