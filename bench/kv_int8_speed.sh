#!/usr/bin/env bash
# kv_int8_speed.sh: the int8 KV cache's CPU throughput against fp16 KV (issue 19), in one command.
# Runs `pllm bench --dataset sharegpt -n 200 --output-len 128` with --kv-cache-dtype fp16 and int8
# back to back in ABBA order (fp16 int8 int8 fp16, repeated -r times), so that a linear drift of the
# shared host's load cancels; prints each run's output tokens/s, the block capacity of each dtype in
# the same --kv-cache-mb, and the ratio of the means (int8 / fp16); also output tokens per CPU
# second of the whole process (user + system, /usr/bin/time), which a shared host's load
# disturbs far less than the wall clock (it still includes load, tokenization and prefill).
#
#   bench/kv_int8_speed.sh [-r ROUNDS] [pllm bench options...]
# Environment: PLLM_BIN (default build/pllm), PLLM_SHARED_DATA (default ../shared/data).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${PLLM_BIN:-$here/../build/pllm}
data=${PLLM_SHARED_DATA:-$here/../../shared/data}
rounds=1
if [[ ${1:-} == -r ]]; then rounds=$2; shift 2; fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/pllm_kv_int8.XXXXXX")
trap 'rm -rf "$dir"' EXIT
i=0
for ((r = 0; r < rounds; r++)); do
    for dt in fp16 int8 int8 fp16; do
        i=$((i + 1))
        /usr/bin/time -f "%U %S" -o "$dir/$i.$dt.time" \
            "$bin" bench --dataset sharegpt --dataset-path "$data/sharegpt/ShareGPT_V3_filtered_1000.json" \
            -n 200 --output-len 128 --kv-cache-dtype "$dt" --stats-json "$dir/$i.$dt.json" "$@" \
            2>"$dir/$i.$dt.log" >/dev/null
        echo "run $i $dt: load $(cut -d' ' -f1 /proc/loadavg)" >&2
    done
done
python3 - "$dir" <<'PY'
import glob, json, os, re, sys
d = sys.argv[1]
runs = {"fp16": [], "int8": []}
cpu = {"fp16": [], "int8": []}
blocks = {}
for p in sorted(glob.glob(f"{d}/*.json"), key=lambda p: int(os.path.basename(p).split(".")[0])):
    dt = p.split(".")[-2]
    j = json.load(open(p))
    runs[dt].append(j["output_throughput"])
    u, s = map(float, open(p[:-5] + ".time").read().split()[-2:])
    cpu[dt].append(j["total_output_tokens"] / (u + s))
    log = open(p[:-5] + ".log").read()
    m = re.search(r"Peak KV blocks in use: *\d+ / (\d+)", log)
    if m: blocks[dt] = int(m.group(1))
    print(f"{os.path.basename(p)[:-5]}: {j['output_throughput']:.1f} output tok/s, "
          f"{cpu[dt][-1]:.1f} output tok per CPU s ({u + s:.1f} CPU s), digest {j.get('output_digest')}")
mean = {k: sum(v) / len(v) for k, v in runs.items()}
cmean = {k: sum(v) / len(v) for k, v in cpu.items()}
print(f"kv_int8_speed: fp16 {mean['fp16']:.1f} tok/s, int8 {mean['int8']:.1f} tok/s (means of {len(runs['fp16'])}): "
      f"int8 / fp16 = {mean['int8'] / mean['fp16']:.3f}; per CPU second: fp16 {cmean['fp16']:.1f}, "
      f"int8 {cmean['int8']:.1f}, int8 / fp16 = {cmean['int8'] / cmean['fp16']:.3f}; "
      f"blocks fp16 {blocks.get('fp16')}, int8 {blocks.get('int8')} "
      f"({blocks.get('int8', 0) / max(blocks.get('fp16', 1), 1):.2f}x)")
PY
