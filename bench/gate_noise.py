#!/usr/bin/env python3
"""gate_noise.py: the false-alarm rate of `pllm bench --baseline` on this machine.

A small bench (seconds a run) is saved as a baseline, then rerun N times identically against it:
every FAIL is a false alarm (nothing changed). For each --repeat R the script reports the new
gate's alarms (pllm's own verdict), what the pre-issue-23 gate (one mean against a fixed
--max-regression) would have said on the same files, and the run-to-run spread measured. One
baseline is one draw (a lucky fast baseline makes almost every rerun "regress"), so the rate is
also given over every ordered pair of the N + 1 runs (each as the baseline of each other, judged
with `pllm bench --baseline A --current B`).

    bench/gate_noise.py build/pllm [--reruns 20] [--repeats 1,3,5] [--old-pllm OLD_BINARY]

--old-pllm also runs an older binary's own gate (R = 1) the same way, for a before/after
measured on the same machine in the same session. Measurements are timings: run it where the
gate will run (a shared CI machine), not on an idle one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

KEYS = ("request_throughput", "input_throughput", "output_throughput", "total_token_throughput")
WORKLOAD = ["--dataset", "random", "--input-len", "64", "--output-len", "16", "--num-prompts", "16",
            "--num-blocks", "512", "--seed", "1", "--quiet"]


def bench(pllm, args, stats):
    r = subprocess.run([pllm, "bench", *WORKLOAD, *args, "--stats-json", stats], capture_output=True, text=True)
    return r.returncode, r.stderr


def gate(pllm, base, cur, mr):
    """pllm's own verdict on two saved files: True on a FAIL."""
    r = subprocess.run([pllm, "bench", "--baseline", base, "--current", cur, *mr], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr[-500:]
    return r.returncode == 1


def old_gate_fails(base, cur, max_reg):
    """The gate before issue 23: any throughput mean more than max_reg percent below."""
    return any(100.0 * (cur[k] - base[k]) / base[k] < -max_reg for k in KEYS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pllm")
    ap.add_argument("--reruns", type=int, default=20)
    ap.add_argument("--repeats", default="1,3,5")
    ap.add_argument("--max-regression", type=float, default=5.0)
    ap.add_argument("--old-pllm")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gate_noise_")
    mr = ["--max-regression", f"{a.max_regression}%"]
    print(f"workload: pllm bench {' '.join(WORKLOAD)}; {a.reruns} identical reruns against a baseline "
          f"from the same build; --max-regression {a.max_regression}%", flush=True)
    if a.old_pllm:
        t0 = time.time()
        files, docs, alarms = [], [], 0
        for i in range(a.reruns + 1):
            f = os.path.join(tmp, f"old_{i}.json")
            rc, err = bench(a.old_pllm, ["--baseline", files[0], *mr] if files else [], f)
            assert rc in (0, 1), err[-500:]
            alarms += rc == 1
            files.append(f)
            docs.append(json.load(open(f)))
        pairs = [(i, j) for i in range(len(docs)) for j in range(len(docs)) if i != j]
        old_pairs = sum(old_gate_fails(docs[i], docs[j], a.max_regression) for i, j in pairs)
        print(f"old binary, --repeat 1: its own gate against one baseline: {alarms}/{a.reruns} false alarms; "
              f"its rule over all {len(pairs)} ordered pairs: {old_pairs} ({100.0 * old_pairs / len(pairs):.1f}%) "
              f"({time.time() - t0:.0f} s)", flush=True)
    for rep in [int(x) for x in a.repeats.split(",")]:
        t0 = time.time()
        files, docs = [], []
        for i in range(a.reruns + 1):  # run 0 is the baseline of the sequential count
            f = os.path.join(tmp, f"r{rep}_{i}.json")
            extra = ["--baseline", files[0], *mr] if files else []
            rc, err = bench(a.pllm, ["--repeat", str(rep), *extra], f)
            assert rc in (0, 1), err[-500:]
            files.append(f)
            docs.append(json.load(open(f)))
        secs = time.time() - t0
        # against the one baseline, as CI would run it
        new_seq = sum(gate(a.pllm, files[0], f, mr) for f in files[1:])
        old_seq = sum(old_gate_fails(docs[0], d, a.max_regression) for d in docs[1:])
        # every ordered pair: the rate over many baselines, not the luck of one
        pairs = [(i, j) for i in range(len(files)) for j in range(len(files)) if i != j]
        new_pairs = sum(gate(a.pllm, files[i], files[j], mr) for i, j in pairs)
        old_pairs = sum(old_gate_fails(docs[i], docs[j], a.max_regression) for i, j in pairs)
        runs = [r["output_throughput"] for d in docs for r in d["runs"]]
        means = [d["output_throughput"] for d in docs]
        cv = 100.0 * statistics.stdev(runs) / statistics.mean(runs)
        cvm = 100.0 * statistics.stdev(means) / statistics.mean(means)
        print(f"--repeat {rep}: against one baseline: new gate {new_seq}/{a.reruns} false alarms, old gate "
              f"{old_seq}/{a.reruns}; over all {len(pairs)} ordered pairs: new {new_pairs} "
              f"({100.0 * new_pairs / len(pairs):.1f}%), old {old_pairs} ({100.0 * old_pairs / len(pairs):.1f}%); "
              f"spread (CV) of one run {cv:.1f}%, of a {rep}-run mean {cvm:.1f}% ({secs:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
