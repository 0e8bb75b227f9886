#!/usr/bin/env python3
"""scale_out: N shards of T/N threads each (pllm generate --shard K/N, run side by side, joined
with pllm merge) against one run of T threads, on the same prompts, interleaved, with the ratio
of their throughputs, and a check that the merged counters equal the single run's.

    bench/scale_out.py [--pllm build/pllm] [--prompts 64] [--tokens 32] [--shards 2] [--threads 2] [--repeat 3]

The prompts are the first --prompts records of the shared ShareGPT sample (rendered with the
chat template, as pllm generate renders them); every request generates exactly --tokens tokens
(--ignore-eos), greedy. Wall time is the whole command (model load and, for the shards, their
first pass included); throughput is output tokens / wall time. Each repetition runs the single
run and the sharded run one after the other (alternating which goes first), so drift on a
shared machine hits both alike.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--pllm", default=os.path.join(ROOT, "build", "pllm"))
ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "sharegpt", "ShareGPT_V3_filtered_1000.json"))
ap.add_argument("--prompts", type=int, default=64)
ap.add_argument("--tokens", type=int, default=32)
ap.add_argument("--shards", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=3)
a = ap.parse_args()
tmp = tempfile.mkdtemp(prefix="pllm-scale-out-")
common = ["--limit", str(a.prompts), "--max-tokens", str(a.tokens), "--ignore-eos", "--num-blocks", "4096", "--quiet"]


def run(cmds):
    t0 = time.time()
    ps = [subprocess.Popen(c, stderr=subprocess.PIPE) for c in cmds]
    for p, c in zip(ps, cmds):
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"{' '.join(c)}: exit {p.returncode}: {err.decode()[-500:]}")
    return time.time() - t0


def single(i):
    out = os.path.join(tmp, f"single{i}.jsonl")
    wall = run([[a.pllm, "generate", a.data, "-o", out, "-t", str(a.threads), "--stats-json", out + ".json", *common]])
    return wall, json.load(open(out + ".json")), out


def sharded(i):
    outs = [os.path.join(tmp, f"r{i}-shard{k}.jsonl") for k in range(a.shards)]
    t = max(1, a.threads // a.shards)
    wall = run([[a.pllm, "generate", a.data, "--shard", f"{k}/{a.shards}", "-o", o, "-t", str(t), *common]
                for k, o in enumerate(outs)])
    merged = os.path.join(tmp, f"merged{i}.jsonl")
    r = subprocess.run([a.pllm, "merge", *outs, "-o", merged, "--order", "input", "--stats-json", merged + ".json", "-q"])
    if r.returncode != 0:
        sys.exit(f"merge: exit {r.returncode}")
    return wall, json.load(open(merged + ".json")), merged


rows = []
for i in range(a.repeat):
    order = [single, sharded] if i % 2 == 0 else [sharded, single]
    res = {f.__name__: f(i) for f in order}
    (ws, ss, so), (wm, ms, mo) = res["single"], res["sharded"]
    tok = ss["total_output_tokens"]
    rows.append((tok / ws, ms["total_output_tokens"] / wm))
    # request counters must be equal; cached tokens may be lower by (N-1) x the blocks every
    # prompt shares (the chat template's system prompt: each shard computes it once)
    keys = ("completed", "failed", "total_input_tokens", "total_output_tokens")
    same = {k: (ss[k], ms[k]) for k in keys if ss[k] != ms[k]}
    eng = (ss["counters"]["prompt_tokens_computed"], ms["counters"]["prompt_tokens_computed"])
    texts_s = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(so)}
    texts_m = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(mo)}
    print(f"run {i}: single {a.threads} threads {ws:.2f} s ({tok / ws:.1f} out tok/s); "
          f"{a.shards} shards x {max(1, a.threads // a.shards)} thread {wm:.2f} s ({ms['total_output_tokens'] / wm:.1f} out tok/s); "
          f"ratio {rows[-1][1] / rows[-1][0]:.3f}; request counters {'equal' if not same else 'DIFFER ' + str(same)}; "
          f"cached tokens {ss['total_cached_tokens']} vs {ms['total_cached_tokens']}; "
          f"prompt tokens computed {eng[0]} vs {eng[1]}; greedy texts equal {sum(texts_s[k] == texts_m.get(k) for k in texts_s)}/{len(texts_s)}",
          flush=True)
ratios = [m / s for s, m in rows]
print(f"sharded / single throughput: mean {statistics.mean(ratios):.3f} "
      f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} interleaved runs; "
      f"single {statistics.mean(s for s, _ in rows):.1f} out tok/s, sharded {statistics.mean(m for _, m in rows):.1f}")
