#!/usr/bin/env python3
"""CPU backend forward pass against the independent numpy reference (tests/pyref/ref_forward.py),
on tiny random GGUF models of 4 shapes x 8 weight dtypes (tests/gen_models.py), through real
batch plans (tests/cpu_logits_tool.c). Also: batch/chunk/thread invariance, and invalid plans.

Tolerances (relative error ||a - b|| / ||b|| of a logits row against the float64 reference run
on the same gguf-dequantized weights):
  - f32 KV cache, every weight dtype: 1e-4. The CPU kernels expand quantized blocks to float32
    in registers and compute in float32 (activations are never quantized), so the only
    differences from the reference are float32 rounding and summation order: ~1e-6 here.
  - f16 KV cache: 5e-3. K and V are rounded to half precision (relative error up to 2^-11 =
    4.9e-4 per element) before attention; a few layers of that stay well under 5e-3.
Every kernel table the machine runs (scalar, AVX2, AVX-512) is checked this way on the mixed run.
Invariance: the last-prompt-position and generation logits of the same prompts run one at a
time (1 thread), all in one batch (2 threads) and in 5-token chunks (3 threads) must be bitwise
identical, and so must the greedy tokens.
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "pyref"))
import gen_models  # noqa: E402
from ref_forward import RefModel  # noqa: E402

TOL_F32 = 1e-4
TOL_F16KV = 5e-3
PROMPT_LENS = [1, 9, 23, 41]
N_GEN = 4


def tool_path():
    build = os.environ.get("PLLM_BUILD")
    if not build:
        sys.exit("PLLM_BUILD is not set (run through ctest)")
    return os.path.join(build, "tests", "cpu_logits_tool")


def run_tool(tmp, name, spec):
    spec_path = os.path.join(tmp, name + ".json")
    spec["out"] = os.path.join(tmp, name + ".npy")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    p = subprocess.run([tool_path(), spec_path], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr)
        raise RuntimeError(f"cpu_logits_tool failed on {spec_path} (exit {p.returncode})")
    return json.loads(p.stdout), np.load(spec["out"])


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "cpu_forward_ref")
    os.makedirs(tmp, exist_ok=True)
    models = gen_models.generate(os.path.join(tmp, "models"))
    rng = np.random.default_rng(20240601)
    failures = []
    worst = {}

    for m in models:
        tag = f"{m['shape']}-{m['dtype']}"
        ref = RefModel(m["path"])
        V = ref.n_vocab
        prompts = [rng.integers(0, V, size=n).tolist() for n in PROMPT_LENS]
        ref_prompt = [ref.forward(p) for p in prompts]
        ref_cache = {}

        def ref_full(toks):
            key = tuple(toks)
            if key not in ref_cache:
                ref_cache[key] = ref.forward(toks)
            return ref_cache[key]
        # some positions of each prompt (always the last), for the mixed-chunk runs
        sparse = [sorted(set(rng.choice(len(p), size=max(1, len(p) // 4), replace=False).tolist()) | {len(p) - 1})
                  for p in prompts]
        base = dict(model=m["path"], kv_dtype="f32")
        runs = {
            # every position wanted: each chunk is one token (decode path), 3 sequences per step
            "decode": dict(base, threads=2, block_size=7, max_step_tokens=24, max_step_seqs=3,
                           seqs=[dict(tokens=p, logits_at=list(range(len(p))), generate=N_GEN) for p in prompts]),
            # sparse positions: prefill chunks of many lengths, 4 sequences per step, budget 16
            "mixed": dict(base, threads=2, block_size=5, max_step_tokens=16, max_step_seqs=4, shuffle_seed=3,
                          seqs=[dict(tokens=p, logits_at=s, generate=N_GEN) for p, s in zip(prompts, sparse)]),
            "mixed-f16kv": dict(base, kv_dtype="f16", threads=2, block_size=5, max_step_tokens=16, max_step_seqs=4,
                                seqs=[dict(tokens=p, logits_at=s, generate=N_GEN) for p, s in zip(prompts, sparse)]),
            # the same with the other kernel tables (where this machine has them)
            "mixed-avx2": dict(base, isa="avx2", threads=2, block_size=5, max_step_tokens=16, max_step_seqs=4,
                               shuffle_seed=3, seqs=[dict(tokens=p, logits_at=s, generate=N_GEN) for p, s in zip(prompts, sparse)]),
            "mixed-scalar": dict(base, isa="scalar", threads=2, block_size=5, max_step_tokens=16, max_step_seqs=4,
                                 shuffle_seed=3, seqs=[dict(tokens=p, logits_at=s, generate=N_GEN) for p, s in zip(prompts, sparse)]),
            # invariance trio: same block size, different batching and thread counts
            "one-at-a-time": dict(base, threads=1, block_size=7, max_step_tokens=4096, max_step_seqs=1,
                                  order="sequential", shuffle_seed=11,
                                  seqs=[dict(tokens=p, logits_at=[len(p) - 1], generate=N_GEN) for p in prompts]),
            "one-batch": dict(base, threads=2, block_size=7, max_step_tokens=4096, max_step_seqs=16, shuffle_seed=12,
                              seqs=[dict(tokens=p, logits_at=[len(p) - 1], generate=N_GEN) for p in prompts]),
            "chunked": dict(base, threads=3, block_size=7, max_step_tokens=5, max_step_seqs=2, shuffle_seed=13,
                            seqs=[dict(tokens=p, logits_at=[len(p) - 1], generate=N_GEN) for p in prompts]),
        }
        results = {name: run_tool(tmp, f"{tag}-{name}", spec) for name, spec in runs.items()}
        for name, spec in runs.items():
            if "isa" in spec and results[name][0]["kernels"] != spec["isa"]:
                print(f"{tag:12s} {name}: this machine has no {spec['isa']} kernels; ran {results[name][0]['kernels']}")

        # accuracy against the reference, every row of every run
        for name, (info, rows) in results.items():
            tol = TOL_F16KV if runs[name]["kv_dtype"] == "f16" else TOL_F32
            errs = []
            r = 0
            for si, (p, js) in enumerate(zip(prompts, info["seqs"])):
                gen = js["generated"]
                full = ref_full(p + gen[:-1]) if gen else ref_prompt[si]
                for pos in js["positions"]:
                    errs.append(rel(rows[r], ref_prompt[si][pos]))
                    r += 1
                for g in range(len(gen)):
                    want = full[len(p) - 1 + g]
                    errs.append(rel(rows[r], want))
                    # greedy token = reference argmax unless the reference's top two are within the error
                    top2 = np.sort(want)[-2:]
                    if gen[g] != int(np.argmax(want)) and top2[1] - top2[0] > 1e-3 * np.abs(want).max():
                        failures.append(f"{tag} {name}: seq {si} generated {gen[g]} but the reference argmax is {int(np.argmax(want))}")
                    r += 1
            mx = max(errs)
            worst[(m["dtype"], name)] = max(worst.get((m["dtype"], name), 0), mx)
            status = "ok" if mx < tol else "FAIL"
            print(f"{tag:12s} {name:14s} rows {len(errs):3d}  rel err max {mx:.2e} mean {np.mean(errs):.2e}  "
                  f"(tol {tol:.0e}) {status}  steps {info['steps']} kernels {info['kernels']}")
            print("    per-row rel errors: " + " ".join(f"{e:.1e}" for e in errs))
            if mx >= tol:
                failures.append(f"{tag} {name}: rel err {mx:.2e} >= {tol:.0e}")

        # invariance: bitwise equal rows and identical greedy tokens
        trio = ["one-at-a-time", "one-batch", "chunked"]
        a_info, a_rows = results[trio[0]]
        for other in trio[1:]:
            b_info, b_rows = results[other]
            same_tokens = [s["generated"] for s in a_info["seqs"]] == [s["generated"] for s in b_info["seqs"]]
            max_diff = float(np.abs(a_rows - b_rows).max())
            identical = np.array_equal(a_rows, b_rows)
            print(f"{tag:12s} invariance {trio[0]} vs {other}: rows identical {identical} (max abs diff {max_diff:.1e}), "
                  f"greedy tokens identical {same_tokens}")
            if not identical or not same_tokens:
                failures.append(f"{tag}: {trio[0]} vs {other} differ (max abs diff {max_diff:.1e}, tokens same {same_tokens})")
        # the decode run's prompt-end rows must also equal the batched runs' (same block size 7)
        d_info, d_rows = results["decode"]
        r = 0
        for si, (p, js) in enumerate(zip(prompts, d_info["seqs"])):
            last_row_decode = d_rows[r + len(p) - 1]
            r += len(p) + len(js["generated"])
            if not np.array_equal(last_row_decode, a_rows[si * (1 + N_GEN)]):
                failures.append(f"{tag}: decode-path logits at the last prompt position differ from one-at-a-time prefill (seq {si})")

    # invalid plans fail with a message; copy_blocks; logprobs
    p = subprocess.run([tool_path(), "--check-errors", models[8]["path"]], capture_output=True, text=True)
    print(p.stderr)
    if p.returncode != 0:
        failures.append("cpu_logits_tool --check-errors failed")

    print("worst relative error per weight dtype and run:")
    for (dt, name), e in sorted(worst.items()):
        print(f"  {dt:5s} {name:14s} {e:.2e}")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    print(f"cpu_forward_ref: all checks passed ({len(models)} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
