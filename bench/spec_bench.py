#!/usr/bin/env python3
"""spec_bench: speculative decoding (pllm bench --speculate) against --speculate off, in one run,
on a copy-heavy workload built from the shared data and on ShareGPT, with the ratios of their
output token throughputs.

    bench/spec_bench.py [--pllm build/pllm] [--model FILE] [--threads 2] [--repeat 3] [--mode auto]
                        [--cases copy1,copy16,sharegpt64] [--copy1-n 32] [--keep DIR]

--model: the model every case runs (pllm's -m; default: pllm's default model, SmolLM2-135M);
the copy requests' max_tokens are counted with its tokenizer. What speculation gains on the copy
cases depends on how faithfully the model copies: the 135M default model drifts from the text
(about 3.5 tokens per sequence step at 1 sequence), Qwen2.5-Coder-0.5B, the second model
scripts/setup.sh fetches, copies nearly all of it (about 8.5).

Cases (each runs `pllm bench` with --speculate off and --speculate MODE, alternately, --repeat
times, so drift on a shared machine hits both alike; the ratio is of the mean throughputs, and
the spread of the per-pair ratios is shown; the ratio of output tokens per CPU second of the
pllm processes is printed beside it: on a machine shared with other jobs, wall time counts the
time they held the cores, CPU time much less so):
  copy1       the copy-heavy workload, 32 requests (the ones copy16 runs), --max-seqs 1
              target >= 2.0x (--copy1-n N: the first N only, a shorter run; a small sample
              is not the workload: 2 of the first 8 are requests the 135M model does not copy,
              c5 and c6, 552 of the 805 steps prompt lookup needs there, 4 of the 32)
  copy16      the copy-heavy workload, 32 requests, --max-seqs 16     target >= 1.3x
  sharegpt64  ShareGPT, 128 requests, 64 output tokens each, --max-seqs 64, target >= 0.97x
              (the policy must turn itself off where speculation does not pay)

The copy-heavy workload (raw completion prompts, from ../shared/data, deterministic), in turn:
  - "repeat with one word changed": a ShareGPT passage (700-1500 characters), then
    "Copy, with the word 'X' replaced by 'Y':" and the copy's first 8 words;
  - "JSON reformat": a compact JSON list of MT-Bench questions (id, category, first turn), then
    "The same JSON, pretty-printed with an indent of 2:" and the first line of that;
  - "code rename": a ShareGPT prompt that holds code (a line with "def ", "function " or
    "class "), then "The same code with the identifier 'A' renamed to 'B':" and its first line.
Each request's max_tokens is the length of its expected copy in the model's tokens (148..489,
9228 in all, against 9959 prompt tokens; greedy, ignore_eos: pllm bench's rule), so that the
output is the copy, whole, and nothing generated past its end; most of it the model copies from
its prompt (the 135M default model drifts from the text now and then; prompt lookup then finds
the text again a few tokens later). Prefill stays a large part of the time on the CPU (~30% of
copy16's with --speculate off): a copy's prompt holds the text it copies. pllm bench reports the engine's counters; the acceptance rate and
tokens per sequence step are printed from them.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("PLLM_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
SHAREGPT = os.path.join(DATA, "sharegpt", "ShareGPT_V3_filtered_1000.json")
MTBENCH = os.path.join(DATA, "mtbench", "mt_bench_question.jsonl")

TARGETS = {"copy1": 2.0, "copy16": 1.3, "sharegpt64": 0.97}


def copy_workload(n):
    sg = [r["conversations"][0]["value"] for r in json.load(open(SHAREGPT))]
    mt = [json.loads(l) for l in open(MTBENCH) if l.strip()]
    passages = [t for t in sg if 700 <= len(t) <= 1500 and "```" not in t]
    code = [t for t in sg if 300 <= len(t) <= 2000 and re.search(r"^\s*(def |function |class )", t, re.M)]
    out, pi, ci, mi = [], 0, 0, 0
    while len(out) < n:
        kind = len(out) % 3
        if kind == 0:
            t = passages[pi % len(passages)]
            pi += 1
            words = t.split()
            long = sorted({w.strip(".,;:!?\"'()") for w in words if len(w) > 5 and w.isalpha()})
            old = long[len(long) // 2] if long else words[0]
            new = old.upper() if old != old.upper() else old.lower()
            p = f"Original:\n{t}\n\nCopy, with the word '{old}' replaced by '{new}':\n" + " ".join(
                words[:8]).replace(old, new)
            target = t.replace(old, new)
        elif kind == 1:
            qs = [{"id": q["question_id"], "category": q["category"], "question": q["turns"][0]}
                  for q in mt[mi:mi + 3]]
            mi = (mi + 3) % max(1, len(mt) - 3)
            p = ("Compact JSON:\n" + json.dumps(qs, separators=(",", ":")) +
                 "\n\nThe same JSON, pretty-printed with an indent of 2:\n[\n  {")
            target = json.dumps(qs, indent=2)
        else:
            t = code[ci % len(code)]
            ci += 1
            ids = sorted(set(re.findall(r"\b([a-z_][a-z0-9_]{3,})\s*\(", t)))
            a = ids[0] if ids else "value"
            b = a + "_renamed"
            first = t.split("\n")[0]
            p = (f"Code:\n{t}\n\nThe same code with the identifier '{a}' renamed to '{b}':\n" +
                 first.replace(a, b))
            target = t.replace(a, b)
        out.append({"id": f"c{len(out)}", "prompt": p, "target": target})
    return out


def model_args(model):
    """pllm's -m for --model (nothing: pllm's default model)."""
    return ["-m", model] if model else []


def copy_lengths(pllm, targets, tmp, model=None):
    """Tokens of each expected copy (the model's tokenizer): a request's max_tokens, so that its
    output is the copy, the whole of it and not more (pllm bench ignores EOS)."""
    path = os.path.join(tmp, "targets.jsonl")
    with open(path, "w") as f:
        for i, t in enumerate(targets):
            f.write(json.dumps({"id": str(i), "prompt": t}) + "\n")
    p = subprocess.run([pllm, "tokenize", "--counts-only", "--no-total", path] + model_args(model),
                       capture_output=True, text=True)
    os.unlink(path)
    if p.returncode != 0:
        sys.exit(f"spec_bench: pllm tokenize failed ({p.returncode}):\n{p.stderr}")
    return [json.loads(l)["n_tokens"] for l in p.stdout.splitlines() if l.strip()]


def write_copy_workload(pllm, path, tmp, model=None):
    """The 32 copy requests, each with its max_tokens (in model's tokens), as JSONL at path;
    returns the records."""
    work = copy_workload(32)
    lengths = copy_lengths(pllm, [r.pop("target") for r in work], tmp, model)
    with open(path, "w") as f:
        for r, n in zip(work, lengths):
            r["max_tokens"] = n
            f.write(json.dumps(r) + "\n")
    return work


def bench(args, dataset, extra, mode):
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        stats = f.name
    os.unlink(stats)
    cmd = [args.pllm, "bench", "--dataset", dataset, "-t", str(args.threads), "--speculate", mode,
           "--stats-json", stats, "-q"] + model_args(getattr(args, "model", None)) + extra
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    if p.returncode != 0:
        sys.exit(f"spec_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    js = json.load(open(stats))
    os.unlink(stats)
    js["cpu_seconds"] = cpu_s
    return js


def out_tps(js):
    t = js["output_throughput"]
    return t["mean"] if isinstance(t, dict) else t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pllm", default=os.path.join(ROOT, "build", "pllm"))
    ap.add_argument("--model", help="the model (pllm's -m; default: pllm's default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mode", default="auto", choices=["auto", "prompt-lookup"])
    ap.add_argument("--cases", default="copy1,copy16,sharegpt64")
    ap.add_argument("--copy1-n", type=int, default=32, help="copy1's requests, the first N of the 32 (1..32)")
    ap.add_argument("--keep", help="write the copy workload here and keep it")
    args = ap.parse_args()
    if not 1 <= args.copy1_n <= 32:
        sys.exit(f"spec_bench: --copy1-n must be in [1, 32], got {args.copy1_n}")

    if not os.access(args.pllm, os.X_OK):
        sys.exit(f"spec_bench: --pllm: not an executable: {args.pllm} (build it: cmake --build build)")
    if args.model and not os.path.exists(args.model):
        sys.exit(f"spec_bench: --model: no such file or directory: {args.model}")
    tmp = args.keep or tempfile.mkdtemp(prefix="spec_bench")
    os.makedirs(tmp, exist_ok=True)
    copy = os.path.join(tmp, "copy.jsonl")
    write_copy_workload(args.pllm, copy, tmp, args.model)
    cases = {
        "copy1": (copy, ["-n", str(args.copy1_n), "--max-seqs", "1"]),
        "copy16": (copy, ["-n", "32", "--max-seqs", "16"]),
        "sharegpt64": ("sharegpt", ["--dataset-path", SHAREGPT, "-n", "128", "--output-len", "64",
                                    "--max-seqs", "64"]),
    }
    failed = []
    print(f"spec_bench: --speculate {args.mode} vs off, model {os.path.basename(args.model) if args.model else 'the default'}, "
          f"{args.threads} threads, {args.repeat} pairs each; "
          f"copy1: {args.copy1_n} of the 32 copy requests{'' if args.copy1_n == 32 else ' (--copy1-n: a subset, not the target case)'}; "
          f"load average at start {os.getloadavg()[0]:.1f}")
    for name in args.cases.split(","):
        dataset, extra = cases[name]
        offs, ons, last = [], [], None
        cpu = {"off": [], args.mode: []}
        for i in range(args.repeat):
            order = ["off", args.mode] if i % 2 == 0 else [args.mode, "off"]
            for mode in order:
                js = bench(args, dataset, extra, mode)
                (offs if mode == "off" else ons).append(out_tps(js))
                cpu[mode].append(js["total_output_tokens"] / js["cpu_seconds"])
                if mode != "off":
                    last = js
        ratio = statistics.mean(ons) / statistics.mean(offs)
        pairs = [a / b for a, b in zip(ons, offs)]
        c = last.get("counters", {})
        target = TARGETS[name]
        ok = ratio >= target
        if not ok:
            failed.append(name)
        print(f"  {name:11s} off {statistics.mean(offs):7.1f} tok/s, {args.mode} {statistics.mean(ons):7.1f} tok/s: "
              f"ratio {ratio:.2f}x (pairs {min(pairs):.2f}..{max(pairs):.2f}; target >= {target}) "
              f"{'ok' if ok else 'BELOW TARGET'}; per CPU second (the process's, model load included; "
              f"steadier where other jobs share the cores) {statistics.mean(cpu[args.mode]) / statistics.mean(cpu['off']):.2f}x; drafts {c.get('spec_drafted', 0)}, accepted "
              f"{100 * c.get('spec_acceptance_rate', 0):.0f}%, {c.get('tokens_per_seq_step', 0):.2f} tokens per "
              f"sequence step, {c.get('spec_steps', 0)} of {c.get('steps', 0)} steps drafting; load average {os.getloadavg()[0]:.1f}")
    if not args.keep:
        os.unlink(copy)
        os.rmdir(tmp)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
