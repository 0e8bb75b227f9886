#!/usr/bin/env python3
"""first_pass: what `pllm generate` spends reading a file input before and around the run, when it
must tokenize the whole input: the --shard plan (--shard-balance tokens, the default for a file)
and, for a model with sliding-window layers, the hybrid KV split's sequence lengths.

    bench/first_pass.py [--pllm build/pllm] [--baseline OLD_PLLM] [--model GGUF ...]
                        [--records 20000] [--threads T] [--repeat 2]

The input is --records records built from the shared ShareGPT sample (each first human turn as
a raw prompt, max_tokens 1, numbered so that every record is distinct). Each case runs
`pllm generate INPUT --shard N-1/N` with N = min(50 x records, 1000000): with far more shards
than records, the plan spreads every key by record id and the last shard holds about
records / N of them (0.02 at the default), so the command's wall time is model load + the
input's passes, nothing of the run (the lines it wrote are printed). Models: every --model given (default: the two setup.sh fetches that
differ here, SmolLM2-135M without sliding layers and Gemma 3 270M with them).

With --baseline, each repetition runs the baseline binary and --pllm one after the other
(alternating which goes first, so drift on a shared machine hits both alike) and prints the
ratio of the mean wall times, baseline / new, with the per-pair range.
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
HOME = os.environ.get("PLLM_HOME", os.path.join(os.path.expanduser("~"), ".cache", "pllm"))
MODELS = [os.path.join(HOME, "models", m) for m in ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf")]
ap = argparse.ArgumentParser()
ap.add_argument("--pllm", default=os.path.join(ROOT, "build", "pllm"))
ap.add_argument("--baseline", help="another pllm binary to compare against (e.g. built from an earlier commit)")
ap.add_argument("--model", action="append", help="GGUF file (repeatable); default: SmolLM2-135M and Gemma 3 270M")
ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "sharegpt", "ShareGPT_V3_filtered_1000.json"))
ap.add_argument("--records", type=int, default=20000)
ap.add_argument("--threads", type=int, default=0, help="--threads for pllm (0: its default, every core)")
ap.add_argument("--repeat", type=int, default=2)
a = ap.parse_args()
for what, p in [("--pllm", a.pllm), ("--baseline", a.baseline)] + [("--model", m) for m in (a.model or MODELS)]:
    if p and not os.path.exists(p):
        sys.exit(f"first_pass: {what} {p} does not exist" + (" (scripts/setup.sh fetches the models)" if what == "--model" else ""))

tmp = tempfile.mkdtemp(prefix="pllm-first-pass-")
with open(a.data, encoding="utf-8") as f:
    turns = [c[0]["value"] for c in (r["conversations"] for r in json.load(f)) if c and c[0].get("from") == "human"]
inp = os.path.join(tmp, "in.jsonl")
with open(inp, "w") as f:
    for i in range(a.records):
        f.write(json.dumps({"id": str(i), "prompt": f"{turns[i % len(turns)]}\n(record {i})", "max_tokens": 1}) + "\n")
n = min(50 * a.records, 1000000)


def run(binary, model):
    out = os.path.join(tmp, "out.jsonl")
    args = [binary, "generate", "-m", model, inp, "--shard", f"{n - 1}/{n}", "-o", out, "--overwrite"]
    if a.threads:
        args += ["-t", str(a.threads)]
    t0 = time.time()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.time() - t0
    lines = [x for x in p.stderr.splitlines() if "first pass" in x or "hybrid KV" in x]
    if p.returncode != 0:
        sys.exit(f"first_pass: {' '.join(args)}: exit {p.returncode}:\n{p.stderr[-800:]}")
    with open(out) as f:
        lines.append(f"{sum(1 for _ in f)} lines written")
    return wall, lines


print(f"first_pass: {a.records} records ({os.path.getsize(inp) / 1e6:.1f} MB), shard {n - 1}/{n}, "
      f"threads {a.threads or 'default'}, load average {os.getloadavg()[0]:.2f}")
for model in a.model or MODELS:
    name = os.path.basename(model)
    new, old, ratios = [], [], []
    for r in range(a.repeat):
        order = [("new", a.pllm), ("old", a.baseline)] if r % 2 == 0 else [("old", a.baseline), ("new", a.pllm)]
        got = {}
        for tag, b in order:
            if b:
                got[tag] = run(b, model)
        new.append(got["new"][0])
        if a.baseline:
            old.append(got["old"][0])
            ratios.append(got["old"][0] / got["new"][0])
        for tag in ("old", "new"):
            if tag in got:
                print(f"  {name} {tag}: {got[tag][0]:.2f} s  " + " | ".join(s.replace("pllm: ", "") for s in got[tag][1]))
    line = f"{name}: new {statistics.mean(new):.2f} s"
    if a.baseline:
        line += (f", baseline {statistics.mean(old):.2f} s: {statistics.mean(old) / statistics.mean(new):.2f}x "
                 f"(pairs {min(ratios):.2f}..{max(ratios):.2f})")
    print(line + f"  [load average {os.getloadavg()[0]:.2f}]")
