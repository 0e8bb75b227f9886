"""cli_util: helpers shared by the cli_* end-to-end tests (not a test itself).

Runs the pllm binary ($PLLM_BIN), writes input files in a per-test temporary directory under
$PLLM_TEST_TMP, collects failures and ends the test with the right exit code.
"""
import json
import os
import subprocess
import sys
import tempfile

PLLM = os.environ.get("PLLM_BIN", "pllm")
HOME = os.environ.get("PLLM_HOME", os.path.expanduser("~/.cache/pllm"))
MODEL = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SHARED = os.environ.get("PLLM_SHARED_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
SHAREGPT = os.path.join(SHARED, "sharegpt", "ShareGPT_V3_filtered_1000.json")


class Test:
    def __init__(self, name):
        self.name = name
        self.failures = []
        self.tmp = tempfile.mkdtemp(prefix=name + "_", dir=os.environ.get("PLLM_TEST_TMP"))

    def need_model(self):
        if not os.path.exists(MODEL):
            print(f"the default model is missing ({MODEL}); run scripts/setup.sh")
            sys.exit(1)

    def check(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            print("FAIL: " + msg, flush=True)
        return cond

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, lines):
        """lines: dicts (dumped as JSON) or raw strings, one per line."""
        p = self.path(name)
        with open(p, "w", encoding="utf-8") as f:
            for line in lines:
                f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
        return p

    def write_text(self, name, text):
        p = self.path(name)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        return p

    def run(self, args, stdin=None, timeout=600, env=None):
        r = subprocess.run([PLLM, *args], input=stdin, capture_output=True, timeout=timeout, env=env)
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def finish(self):
        import shutil

        if self.failures:
            print(f"{self.name}: {len(self.failures)} FAILURES (files kept in {self.tmp})")
            sys.exit(1)
        shutil.rmtree(self.tmp, ignore_errors=True)
        print(f"{self.name}: all checks passed")
        sys.exit(0)


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_records(path):
    """The complete lines of an output file (a killed writer may leave a torn last line, or a
    .zst stream cut short: what decodes before the cut is kept)."""
    if path.endswith(".zst"):
        text = subprocess.run(["zstd", "-dcq", path], capture_output=True).stdout.decode("utf-8", "replace")
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return records(text)


def strip_timing(recs):
    """Records without the fields that vary from run to run (timings, created)."""
    out = []
    for r in recs:
        r = json.loads(json.dumps(r))
        for k in ("ttft_ms", "latency_ms"):
            r.pop(k, None)
        body = (r.get("response") or {}).get("body")
        if isinstance(body, dict):
            body.pop("created", None)
        out.append(r)
    return out


def canon(recs):
    return sorted(json.dumps(r, sort_keys=True) for r in strip_timing(recs))
