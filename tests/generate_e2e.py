#!/usr/bin/env python3
"""End-to-end: `pllm generate` on the real default model.

- chat-format factual prompts give sensible greedy answers (the capital of France is Paris);
- a malformed record becomes an error record naming its line and field, and the run goes on
  (exit code 1); --strict stops at it (exit code 3);
- stdin input, .zst input and output give the same records as plain files;
- max_tokens is honoured (finish_reason "length");
- a run killed with SIGTERM, then resumed with --resume, yields exactly the records of an
  uninterrupted run: no id missing, none twice, identical greedy text;
- usage errors exit 2, a missing model exits 3 and says where it looked.

Under the sanitizer build (PLLM_SANITIZE, scripts/ci-extra.sh), where pllm is several times
slower and memory errors, not the numbers, are what the run checks, part 3 runs 16 prompts x 8
tokens instead of 40 x 24 (three runs of it: reference, interrupted, resumed); the interruption
still comes after 4 of them are written, so the same signal, output-flush and resume paths run.
Everything else is unchanged.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PLLM = os.environ["PLLM_BIN"]
HOME = os.environ.get("PLLM_HOME", os.path.expanduser("~/.cache/pllm"))
MODEL = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SANITIZE = bool(os.environ.get("PLLM_SANITIZE"))
N_MANY, MANY_TOKENS, KILL_AFTER = (16, 8, 4) if SANITIZE else (40, 24, 8)
TMP = tempfile.mkdtemp(prefix="gen_e2e_", dir=os.environ.get("PLLM_TEST_TMP"))
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg)


def run(args, stdin=None, timeout=600):
    r = subprocess.run([PLLM, *args], input=stdin, capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write(name, lines):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


if not os.path.exists(MODEL):
    print(f"the default model is missing ({MODEL}); run scripts/setup.sh")
    sys.exit(1)

# 1. facts through the chat template, plus a malformed record in the middle
facts = [
    {"id": "france", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24},
    {"id": "germany", "messages": [{"role": "user", "content": "What is the capital of Germany?"}], "max_tokens": 24},
    '{"id": "broken", "prompt": "x", "temprature": 1}',
    {"id": "japan", "messages": [{"role": "user", "content": "What is the capital of Japan?"}], "max_tokens": 24},
    {"id": "short", "prompt": "Once upon a time", "max_tokens": 5},
    "",
    '{"id": "badjson", "prompt": ',
]
path = write("facts.jsonl", facts)
rc, out, err = run(["generate", path, "--quiet"])
recs = {r["id"]: r for r in records(out)}
print("\n".join(json.dumps(r) for r in recs.values()))
check(rc == 1, f"a run with bad records exits 1, got {rc}: {err[-500:]}")
check(set(recs) == {"france", "germany", "broken", "japan", "short", 7}, f"one record per non-blank line: {sorted(map(str, recs))}")
check("Paris" in recs.get("france", {}).get("text", ""), "the capital of France is Paris")
check("Berlin" in recs.get("germany", {}).get("text", ""), "the capital of Germany is Berlin")
check("Tokyo" in recs.get("japan", {}).get("text", ""), "the capital of Japan is Tokyo")
b = recs.get("broken", {})
check(b.get("finish_reason") == "error" and b.get("line") == 3 and "temprature" in b.get("error", ""),
      f"bad field: error record with line 3 naming the field: {b}")
j = recs.get(7, {})
check(j.get("finish_reason") == "error" and "facts.jsonl:7:" in j.get("error", "") and "JSON" in j.get("error", ""),
      f"bad JSON: error record naming line 7: {j}")
s = recs.get("short", {})
check(s.get("finish_reason") == "length" and s.get("completion_tokens") == 5, f"max_tokens 5 honoured: {s}")
for r in recs.values():
    if r.get("finish_reason") != "error":
        check(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 and r["latency_ms"] >= r["ttft_ms"] >= 0,
              f"counts and timings present: {r}")

rc, out, err = run(["generate", path, "--quiet", "--strict"])
check(rc == 3 and "facts.jsonl:3:" in err and "temprature" in err, f"--strict stops at the first bad record with exit 3: rc={rc} {err[-300:]}")

# 2. stdin, .zst in and out give the same records
good = [r for r in facts if isinstance(r, dict)]
plain = write("good.jsonl", good)
rc, out_plain, err = run(["generate", plain, "--quiet"])
check(rc == 0, f"clean run exits 0: {rc} {err[-300:]}")
rc, out_stdin, err = run(["generate", "-", "--quiet"], stdin=open(plain, "rb").read())
check(rc == 0 and records(out_stdin) == records(out_plain) or
      sorted(json.dumps({k: v for k, v in r.items() if "ms" not in k}) for r in records(out_stdin)) ==
      sorted(json.dumps({k: v for k, v in r.items() if "ms" not in k}) for r in records(out_plain)),
      "stdin input gives the same records")
if shutil.which("zstd"):
    subprocess.run(["zstd", "-q", "-f", plain, "-o", plain + ".zst"], check=True)
    outz = os.path.join(TMP, "out.jsonl.zst")
    rc, _, err = run(["generate", plain + ".zst", "-o", outz, "--quiet"])
    dec = subprocess.run(["zstd", "-dc", outz], capture_output=True).stdout.decode()
    strip = lambda rs: sorted(json.dumps({k: v for k, v in r.items() if "ms" not in k}) for r in rs)
    check(rc == 0 and strip(records(dec)) == strip(records(out_plain)), f".zst in and out: rc={rc} {err[-300:]}")
else:
    check(False, "zstd is not installed (scripts/setup.sh installs it)")

# 3. kill with SIGTERM mid-run, then --resume: the union equals an uninterrupted run
many = [{"id": f"r{i}", "prompt": f"Question {i}: list some facts about the number {i}.", "max_tokens": MANY_TOKENS}
        for i in range(N_MANY)]
inp = write("many.jsonl", many)
ref_out = os.path.join(TMP, "ref.jsonl")
rc, _, err = run(["generate", inp, "-o", ref_out, "--quiet", "--max-seqs", "4"])
check(rc == 0, f"reference run: {rc} {err[-300:]}")
ref = {r["id"]: r["text"] for r in records(open(ref_out).read())}
res_out = os.path.join(TMP, "resumed.jsonl")
p = subprocess.Popen([PLLM, "generate", inp, "-o", res_out, "--quiet", "--max-seqs", "4"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
deadline = time.time() + 300
while time.time() < deadline:
    if os.path.exists(res_out) and len(open(res_out).read().splitlines()) >= KILL_AFTER:
        break
    time.sleep(0.05)
p.send_signal(signal.SIGTERM)
_, perr = p.communicate(timeout=120)
n_first = len(open(res_out).read().splitlines())
check(p.returncode == 130 and b"--resume" in perr, f"SIGTERM: exit 130 and says how to resume: {p.returncode} {perr[-300:]}")
check(0 < n_first < N_MANY, f"the first run was interrupted part way ({n_first} records)")
rc, _, err = run(["generate", inp, "-o", res_out, "--quiet", "--max-seqs", "4", "--resume"])
got = records(open(res_out).read())
ids = [r["id"] for r in got]
check(rc == 0, f"resumed run exits 0: {rc} {err[-300:]}")
check(len(ids) == len(set(ids)) == N_MANY, f"no id missing or twice after resume: {len(ids)} lines, {len(set(ids))} ids")
check(all(ref.get(r["id"]) == r["text"] for r in got), "resumed texts equal the uninterrupted run's (greedy)")
print(f"resume: first run wrote {n_first}/{N_MANY}, the resumed run completed the rest")

# 4. usage and model errors
rc, _, err = run(["generate", "--max-tokens", "abc", plain])
check(rc == 2 and "--max-tokens" in err, f"bad option value exits 2 naming it: {rc} {err}")
rc, _, err = run(["generate"])
check(rc == 2, f"missing argument exits 2: {rc}")
rc, _, err = run(["generate", plain, "--model", os.path.join(TMP, "nope.gguf")])
check(rc == 3 and "nope.gguf" in err, f"missing model file exits 3 naming it: {rc} {err}")
env = dict(os.environ, PLLM_HOME=os.path.join(TMP, "empty-home"))
r = subprocess.run([PLLM, "generate", plain], capture_output=True, env=env, timeout=60)
check(r.returncode == 3 and b"looked for" in r.stderr and b"setup.sh" in r.stderr,
      f"no default model: says where it looked: {r.returncode} {r.stderr[-300:]}")
rc, out, err = run(["generate", "--help"])
check(rc == 0 and "--max-tokens" in out and "default" in out, "generate --help lists options with defaults")

shutil.rmtree(TMP, ignore_errors=True)
if failures:
    print(f"{len(failures)} FAILURES")
    sys.exit(1)
print("generate_e2e: all checks passed")
