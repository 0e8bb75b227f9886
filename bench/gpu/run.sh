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
# 2. End to end: `pllm bench --device cuda --dataset sharegpt` on the ShareGPT set (1000
#    conversations, $PLLM_SHARED_DATA or ../shared/data), and on --device cpu (100
#    conversations) for scale, for each model given (default:
#    $PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf).
# 3. A summary: per model, the measured throughput of each device next to the kernel figures
#    (the decode step of the kernel table, summed over the layers, measured and as the peaks
#    predict it, and the decode tokens/s that step time gives).
# Results go to bench/gpu/results-<host>-<date>/ (kernel tables and JSON, bench stats, summary).
#
# Exit: 0 all ran; 1 a step failed; 2 the build lacks the binaries; 77 no GPU here (the message
# gives pllm's own reason: no driver, no device).
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
    echo "SKIPPED: no GPU: bench/gpu/run.sh needs an NVIDIA GPU (nvidia-smi finds none)"
    exit 77
fi
for f in "$build/bench/kernel_bench" "$build/pllm"; do
    if [ ! -x "$f" ]; then
        echo "bench/gpu/run.sh: $f is missing: build with nvcc found (cmake -S . -B $build && cmake --build $build)" >&2
        exit 2
    fi
done
# pllm's own answer: --device cuda is refused (exit 2, the reason on stderr) before any model is
# read when no device answers; with a device it goes on to the (missing) model and exits 3.
probe=$("$build/pllm" bench --device cuda --model /nonexistent.gguf --dataset random --num-prompts 1 2>&1)
if [ $? -eq 2 ]; then
    case $probe in
    *"built without the CUDA backend"*)
        echo "bench/gpu/run.sh: $build/pllm has no CUDA backend: $probe" >&2
        exit 2 ;;
    esac
    echo "SKIPPED: no GPU: $probe"
    exit 77
fi
if [ ! -f "$sharegpt" ]; then
    echo "bench/gpu/run.sh: the ShareGPT set is missing: $sharegpt (set PLLM_SHARED_DATA)" >&2
    exit 2
fi
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

# the summary: end-to-end throughput next to the kernel figures
python3 - "$out" <<'EOF' | tee "$out/summary.txt" || status=1
import glob, json, os, sys
out = sys.argv[1]
PER_LAYER = ("rmsnorm+residual", "gemm qkv", "qkv_rope + kv store", "attention decode", "gemm o",
             "rmsnorm+residual (ffn)", "gemm gate/up", "swiglu", "gemm down")
ONCE = ("embedding", "final rmsnorm (sampled rows)", "lm head", "sample (greedy)")
print("== summary")
for f in sorted(glob.glob(os.path.join(out, "kernels-*.json"))):
    k = json.load(open(f))
    rows = {r["kernel"]: r for r in k["kernels"] if r.get("step") == "decode"}
    missing = [n for n in PER_LAYER + ONCE if n not in rows]
    if missing:
        print(f"{os.path.basename(f)}: no decode rows for {missing}")
        continue
    step = lambda key: k["n_layer"] * sum(rows[n][key] for n in PER_LAYER) + sum(rows[n][key] for n in ONCE)
    meas, pred = step("us"), step("predicted_us")
    print(f"kernels {k['dims']} on {k['device']}: decode step of {k['batch']} sequences x {k['ctx']} context: "
          f"{meas / 1e3:.2f} ms measured ({k['batch'] / meas * 1e6:,.0f} tokens/s), "
          f"{pred / 1e3:.2f} ms as the peaks predict ({k['batch'] / pred * 1e6:,.0f} tokens/s)")
print(f"{'pllm bench (ShareGPT)':40} {'device':7} {'requests':>8} {'req/s':>8} {'output tok/s':>13} {'total tok/s':>12} {'mean TTFT ms':>13} {'mean TPOT ms':>13}")
for f in sorted(glob.glob(os.path.join(out, "bench-*.json"))):
    b = json.load(open(f))
    g = lambda key: b.get(key) if isinstance(b.get(key), (int, float)) else float("nan")
    print(f"{b['workload']['model']['name'][:40]:40} {b['setup']['device']:7} {b['workload']['num_requests']:8d} "
          f"{g('request_throughput'):8.2f} {g('output_throughput'):13.1f} {g('total_token_throughput'):12.1f} "
          f"{g('mean_ttft_ms'):13.1f} {g('mean_tpot_ms'):13.2f}")
EOF
echo "results in $out"
exit $status
