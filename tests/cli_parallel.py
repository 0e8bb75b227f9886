#!/usr/bin/env python3
"""cli_parallel: the GNU parallel recipe (examples/parallel/run-shards.sh) runs as written on
this machine (hosts ":"): 3 shards of 6 prompts on the default model, merged output equal to a
single run record for record (greedy), every id once; the same command again resumes every
shard (nothing is generated twice: each shard's output keeps its lines) and merges the same.
GNU parallel comes from Debian (scripts/setup.sh installs it)."""
import json
import os
import shutil
import subprocess
import sys

PLLM = os.environ["PLLM_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "examples", "parallel", "run-shards.sh")
TMP = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "cli_parallel")


def records(path):
    with open(path) as f:
        return {r["id"]: r for r in (json.loads(l) for l in f if l.strip())}


def main():
    if not shutil.which("parallel"):
        print("cli_parallel: FAIL: GNU parallel is not installed (scripts/setup.sh installs it)")
        return 1
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    prompts = os.path.join(TMP, "p.jsonl")
    qs = ["The capital of France is", "Two plus two is", "Name a colour:", "The sun rises in the",
          "def add(a, b):", "Once upon a time"]
    with open(prompts, "w") as f:
        for i, q in enumerate(qs):
            f.write(json.dumps({"id": f"r{i}", "prompt": q}) + "\n")
    args = ["--max-tokens", "4", "--temperature", "0", "--threads", "1"]
    single = os.path.join(TMP, "single.jsonl")
    p = subprocess.run([PLLM, "generate", prompts, "-o", single] + args, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"cli_parallel: FAIL: the single run exited {p.returncode}: {p.stderr[-1500:]}")
        return 1
    out = os.path.join(TMP, "out")
    env = dict(os.environ, PLLM=PLLM)
    fails = []
    sizes = None
    for attempt in ("first", "rerun"):
        p = subprocess.run(["bash", SCRIPT, prompts, out, "3", ":", "--"] + args, capture_output=True,
                           text=True, env=env, timeout=600)
        if p.returncode != 0:
            fails.append(f"{attempt} run exited {p.returncode}: {p.stderr[-1500:]}")
            break
        got, ref = records(os.path.join(out, "merged.jsonl")), records(single)
        with open(os.path.join(out, "merged.jsonl")) as f:
            n_lines = sum(1 for l in f if l.strip())
        if n_lines != len(qs) or {k: r["text"] for k, r in got.items()} != {k: r["text"] for k, r in ref.items()}:
            fails.append(f"{attempt}: merged {sorted(got)} ({n_lines} lines) differs from the single run")
        now = [os.path.getsize(os.path.join(out, f"shard-{k}-of-3.jsonl")) for k in range(3)]
        if sizes is not None and now != sizes:
            fails.append(f"the rerun changed the shards' outputs ({sizes} -> {now} bytes): not resumed")
        sizes = now
        print(f"  {attempt}: 3 shards under GNU parallel, {n_lines} merged lines, equal to a single run")
    for f in fails:
        print("FAIL:", f)
    print("cli_parallel:", "all checks passed" if not fails else f"{len(fails)} check(s) failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
