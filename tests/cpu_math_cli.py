#!/usr/bin/env python3
"""cpu_math_cli: the CPU backend's two numerics on the real default model, through `pllm generate`.

- The default (--cpu-math auto) multiplies quantized weights with int8 activations. Its greedy
  tokens must be IDENTICAL when the optimized integer matmuls and quantizer are replaced by the
  scalar integer reference (PLLM_CPU_QMM=scalar), for every kernel table this machine has with
  an integer path: the optimizations change no token. ShareGPT prompts, 24 greedy tokens each.
  Tables differ from one another in the float summation order of attention and norms, so
  across tables the tokens may differ after a near tie; that agreement is printed, not required.
- --cpu-math f32 is float32 math throughout (the exact path the numpy references check); it
  answers "What is the capital of France?" with Paris (under int8 activations the first token is
  a near tie, 0.08 nats, and flips).
- The run says which math it used; a bad value is refused with exit 2 before any work.
"""
import json
import os
import subprocess

from rel_common import SANITIZE, check, finish, log, need_model, run, sharegpt_prompts, tmpdir, write_jsonl

need_model()
TMP = tmpdir("cpu_math_")
# under the sanitizer build (PLLM_SANITIZE, scripts/ci-extra.sh), where pllm is ~8x slower: 2 prompts x 8 tokens
N_PROMPTS, N_TOKENS = (2, 8) if SANITIZE else (6, 24)
prompts = sharegpt_prompts(N_PROMPTS, max_chars=200)
inp = write_jsonl(os.path.join(TMP, "in.jsonl"),
                  [{"id": f"p{i}", "prompt": p, "max_tokens": N_TOKENS, "ignore_eos": True} for i, p in enumerate(prompts)])


def tokens(isa, extra=(), qmm=None):
    env = dict(os.environ)
    env.pop("PLLM_CPU_MATH", None)
    env.pop("PLLM_CPU_QMM", None)
    if isa:
        env["PLLM_CPU_ISA"] = isa
    if qmm:
        env["PLLM_CPU_QMM"] = qmm
    rc, out, err = run(["generate", inp, "--token-ids", "--temperature", "0", *extra], env=env)
    check(rc == 0, f"isa {isa}: exit {rc}: {err[-500:]}")
    recs = {r["id"]: r["token_ids"] for r in (json.loads(l) for l in out.splitlines() if l.strip())}
    kern = err.split("on cpu (")[-1].split(",")[0] if "on cpu (" in err else "?"
    return recs, err, kern


def agreement(a, b):
    return sum(x == y for k in a for x, y in zip(a[k], b.get(k, []))), sum(len(v) for v in a.values())


best = None
for isa in ["avx2", "avx512vnni"]:
    got, err, kern = tokens(isa)
    if "int8 math" not in err:
        log(f"{isa}: this machine's table ({kern}) has no integer kernels: float32 math, not compared")
        continue
    ref, err2, kern2 = tokens(isa, qmm="scalar")
    check(kern2 == kern and "int8 math" in err2, f"{isa} with PLLM_CPU_QMM=scalar runs {kern2}: {err2[-300:]}")
    same = sum(got.get(k) == v for k, v in ref.items())
    log(f"int8 math, {kern}: {same}/{len(ref)} prompts' greedy tokens identical with the scalar integer matmuls")
    check(same == len(ref) and len(ref) == len(prompts), f"{kern}: greedy tokens differ from the scalar integer reference")
    if best is not None:
        log(f"across tables ({best[1]} vs {kern}, float ops in another order): {'/'.join(map(str, agreement(best[0], got)))} tokens equal")
    best = (got, kern)
check(best is not None, "no kernel table with an integer path on this machine (expected avx2 at least)")

f32, err, _ = tokens(None, ["--cpu-math", "f32"])
check("f32 math" in err, f"--cpu-math f32 names its math: {err[-400:]}")
log(f"int8 ({best[1]}) vs f32 math: {'/'.join(map(str, agreement(best[0], f32)))} greedy tokens equal (position by position)")

chat = write_jsonl(os.path.join(TMP, "fr.jsonl"),
                   [{"id": "fr", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 12}])
env = {k: v for k, v in os.environ.items() if k != "PLLM_CPU_MATH"}
rc, out, err = run(["generate", chat, "--quiet", "--temperature", "0", "--cpu-math", "f32"], env=env)
text = json.loads(out.splitlines()[0])["text"] if rc == 0 and out.strip() else ""
log(f"f32: {text!r}")
check("Paris" in text, f"--cpu-math f32 answers Paris: {text!r} {err[-300:]}")

rc, out, err = run(["generate", chat, "--cpu-math", "int4"], env=env)
check(rc == 2 and "--cpu-math 'int4'" in err, f"bad --cpu-math: exit {rc}: {err[-300:]}")
finish("cpu_math_cli")
