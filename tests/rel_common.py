"""Shared helpers of the reliability fault tests (tests/rel_*.py).

Each test drives the real `pllm` binary ($PLLM_BIN) on the default model and provokes one fault
for real (a full disk, a signal, a truncated model, a KV budget that cannot fit, a million
records). Prompts come from the real data ($PLLM_SHARED_DATA); a random seed picks the fault
points and is printed (set PLLM_REL_SEED to replay one).
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PLLM = os.environ.get("PLLM_BIN", "pllm")
HOME = os.environ.get("PLLM_HOME", os.path.expanduser("~/.cache/pllm"))
MODEL = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DATA = os.environ.get("PLLM_SHARED_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
# Set by scripts/ci-extra.sh for the ASan+UBSan build, where pllm runs several times slower:
# the tests that run many prompts then use fewer (each says how many).
SANITIZE = bool(os.environ.get("PLLM_SANITIZE"))
SEED = int(os.environ.get("PLLM_REL_SEED", str(int(time.time() * 1000) % 1000000)))
RNG = random.Random(SEED)

failures = []


def log(msg):
    print(msg, flush=True)


def check(cond, msg):
    if not cond:
        failures.append(msg)
        log("FAIL: " + msg)
    return cond


def finish(name):
    if failures:
        log(f"{name}: {len(failures)} failure(s) (seed {SEED}; rerun with PLLM_REL_SEED={SEED})")
        sys.exit(1)
    log(f"{name}: all checks passed (seed {SEED})")
    sys.exit(0)


def need_model():
    if not os.path.exists(MODEL):
        log(f"the default model is missing ({MODEL}); run scripts/setup.sh")
        sys.exit(1)


def tmpdir(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("PLLM_TEST_TMP"))


def sharegpt_prompts(n, max_chars=160, offset=0):
    """n short real prompts (first human turns of ShareGPT, cut at a word boundary)."""
    path = os.path.join(DATA, "sharegpt", "ShareGPT_V3_filtered_1000.json")
    entries = json.load(open(path, encoding="utf-8"))
    out = []
    for e in entries[offset:]:
        conv = e.get("conversations") or []
        if not conv:
            continue
        t = conv[0]["value"].strip()
        if len(t) > max_chars:
            t = t[:max_chars].rsplit(" ", 1)[0]
        if t:
            out.append(t)
        if len(out) == n:
            break
    return out


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def run(args, timeout=900, **kw):
    r = subprocess.run([PLLM, *args], capture_output=True, timeout=timeout, **kw)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def read_output(path):
    """(records, torn): every complete line parsed; torn is the text after the last newline, and
    any complete line that is not a JSON object is reported as a failure by the caller."""
    data = open(path, "rb").read() if os.path.exists(path) else b""
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    recs, bad = [], []
    for ln in lines:
        try:
            o = json.loads(ln)
            if not isinstance(o, dict):
                raise ValueError("not an object")
            recs.append(o)
        except ValueError:
            bad.append(ln[:200])
    return recs, torn, bad


def by_id(recs):
    """id -> record, and the ids seen more than once."""
    out, dup = {}, []
    for r in recs:
        k = json.dumps(r.get("id"))
        if k in out:
            dup.append(k)
        out[k] = r
    return out, dup


def compare_to_reference(label, recs, ref):
    """The records must be exactly the reference's ids, each once, with the same text and
    token ids (greedy: deterministic whatever the batch composition)."""
    got, dup = by_id(recs)
    want, _ = by_id(ref)
    check(not dup, f"{label}: ids written more than once: {dup[:10]}")
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    check(not missing, f"{label}: ids missing: {missing[:10]}")
    check(not extra, f"{label}: unexpected ids: {extra[:10]}")
    diff = [k for k in want if k in got and (got[k].get("text") != want[k].get("text")
                                             or got[k].get("token_ids") != want[k].get("token_ids")
                                             or got[k].get("finish_reason") != want[k].get("finish_reason"))]
    check(not diff, f"{label}: {len(diff)} records differ from the uninterrupted run, e.g. "
                    f"{[(k, got[k].get('text'), want[k].get('text')) for k in diff[:2]]}")
    return not dup and not missing and not extra and not diff


def wait_lines(path, n, proc, timeout, poll=0.02):
    """Wait until path holds at least n complete lines (or the process ended), looking every
    poll seconds."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            with open(path, "rb") as f:
                if f.read().count(b"\n") >= n:
                    return True
        except FileNotFoundError:
            pass
        time.sleep(poll)
    return False


def describe_exit(rc):
    if rc is None:
        return "still running"
    if rc < 0:
        return f"killed by {signal.Signals(-rc).name}"
    return f"exit {rc}"
