#!/usr/bin/env python3
"""Disk full while `pllm generate` writes its output.

Two real faults:
  - ENOSPC: the output goes to a tmpfs of 8 KiB, one page of it for the run record (mounted in a private mount namespace:
    `unshare -m` as root, else `unshare -rm` in a user namespace; skipped only if neither works);
  - EFBIG: a file size limit (RLIMIT_FSIZE, as `ulimit -f` sets) of 4 KiB, with the default
    SIGXFSZ disposition (pllm must not die of the signal).
  - EFBIG again, the output compressed (-o out.jsonl.zst): the stream is cut where the disk
    filled (its last frame has no end mark), and what decompresses from it must be whole lines.
Checks, for each: pllm stops with a clear error naming the output file and the cause (not a
signal, not exit 0); the file holds only whole JSON lines (no half-written line); those records
are identical to an uninterrupted run's; the same command with --resume, once there is space,
completes the run with every id exactly once (the output copied elsewhere with its run record,
OUT.pllm.json, which --resume checks).
"""
import os
import resource
import shutil
import subprocess

from rel_common import (PLLM, check, compare_to_reference, describe_exit, finish, log, need_model, read_output,
                        run, sharegpt_prompts, tmpdir, write_jsonl)

need_model()
TMP = tmpdir("rel_diskfull_")
N = 40
prompts = sharegpt_prompts(N, max_chars=120, offset=300)
inp = write_jsonl(os.path.join(TMP, "in.jsonl"),
                  [{"id": f"d{i}", "prompt": p, "max_tokens": 6} for i, p in enumerate(prompts)])
ARGS = ["generate", inp, "--token-ids", "--echo", "--quiet", "--max-seqs", "8"]
LIMIT = 4096

ref_path = os.path.join(TMP, "ref.jsonl")
rc, _, err = run(ARGS + ["-o", ref_path])
ref, _, _ = read_output(ref_path)
check(rc == 0 and len(ref) == N, f"reference run: rc {rc}: {err[-300:]}")
ref_bytes = os.path.getsize(ref_path)
log(f"reference: {N} records, {ref_bytes} bytes (the limit is {LIMIT})")
check(ref_bytes > 2 * LIMIT, "the reference output must be larger than the limit for the test to mean anything")


def zst_text(path):
    """What decompresses from a (possibly cut) zstd stream, and zstd's exit code."""
    r = subprocess.run(["zstd", "-dc", path], capture_output=True)
    return r.stdout, r.returncode


def read_any(path):
    """read_output for a plain or a .zst output file."""
    if not path.endswith(".zst"):
        return read_output(path)
    plain = path[:-4] + ".decompressed"
    with open(plain, "wb") as f:
        f.write(zst_text(path)[0] if os.path.exists(path) else b"")
    return read_output(plain)


def after_fault(label, rc, err, out, shown_name):
    log(f"{label}: {describe_exit(rc)}; stderr: {err.strip()[-300:]}")
    check(rc > 0, f"{label}: expected an error exit, got {describe_exit(rc)}")
    check(shown_name in err and ("--resume" in err), f"{label}: the message should name the file and say --resume: {err[-300:]}")
    recs, torn, bad = read_any(out)
    check(not bad, f"{label}: complete lines that are not JSON records: {bad[:1]}")
    check(not torn, f"{label}: a half-written line was left at the end ({len(torn)} bytes: {torn[:60]!r}...)")
    check(len(recs) > 0, f"{label}: no record was written before the disk filled")
    got = {r["id"]: r for r in recs}
    want = {r["id"]: r for r in ref}
    check(all(got[k].get("text") == want[k].get("text") for k in got if k in want),
          f"{label}: the records written before the fault differ from the reference")
    log(f"{label}: {len(recs)} whole records kept, torn tail {len(torn)} bytes")
    # make room (copy the file to a normal directory) and resume
    roomy = os.path.join(TMP, f"{label}_resumed.jsonl" + (".zst" if out.endswith(".zst") else ""))
    shutil.copyfile(out, roomy)
    shutil.copyfile(out + ".pllm.json", roomy + ".pllm.json")  # the run record goes with it
    rc2, _, err2 = run(ARGS + ["-o", roomy, "--resume"])
    check(rc2 == 0, f"{label}: --resume with space again: {describe_exit(rc2)}: {err2[-300:]}")
    if roomy.endswith(".zst"):
        check(zst_text(roomy)[1] == 0, f"{label}: after resume the .zst file does not decompress cleanly")
    recs2, torn2, bad2 = read_any(roomy)
    check(not torn2 and not bad2, f"{label}: after resume: torn {torn2[:60]!r} bad {bad2[:1]}")
    compare_to_reference(label, recs2, ref)


# 1. ENOSPC on a tiny tmpfs in a private mount namespace
mnt = os.path.join(TMP, "mnt")
os.makedirs(mnt)
saved = os.path.join(TMP, "enospc_out.jsonl")
# one page more than the limit: the run record (out.jsonl.pllm.json, written before the first
# line) takes a page of its own on tmpfs
script = (f'mount -t tmpfs -o size={2 * LIMIT} tmpfs "$1" || exit 97; '
          f'"$2" "${{@:4}}" -o "$1/out.jsonl"; rc=$?; cp "$1/out.jsonl" "$3" 2>/dev/null; '
          f'cp "$1/out.jsonl.pllm.json" "$3.pllm.json" 2>/dev/null; exit $rc')
done = False
for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
    if shutil.which("unshare") is None:
        break
    r = subprocess.run([*prefix, "bash", "-c", script, "x", mnt, PLLM, saved, *ARGS], capture_output=True)
    if r.returncode == 97 or (r.returncode != 0 and b"unshare" in r.stderr[:200]):
        log(f"tmpfs through {' '.join(prefix)}: cannot mount ({r.stderr.decode()[:200].strip()})")
        continue
    err = r.stderr.decode("utf-8", "replace")
    # the message names the path inside the namespace; compare by base name
    after_fault("ENOSPC", r.returncode, err, saved, "out.jsonl")
    check("No space left on device" in err, f"ENOSPC: the cause should be in the message: {err[-300:]}")
    done = True
    break
if not done:
    log("ENOSPC: SKIPPED: no way to mount a small tmpfs here (not root, no user namespaces)")

# 2. EFBIG: a file size limit, SIGXFSZ left at its default (which ends a process)
out = os.path.join(TMP, "efbig_out.jsonl")


def limit_fsize():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


r = subprocess.run([PLLM, *ARGS, "-o", out], capture_output=True, preexec_fn=limit_fsize)
err = r.stderr.decode("utf-8", "replace")
after_fault("EFBIG", r.returncode, err, out, "efbig_out.jsonl")
check("File too large" in err, f"EFBIG: the cause should be in the message: {err[-300:]}")

# 3. EFBIG with a compressed output: the zstd stream is cut where the limit hit (a limit of 1 KiB:
# compression shrinks these records several times, so that is still reached mid-run).
zout = os.path.join(TMP, "efbig_out.jsonl.zst")
r = subprocess.run([PLLM, *ARGS, "-o", zout], capture_output=True,
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)))
err = r.stderr.decode("utf-8", "replace")
after_fault("EFBIG .zst", r.returncode, err, zout, "efbig_out.jsonl.zst")
check("File too large" in err, f"EFBIG .zst: the cause should be in the message: {err[-300:]}")

finish("rel_disk_full")
