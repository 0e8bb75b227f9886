#!/usr/bin/env python3
"""The CPU backend on the real default model against the numpy reference (label "model").

20 ShareGPT prompts ($PLLM_SHARED_DATA/sharegpt/ShareGPT_V3_filtered_1000.json, first human
turn, tokenized with the Hugging Face `tokenizers` reference of tests/pyref/hf_tok.py and
truncated to 64 tokens) run through $PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
(PLLM_HOME defaults to ~/.cache/pllm) with real batch plans (tests/cpu_logits_tool.c):
  run "every-position": all 20 sequences in each step, one token each, logits of every position;
  run "chunked": prefill in chunks under a 96-token budget (4 sequences per step), logits at
      every 8th position and the last, then 8 greedy tokens each.
Reference: tests/pyref/ref_forward.py in float64 on the weights dequantized by the gguf package.

Reported for every position: relative error ||a - b|| / ||b|| of the logits row, and whether
the argmax agrees. Bounds: relative error < 1e-4 per row (the CPU path is float32 math on the
same dequantized weights; over 30 layers float32 rounding gives ~1e-6, measured max 3.4e-6); the argmax must
agree wherever the reference's top two logits differ by more than 1e-3 * max |logit| (closer
than that, float32 rounding may legitimately flip it; such positions are counted and listed).
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "pyref"))
from ref_forward import RefModel  # noqa: E402
import hf_tok  # noqa: E402

# Under the ASan+UBSan build (PLLM_SANITIZE set by scripts/ci-extra.sh; pllm is several times
# slower there and the sanitizers, not the numerics, are what that run checks): 6 prompts of at
# most 32 tokens, the same plans and bounds.
SANITIZE = bool(os.environ.get("PLLM_SANITIZE"))
N_PROMPTS = 6 if SANITIZE else 20
MAX_TOKENS = 32 if SANITIZE else 64
N_GEN = 8
TOL = 1e-4
TIE = 1e-3


def model_path():
    home = os.environ.get("PLLM_HOME") or os.path.expanduser("~/.cache/pllm")
    return os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run_tool(tmp, name, spec):
    build = os.environ.get("PLLM_BUILD")
    if not build:
        sys.exit("PLLM_BUILD is not set (run through ctest)")
    spec_path = os.path.join(tmp, name + ".json")
    spec["out"] = os.path.join(tmp, name + ".npy")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    t0 = time.time()
    p = subprocess.run([os.path.join(build, "tests", "cpu_logits_tool"), spec_path], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr)
        raise RuntimeError(f"cpu_logits_tool failed on {spec_path}")
    info = json.loads(p.stdout)
    print(f"run {name}: {info['steps']} steps, {info['kernels']} kernels, {info['threads']} threads, {time.time() - t0:.1f} s")
    return info, np.load(spec["out"], mmap_mode="r"), spec["out"]


def main():
    path = model_path()
    if not os.path.exists(path):
        print(f"FAIL: the default model is missing: {path}\n(run scripts/setup.sh, or set PLLM_HOME)")
        return 1
    data = os.path.join(os.environ.get("PLLM_SHARED_DATA", os.path.join(HERE, "..", "..", "shared", "data")),
                        "sharegpt", "ShareGPT_V3_filtered_1000.json")
    with open(data) as f:
        convs = json.load(f)
    tok = hf_tok.load(path)
    prompts = []
    for c in convs:
        turns = [t["value"] for t in c["conversations"] if t["from"] == "human"]
        if not turns:
            continue
        ids = tok.encode(turns[0], add_special=False, parse_special=False)[:MAX_TOKENS]
        if len(ids) >= 2:
            prompts.append(ids)
        if len(prompts) == N_PROMPTS:
            break
    print(f"{len(prompts)} prompts, lengths {[len(p) for p in prompts]}")

    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "cpu_model_ref")
    os.makedirs(tmp, exist_ok=True)
    runs = {
        "every-position": dict(model=path, threads=2, block_size=16, max_step_tokens=N_PROMPTS, max_step_seqs=N_PROMPTS,
                               seqs=[dict(tokens=p, logits_at=list(range(len(p)))) for p in prompts]),
        "chunked": dict(model=path, threads=2, block_size=16, max_step_tokens=96, max_step_seqs=4, shuffle_seed=7,
                        seqs=[dict(tokens=p, logits_at=sorted(set(range(7, len(p), 8)) | {len(p) - 1}), generate=N_GEN)
                              for p in prompts]),
    }
    # the chunked run first: its sequences (prompt + generated) extend the prompts, so one
    # batched reference pass over them gives the reference for both runs (attention is causal)
    results = {name: run_tool(tmp, name, spec) for name, spec in reversed(list(runs.items()))}
    t0 = time.time()
    ref = RefModel(path)
    full = [p + js["generated"][:-1] for p, js in zip(prompts, results["chunked"][0]["seqs"])]
    ref_logits = ref.forward_many(full)
    print(f"reference: weights dequantized and {sum(map(len, full))} positions computed in {time.time() - t0:.1f} s")

    failures = []
    for name in runs:
        info, rows, npy = results[name]
        errs, agree, ties, r = [], 0, [], 0
        for si, (p, js) in enumerate(zip(prompts, info["seqs"])):
            gen = js["generated"]
            if gen:
                assert gen[:-1] == full[si][len(p):]
            want = ref_logits[si]
            line = []
            targets = [(pos, None) for pos in js["positions"]] + [(len(p) - 1 + g, gen[g]) for g in range(len(gen))]
            for pos, sampled in targets:
                a, b = np.asarray(rows[r], dtype=np.float64), want[pos]
                r += 1
                e = float(np.linalg.norm(a - b) / np.linalg.norm(b))
                errs.append(e)
                top2 = np.partition(b, -2)[-2:]
                close = top2[1] - top2[0] <= TIE * np.abs(b).max()
                same = int(np.argmax(a)) == int(np.argmax(b))
                if sampled is not None and sampled != int(np.argmax(a)):
                    failures.append(f"{name} seq {si} pos {pos}: greedy token {sampled} is not the argmax {int(np.argmax(a))}")
                agree += same
                if close:
                    ties.append((si, pos))
                elif not same:
                    failures.append(f"{name} seq {si} pos {pos}: argmax {int(np.argmax(a))} != reference {int(np.argmax(b))}")
                if e >= TOL:
                    failures.append(f"{name} seq {si} pos {pos}: rel err {e:.2e} >= {TOL:.0e}")
                line.append(f"{pos}:{e:.1e}{'' if same else '!'}")
            print(f"  {name} seq {si:2d} (len {len(p):2d}, gen {gen}): " + " ".join(line))
        print(f"{name}: {len(errs)} positions, rel err max {max(errs):.2e} mean {np.mean(errs):.2e} median "
              f"{np.median(errs):.2e}; top-1 agreement {agree}/{len(errs)}; near-ties in the reference {len(ties)} {ties}")
        del rows
        os.remove(npy)

    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures[:50]))
        return 1
    print("cpu_model_ref: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
