#!/usr/bin/env python3
"""SIGKILL while writing a zstd-compressed output (-o out.jsonl.zst), then --resume.

The writer flushes each line as its own zstd block, so a killed run leaves a stream whose last
frame has no end mark. --resume must read the whole records that are in it, and append so that
the file decompresses to every record exactly once; the union must equal an uninterrupted greedy
run. (Also: SIGTERM, where the writer can close the frame.)
"""
import json
import os
import signal
import subprocess
import time

from rel_common import (PLLM, RNG, SEED, check, compare_to_reference, describe_exit, finish, log, need_model,
                        read_output, run, sharegpt_prompts, tmpdir, wait_lines, write_jsonl)

need_model()
TMP = tmpdir("rel_zst_")
N = 16
prompts = sharegpt_prompts(N, max_chars=160, offset=100)
inp = write_jsonl(os.path.join(TMP, "in.jsonl"),
                  [{"id": i, "prompt": p, "max_tokens": 3 + i % 5} for i, p in enumerate(prompts)])
ARGS = ["generate", inp, "--token-ids", "--quiet", "--max-seqs", "2"]
log(f"seed {SEED}")

ref_path = os.path.join(TMP, "ref.jsonl")
rc, _, err = run(ARGS + ["-o", ref_path])
ref, _, _ = read_output(ref_path)
check(rc == 0 and len(ref) == N, f"reference run: rc {rc}: {err[-300:]}")


def zst_records(path):
    r = subprocess.run(["zstd", "-dc", path], capture_output=True)
    text = r.stdout.decode("utf-8", "replace")
    recs = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    return r.returncode, recs, r.stderr.decode()


for label, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
    out = os.path.join(TMP, f"out_{label}.jsonl.zst")
    p = subprocess.Popen([PLLM, *ARGS, "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # the compressed file grows per line; wait until it holds a few records' worth of bytes
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 300:
        if os.path.exists(out) and os.path.getsize(out) > 200 * RNG.randint(2, 5):
            break
        time.sleep(0.02)
    if p.poll() is None:
        p.send_signal(sig)
    err = p.communicate()[1].decode("utf-8", "replace")
    zrc, recs, zerr = zst_records(out)
    log(f"{label}: {describe_exit(p.returncode)}; the file decompresses with rc {zrc} to {len(recs)} records")
    resumed = False
    for k in range(3):
        rc, _, err = run(ARGS + ["-o", out, "--resume"])
        if rc == 0:
            resumed = True
            break
        log(f"  resume {k + 1}: {describe_exit(rc)}: {err[-300:]}")
    check(resumed, f"{label}: --resume of a .zst output did not complete: {err[-300:]}")
    zrc, recs, zerr = zst_records(out)
    check(zrc == 0, f"{label}: after resume the .zst file does not decompress cleanly: {zerr[-200:]}")
    compare_to_reference(f"{label} .zst", recs, ref)

finish("rel_resume_zst")
