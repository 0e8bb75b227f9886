#!/usr/bin/env python3
"""A million input records of random sizes through `pllm generate`: memory stays flat.

The input (generated here, deterministic per seed) mixes what a large real job meets: mostly
records that are rejected (invalid JSON, unknown fields, wrong types, empty prompts, prompts
too long for the context), a small share of tiny valid prompts (--max-tokens 1), and a few
large records (100 KB - 2 MB lines). Sizes are drawn log-uniformly.

Checks:
  - exactly one output line per input record: records carry the id "r<index>", and lines that
    are not valid JSON get their line number as id (an integer), so every input line maps to
    exactly one key;
  - peak RSS of the 1,000,000-record run is within 32 MB of a 50,000-record run of the same
    mix (memory does not grow with the input), and RSS sampled during the run does not trend
    upward (the maximum over the last half is within 16 MB of the maximum over the first
    half). Both figures are printed.
The KV cache is fixed at 64 MB (--kv-cache-mb): a cache is a budget that fills up as blocks are
first used (the free queue hands out never-used blocks before reusing cached ones), so with the
default budget (up to 4 GB) RSS would climb until the cache is touched whole, whatever the input.
Even so, what a 64 MB cache and the step's activation scratch (sized for --max-batched-tokens) cost
is first paid when a burst of valid prompts fills them at once, which in the random mix may happen
late in one run and never in another (seed 223775 had one at record 516,000: +79 MB). So every
input starts with such a burst (WARMUP distinct valid prompts of 24 words, more KV blocks than
the cache holds), and both runs pay that fixed cost up front; growth after it is the input's.
PLLM_REL_RECORDS overrides the count (default 1,000,000).
Under the sanitizer build (PLLM_SANITIZE set, scripts/ci-extra.sh) the run is 100,000 records and
the RSS checks are left out: ASan keeps freed memory in a quarantine (256 MB) and adds shadow
memory, so RSS there measures the sanitizer, not pllm; the run still checks one line per record,
and LeakSanitizer checks that nothing leaks.
"""
import json
import os
import random
import subprocess
import threading
import time

from rel_common import PLLM, SANITIZE, SEED, check, describe_exit, finish, log, need_model, tmpdir

need_model()
TMP = tmpdir("rel_million_")
N = int(os.environ.get("PLLM_REL_RECORDS", "100000" if SANITIZE else "1000000"))
WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up").split()


WARMUP = 150


