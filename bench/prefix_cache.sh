#!/usr/bin/env bash
# prefix_cache.sh: the persistent prefix cache's effect (issue 19): `pllm bench --dataset prefix`
# twice on one fresh --prefix-cache-dir, cold then warm, in one command; prints both mean TTFTs,
# their ratio, and whether the greedy outputs (the bench's output digest) are identical.
#
#   bench/prefix_cache.sh [pllm bench options...]     e.g. -n 50 --output-len 16
# Environment: PLLM_BIN (default build/pllm). Exit 1 when the outputs differ.
set -euo pipefail
bin=${PLLM_BIN:-$(dirname "$0")/../build/pllm}
dir=$(mktemp -d "${TMPDIR:-/tmp}/pllm_prefix_cache.XXXXXX")
trap 'rm -rf "$dir"' EXIT
for run in cold warm; do
    "$bin" bench --dataset prefix --prefix-cache-dir "$dir/kv" --stats-json "$dir/$run.json" "$@" \
        2> >(grep -E 'prefix cache|Mean TTFT|Output digest|Prompt tokens computed' | sed "s/^/$run: /" >&2)
done
sleep 0.2 # let the stderr filters finish
python3 - "$dir/cold.json" "$dir/warm.json" "$(du -sh "$dir/kv" | cut -f1)" <<'PY'
import json, sys
c, w = (json.load(open(p)) for p in sys.argv[1:3])
tc, tw = c["mean_ttft_ms"], w["mean_ttft_ms"]
same = c["output_digest"] == w["output_digest"]
print(f"prefix_cache: mean TTFT cold {tc:.1f} ms, warm {tw:.1f} ms: {tc / tw:.2f}x lower; "
      f"outputs {'identical' if same else 'DIFFER'} (digest {c['output_digest']} / {w['output_digest']}); "
      f"directory {sys.argv[3]}")
sys.exit(0 if same else 1)
PY
