#!/usr/bin/env python3
"""The model file truncated, or rewritten in place, while `pllm generate` has it mapped.

A copy of the default model is used. Once a few records are written:
  - truncate: the file is cut to half its size. Reading the lost pages would raise SIGBUS;
  - rewrite: 64 KiB in the middle of the tensor data are overwritten (same size).
Checks: pllm stops with a clear error naming the model file (never killed by SIGBUS or any
signal, never exit 0); the output holds only whole lines, and every record in it is identical to
an uninterrupted run's (nothing computed from the damaged weights is written); with the file
restored, --resume completes the run with every id exactly once.
Also: a model truncated before the run is an error at load naming the file, not a crash.
"""
import os
import shutil
import signal
import subprocess

from rel_common import (MODEL, PLLM, RNG, SANITIZE, check, compare_to_reference, describe_exit, finish, log, need_model,
                        read_output, run, sharegpt_prompts, tmpdir, wait_lines, write_jsonl)

need_model()
TMP = tmpdir("rel_model_")
model = os.path.join(TMP, "model.gguf")
shutil.copyfile(MODEL, model)
SIZE = os.path.getsize(model)
N = 16 if SANITIZE else 32  # 16 under the sanitizer build (PLLM_SANITIZE), where pllm is slower
prompts = sharegpt_prompts(N, max_chars=160, offset=500)
inp = write_jsonl(os.path.join(TMP, "in.jsonl"),
                  [{"id": f"m{i}", "prompt": p, "max_tokens": 8} for i, p in enumerate(prompts)])
ARGS = ["generate", inp, "--model", model, "--token-ids", "--quiet", "--max-seqs", "2"]

ref_path = os.path.join(TMP, "ref.jsonl")
rc, _, err = run(ARGS + ["-o", ref_path])
ref, _, _ = read_output(ref_path)
check(rc == 0 and len(ref) == N, f"reference run: rc {rc}: {err[-300:]}")
want = {r["id"]: r for r in ref}


def damage(kind):
    if kind == "truncate":
        os.truncate(model, SIZE // 2)
    else:
        with open(model, "r+b") as f:
            f.seek(SIZE // 2)
            f.write(bytes(RNG.getrandbits(8) for _ in range(65536)))


for kind in ("truncate", "rewrite"):
    shutil.copyfile(MODEL, model)
    out = os.path.join(TMP, f"out_{kind}.jsonl")
    p = subprocess.Popen([PLLM, *ARGS, "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    at = RNG.randint(2, 6)
    if wait_lines(out, at, p, timeout=300):
        damage(kind)
    try:
        err = p.communicate(timeout=300)[1].decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1].decode("utf-8", "replace")
    rc = p.returncode
    recs, torn, bad = read_output(out)
    log(f"{kind} after {at} records: {describe_exit(rc)}, {len(recs)} records; stderr: {err.strip()[-400:]}")
    check(rc != -signal.SIGBUS, f"{kind}: pllm was killed by SIGBUS")
    check(rc > 0, f"{kind}: expected a clear error exit, got {describe_exit(rc)}")
    check("model.gguf" in err and ("truncated" in err or "modified" in err or "changed" in err),
          f"{kind}: the message should name the model file and say it changed: {err[-300:]}")
    check(not torn and not bad, f"{kind}: torn {torn[:60]!r} bad {bad[:1]}")
    wrong = [r["id"] for r in recs if r["id"] not in want or r.get("token_ids") != want[r["id"]].get("token_ids")]
    check(not wrong, f"{kind}: records computed from the damaged file were written: {wrong[:5]}")
    shutil.copyfile(MODEL, model)
    rc2, _, err2 = run(ARGS + ["-o", out, "--resume"])
    check(rc2 == 0, f"{kind}: --resume with the file restored: {describe_exit(rc2)}: {err2[-300:]}")
    recs2, _, _ = read_output(out)
    compare_to_reference(kind, recs2, ref)

# truncated before the run: an error at load
os.truncate(model, SIZE // 3)
rc, _, err = run(ARGS + ["-o", os.path.join(TMP, "never.jsonl")])
log(f"truncated before load: {describe_exit(rc)}: {err.strip()[-300:]}")
check(rc > 0 and "model.gguf" in err and ("truncated" in err or "out of bounds" in err),
      f"a truncated model must fail at load with a message naming it: {describe_exit(rc)}: {err[-300:]}")

finish("rel_model_changed")