def make_input(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            u = rng.random()
            if i < WARMUP:  # the burst that fills the KV cache and the batch scratch (see above)
                rec = {"id": f"r{i}", "prompt": " ".join(rng.choice(WORDS) for _ in range(24))}
            elif u < 0.002:  # tiny valid prompt
                rec = {"id": f"r{i}", "prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))}
            elif u < 0.0022:  # large record: a prompt far past the context (rejected by the engine)
                size = int(10 ** rng.uniform(5, 6.3))
                rec = {"id": f"r{i}", "prompt": ("lorem ipsum " * (size // 12 + 1))[:size]}
            elif u < 0.0024:  # large invalid line
                f.write('{"id": "r%d", "prompt": "%s' % (i, "x" * int(10 ** rng.uniform(5, 6.3))) + "\n")
                continue
            else:
                k = rng.randrange(6)
                pad = "y" * int(10 ** rng.uniform(0, 3))
                if k == 0:
                    f.write('{"id": "r%d", "prompt": %s\n' % (i, json.dumps(pad)))  # invalid JSON
                    continue
                rid = f"r{i}"
                rec = [{"id": rid, "prompt": pad, "temprature": 1},              # unknown field
                       {"id": rid, "prompt": ""},                                 # empty prompt
                       {"id": rid, "prompt": 5},                                  # wrong type
                       {"id": rid, "messages": []},                               # empty messages
                       {"id": rid, "prompt": pad, "max_tokens": -int(len(pad))}][k - 1]  # out of range
            f.write(json.dumps(rec) + "\n")


def run_and_measure(path, n):
    """Run pllm on path, count/verify output lines as they stream, sample RSS. Returns (rc,
    peak RSS MB from the kernel, samples [(t, rss MB)], seconds, error)."""
    p = subprocess.Popen([PLLM, "generate", path, "--quiet", "--max-tokens", "1", "--max-seqs", "128",
                          "--kv-cache-mb", "64"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples, stop = [], threading.Event()

    def sample():
        t0 = time.time()
        while not stop.is_set():
            try:
                for line in open(f"/proc/{p.pid}/status"):
                    if line.startswith("VmRSS:"):
                        samples.append((time.time() - t0, int(line.split()[1]) / 1024))
            except OSError:
                pass
            stop.wait(0.2)

    errbuf = []
    th = threading.Thread(target=sample, daemon=True)
    te = threading.Thread(target=lambda: errbuf.append(p.stderr.read()), daemon=True)
    th.start()
    te.start()
    seen = bytearray(n + 1)
    n_lines = dup = bad = 0
    t0 = time.time()
    for line in p.stdout:
        n_lines += 1
        try:
            rid = json.loads(line)["id"]
            # "r<index>", or the line number (1-based) of a line that is not JSON
            i = int(rid[1:]) if isinstance(rid, str) and rid.startswith("r") else rid - 1 if isinstance(rid, int) else -1
            if not 0 <= i < n:
                bad += 1
            elif seen[i]:
                dup += 1
            else:
                seen[i] = 1
        except (ValueError, KeyError):
            bad += 1
    _, status, ru = os.wait4(p.pid, 0)
    secs = time.time() - t0
    stop.set()
    th.join()
    te.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    missing = n - sum(seen)
    err = (errbuf[0] if errbuf else b"").decode("utf-8", "replace")
    return p.returncode, ru.ru_maxrss / 1024, samples, secs, (n_lines, dup, bad, missing), err


results = {}
for n in ((N,) if SANITIZE else (50000, N)):
    path = os.path.join(TMP, f"in_{n}.jsonl")
    t0 = time.time()
    make_input(path, n, SEED)
    size_mb = os.path.getsize(path) / 1e6
    rc, peak, samples, secs, (n_lines, dup, bad, missing), err = run_and_measure(path, n)
    os.remove(path)
    log(f"{n} records ({size_mb:.0f} MB of input, made in {time.time() - t0 - secs:.0f} s): {describe_exit(rc)} in "
        f"{secs:.1f} s, peak RSS {peak:.1f} MB, {n_lines} output lines")
    check(rc in (0, 1), f"{n}: {describe_exit(rc)}: {err[-300:]}")
    check(n_lines == n and dup == 0 and bad == 0 and missing == 0,
          f"{n}: one output line per record: {n_lines} lines, {dup} repeated, {bad} unreadable, {missing} ids missing")
    if samples:
        # after a warm-up (the first 20%: weights paged in, the KV cache's blocks first used),
        # the maximum over the last 40% of the run must not exceed that over 20%-60%
        end = samples[-1][0]
        first = max((r for t, r in samples if 0.2 * end < t <= 0.6 * end), default=0)
        second = max((r for t, r in samples if t > 0.6 * end), default=0)
        curve = " ".join(f"{r:.0f}" for _, r in samples[:: max(1, len(samples) // 12)])
        log(f"{n}: RSS MB over the run: {curve}; max over 20-60% {first:.1f}, over 60-100% {second:.1f}")
        if n == N and not SANITIZE:
            check(second <= first + 16, f"{n}: RSS grows during the run: {first:.1f} MB -> {second:.1f} MB")
    results[n] = peak

if N > 50000 and not SANITIZE:
    growth = results[N] - results[50000]
    log(f"peak RSS: {results[50000]:.1f} MB for 50,000 records, {results[N]:.1f} MB for {N:,}: {growth:+.1f} MB")
    check(growth <= 32, f"peak RSS grows with the input: {growth:+.1f} MB")

finish("rel_million")
