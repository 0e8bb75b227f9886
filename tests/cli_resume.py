#!/usr/bin/env python3
"""cli_resume: a run killed at a random point and continued with --resume loses nothing and
repeats nothing, on the real default model.

For each scenario the run is killed (SIGKILL: a crash; SIGTERM: a clean stop) at random times,
resumed, killed again, and resumed to the end; the union of the output lines must equal an
uninterrupted run's: every id once, the same greedy text. Scenarios: pllm JSONL with output in
completion order to a plain file; OpenAI batch lines with --order input to a .zst file (a killed
.zst writer leaves an unfinished frame: --resume repairs it). A SIGTERM also writes the
statistics so far (--stats-json: "interrupted": true), exits 130 and says how to resume.
The random seed is printed so that a failure can be replayed (CLI_RESUME_SEED).
"""
import json
import os
import random
import signal
import subprocess
import time

from cli_util import PLLM, Test, read_records

t = Test("cli_resume")
t.need_model()
seed = int(os.environ.get("CLI_RESUME_SEED", random.randrange(1 << 30)))
rng = random.Random(seed)
print(f"seed {seed}")
N = 24
COMMON = ["--quiet", "--max-seqs", "4"]

pllm_in = t.write("in.jsonl", [{"id": f"r{i}", "prompt": f"Fact {i}: the number {i * 7} is", "max_tokens": 4 + i % 5}
                               for i in range(N)])
oa_in = t.write("batch.jsonl", [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
                                 "body": {"prompt": f"Fact {i}: the number {i * 7} is", "max_tokens": 4 + i % 5}}
                                for i in range(N)])


def key(r):
    return r.get("custom_id", r.get("id"))


def text(r):
    if "response" in r:
        return r["response"]["body"]["choices"][0]["text"]
    return r["text"]


def count(out):
    return len(read_records(out)) if os.path.exists(out) and os.path.getsize(out) else 0


def kill_at_random(args, out, sig, t_ref):
    """Start a run, wait a random time (up to about the length of what is left to do), send sig."""
    left = (N - count(out)) / N
    delay = rng.uniform(0.05, t_ref * max(0.2, left) * 0.8)
    p = subprocess.Popen([PLLM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(delay)
    p.send_signal(sig)
    _, err = p.communicate(timeout=300)
    n = count(out)
    return p.returncode, err.decode("utf-8", "replace"), n, delay


interrupted_part_way = 0
for name, inp, extra, out_name in [("pllm", pllm_in, [], "out.jsonl"),
                                   ("openai", oa_in, ["--order", "input"], "out.jsonl.zst")]:
    ref_out = t.path(f"ref-{out_name}")
    t0 = time.time()
    rc = subprocess.run([PLLM, "generate", inp, "-o", ref_out, *COMMON, *extra], capture_output=True).returncode
    t_ref = time.time() - t0
    ref = {key(r): text(r) for r in read_records(ref_out)}
    t.check(rc == 0 and len(ref) == N, f"{name}: reference run: rc {rc}, {len(ref)} records")
    out = t.path(out_name)
    args = ["generate", inp, "-o", out, *COMMON, *extra]
    for step, sig in enumerate([signal.SIGKILL, signal.SIGTERM, signal.SIGKILL]):
        rc, err, n, delay = kill_at_random(args + (["--resume"] if step else []), out, sig, t_ref)
        print(f"{name}: {sig.name} after {delay:.2f} s: {n}/{N} lines, exit {rc}")
        if 0 < n < N:
            interrupted_part_way += 1
        if sig == signal.SIGTERM and rc == 130:
            t.check("--resume" in err, f"{name}: SIGTERM says how to resume: {err[-300:]}")
        elif sig == signal.SIGTERM:
            t.check(rc == 0, f"{name}: SIGTERM exits 130 (or 0 if the run was already done): {rc} {err[-300:]}")
        else:
            t.check(rc in (-signal.SIGKILL, 0), f"{name}: killed: {rc}")
    rc = subprocess.run([PLLM, *args, "--resume"], capture_output=True).returncode
    got = read_records(out)
    keys = [key(r) for r in got]
    t.check(rc == 0, f"{name}: the last resume completes: {rc}")
    t.check(len(keys) == len(set(keys)) == N, f"{name}: every id once: {len(keys)} lines, {len(set(keys))} ids")
    t.check(all(ref.get(key(r)) == text(r) for r in got), f"{name}: the same texts as the uninterrupted run")

t.check(interrupted_part_way >= 1, "at least one kill landed part way through a run (not vacuous)")

# SIGTERM: statistics so far, exit 130, the resume hint; then --resume finishes the rest
slow = t.write("slow.jsonl", [{"id": f"s{i}", "prompt": f"Write about {i}:", "max_tokens": 24} for i in range(8)])
out = t.path("slow.jsonl.out")
stats = t.path("stats.json")
p = subprocess.Popen([PLLM, "generate", slow, "-o", out, "--stats-json", stats, "--max-seqs", "2"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
deadline = time.time() + 300
while time.time() < deadline and not (os.path.exists(out) and len(read_records(out)) >= 2):
    time.sleep(0.05)
p.send_signal(signal.SIGTERM)
_, err = p.communicate(timeout=300)
err = err.decode()
st = json.load(open(stats)) if os.path.exists(stats) else {}
n_first = len(read_records(out))
t.check(p.returncode == 130 and "--resume" in err and "interrupted" in err, f"SIGTERM: exit 130 with the hint: {p.returncode} {err[-300:]}")
t.check(st.get("interrupted") is True and st.get("completed") == n_first and "counters" in st,
        f"SIGTERM: statistics of what finished: completed {st.get('completed')} vs {n_first} lines")
t.check("pllm generate (interrupted)" in err and "Successful requests:" in err, "SIGTERM: the report so far on stderr")
rc, _, err = t.run(["generate", slow, "-o", out, "--resume", "--max-seqs", "2"])
got = [r["id"] for r in read_records(out)]
t.check(rc == 0 and sorted(got) == sorted(f"s{i}" for i in range(8)) and f"{n_first} output lines already" in err,
        f"resume after SIGTERM: {rc} {got} {err[:200]}")

t.finish()
