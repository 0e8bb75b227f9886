#!/usr/bin/env python3
"""cli_guard: pllm never loses a user's data, on the real default model (issue 23).

Output guards (generate -o, tokenize -o, --stats-json): an output that is the input itself (the
same name, a symbolic link, a hard link, stdin read from it, stdout appended to it) is refused
with exit 2 and the input left byte for byte; an existing non-empty output is refused without
--overwrite (or --resume); --overwrite replaces it; tokenize writes through a temporary file, so
a run killed half way leaves the earlier file as it was; --stats-json replaces an earlier pllm
report but no other file.

Resume that cannot lie: duplicate ids are an error line (null id, keyed by its line), so a
resumed run neither skips the first "a" nor repeats anything; an edited input, other options,
an output without a run record and stdin as the input are refused naming the difference;
--retry-errors reruns the error lines of an earlier run; a request with n > 1 written in part
gets only its missing completions. --strict keeps every request read before the bad record.

Inputs: a file that is not records is one error (exit 3), not one error line per physical
line; an empty input is a usage error (exit 2); zstd and gzip on stdin and in files without
their usual names are read by their magic bytes.
"""
import gzip
import hashlib
import json
import os
import signal
import subprocess
import time

from cli_util import PLLM, Test, read_records, records

t = Test("cli_guard")
t.need_model()
Q = ["--quiet"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def keys(recs):
    return [r.get("custom_id", r.get("id")) if r.get("id") is not None else ("line", r.get("line")) for r in recs]


# ---------------------------------------------------------------- the output is the input
inp = t.write("same.jsonl", [{"id": f"s{i}", "prompt": f"Number {i} is", "max_tokens": 2} for i in range(3)])
before = digest(inp)
os.symlink(inp, t.path("link.jsonl"))
os.link(inp, t.path("hard.jsonl"))
cases = [
    ("generate -o the input", ["generate", inp, "-o", inp], None, None),
    ("generate -o a symbolic link to it", ["generate", inp, "-o", t.path("link.jsonl")], None, None),
    ("generate -o a hard link to it", ["generate", inp, "-o", t.path("hard.jsonl")], None, None),
    ("generate -o it --overwrite", ["generate", inp, "-o", inp, "--overwrite"], None, None),
    ("generate -o it --resume", ["generate", inp, "-o", inp, "--resume"], None, None),
    ("tokenize -o the input", ["tokenize", inp, "-o", inp], None, None),
    ("tokenize -o it --overwrite", ["tokenize", inp, "-o", inp, "--overwrite"], None, None),
    ("generate - < it -o it", ["generate", "-", "-o", inp], "stdin", None),
    ("generate it >> it", ["generate", inp], None, "stdout"),
    ("generate --stats-json the input", ["generate", inp, "-o", t.path("o1.jsonl"), "--stats-json", inp], None, None),
    ("bench --stats-json the dataset", ["bench", "--dataset", inp, "--num-prompts", "2", "--stats-json", inp], None, None),
]
original = open(inp, "rb").read()
for name, args, std_in, std_out in cases:
    with open(inp, "r+b") as f:  # in place: the links stay links; a failed case spoils no other
        f.write(original)
        f.truncate()
    fin = open(inp, "rb") if std_in else None
    fout = open(inp, "ab") if std_out else subprocess.PIPE
    try:  # a pllm that writes into its own input may never reach the end of it
        p = subprocess.run([PLLM, *args, *Q], stdin=fin, stdout=fout, stderr=subprocess.PIPE, timeout=30)
        rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        rc, err = None, "(killed after 30 s)"
    for f in (fin, fout):
        if f not in (None, subprocess.PIPE):
            f.close()
    t.check(rc == 2 and "itself" in err, f"{name}: exit 2 naming the input: {rc} {err[-300:]}")
    t.check(digest(inp) == before, f"{name}: the input was changed")

# a large input: the whole of it stays (tokenize destroyed a 5,000-record input half way)
big = t.write("b2.jsonl", [{"id": i, "prompt": f"record {i} " + "word " * (i % 40)} for i in range(5000)])
big_before = digest(big)
try:
    rc, _, err = t.run(["tokenize", big, "-o", big], timeout=60)
except subprocess.TimeoutExpired:
    rc, err = None, "(killed after 60 s: it was reading what it wrote)"
t.check(rc == 2 and digest(big) == big_before, f"tokenize b2 -o b2: refused, input intact: {rc} {err[-200:]}")

# ---------------------------------------------------------------- an existing output
existing = t.write_text("existing.jsonl", '{"mine": "precious"}\n')
for cmd in (["generate", inp], ["tokenize", inp]):
    rc, _, err = t.run([*cmd, "-o", existing, *Q])
    t.check(rc == 2 and "--overwrite" in err and open(existing).read() == '{"mine": "precious"}\n',
            f"{cmd[0]}: an existing output is refused without --overwrite, and kept: {rc} {err[-200:]}")
rc, _, err = t.run(["generate", inp, "-o", existing, "--overwrite", *Q])
t.check(rc == 0 and sorted(keys(read_records(existing))) == ["s0", "s1", "s2"], f"generate --overwrite replaces: {rc} {err[-200:]}")
rc, _, err = t.run(["generate", inp, "-o", existing, "--overwrite", "--resume", *Q])
t.check(rc == 2, f"--overwrite with --resume is a usage error: {rc}")
empty_out = t.write_text("empty_out.jsonl", "")
rc, _, err = t.run(["generate", inp, "-o", empty_out, *Q])
t.check(rc == 0 and len(read_records(empty_out)) == 3, f"an existing empty output is written: {rc} {err[-200:]}")

# tokenize writes through a temporary: killed half way, the earlier file is as it was
tok_out = t.write_text("tok_out.jsonl", '{"earlier": true}\n')
huge = t.write("huge.jsonl", [{"id": i, "prompt": "some words to tokenize " * 20} for i in range(200000)])
p = subprocess.Popen([PLLM, "tokenize", huge, "-o", tok_out, "--overwrite", "-q"], stderr=subprocess.PIPE)
deadline = time.time() + 120
tmp_seen = False
while time.time() < deadline and p.poll() is None:
    tmps = [f for f in os.listdir(t.tmp) if f.startswith(".tok_out.jsonl.") and f.endswith(".tmp")]
    if tmps and os.path.getsize(os.path.join(t.tmp, tmps[0])) > 100000:
        tmp_seen = True
        p.send_signal(signal.SIGKILL)
        break
    time.sleep(0.01)
p.wait(timeout=60)
t.check(tmp_seen, "tokenize: the output was being written to a temporary file beside it")
t.check(open(tok_out).read() == '{"earlier": true}\n', "tokenize killed half way: the earlier output is untouched")
rc, _, err = t.run(["tokenize", inp, "-o", tok_out, "--overwrite", "--counts-only"])
got = read_records(tok_out)
t.check(rc == 0 and len(got) == 3 and all("n_tokens" in r for r in got), f"tokenize --overwrite replaces at the end: {rc} {err[-200:]}")

# --stats-json: an earlier pllm report is replaced, any other file is not
notes = t.write_text("notes.json", '{"my": "notes"}\n')
rc, _, err = t.run(["generate", inp, "-o", t.path("o2.jsonl"), "--stats-json", notes, *Q])
t.check(rc == 2 and json.load(open(notes)) == {"my": "notes"}, f"--stats-json over a non-report is refused: {rc} {err[-200:]}")
rep = t.path("rep.json")
for i in range(2):
    rc, _, err = t.run(["generate", inp, "-o", t.path(f"o3_{i}.jsonl"), "--stats-json", rep, *Q])
    t.check(rc == 0 and json.load(open(rep)).get("command") == "generate", f"--stats-json replaces an earlier report (run {i}): {rc} {err[-200:]}")

# ---------------------------------------------------------------- duplicate ids and --resume
dup = t.write("dup.jsonl", [{"id": "a", "prompt": "Hello", "max_tokens": 3},
                            {"id": "a", "prompt": "Bonjour", "max_tokens": 3},
                            {"id": "c", "prompt": "Hola", "max_tokens": 3}])
dout = t.path("dup.out.jsonl")
rc, _, err = t.run(["generate", dup, "-o", dout, *Q])
recs = read_records(dout)
errs = [r for r in recs if r["finish_reason"] == "error"]
t.check(rc == 1 and len(recs) == 3 and len(errs) == 1 and errs[0]["line"] == 2 and errs[0]["id"] is None
        and "duplicate id" in errs[0]["error"] and "dup.jsonl:2" in errs[0]["error"],
        f"duplicate ids: an error line for line 2 (null id), the others run: rc {rc} {recs}")
ok_texts = {r["id"]: r["text"] for r in recs if r["finish_reason"] != "error"}
# as if the run had been killed when only the duplicate's error line was written
with open(dout, "w") as f:
    f.write(json.dumps(errs[0]) + "\n")
rc, _, err = t.run(["generate", dup, "-o", dout, "--resume"])
recs = read_records(dout)
t.check(sorted(map(str, keys(recs))) == sorted(map(str, ["a", "c", ("line", 2)])) and rc == 0,
        f"--resume with duplicate ids runs the first 'a' and 'c' once each: rc {rc} {keys(recs)} {err[-300:]}")
t.check({r["id"]: r["text"] for r in recs if r["finish_reason"] != "error"} == ok_texts,
        "the resumed texts equal the first run's (greedy)")

# an edited input, other options, no run record, stdin: refused, naming the difference
edited = t.write("edited.jsonl", [{"id": "a", "prompt": "Hello", "max_tokens": 3}, {"id": "c", "prompt": "Changed", "max_tokens": 3}])
eout = t.path("edited.out.jsonl")
rc, _, _ = t.run(["generate", edited, "-o", eout, *Q])
with open(eout) as f:
    first_line = f.readline()
with open(eout, "w") as f:
    f.write(first_line)  # killed after one line
with open(edited, "a") as f:
    f.write(json.dumps({"id": "d", "prompt": "More", "max_tokens": 3}) + "\n")
rc, _, err = t.run(["generate", edited, "-o", eout, "--resume"])
t.check(rc == 2 and "the input" in err and "content changed" in err and open(eout).read() == first_line,
        f"--resume after the input was edited: refused, output kept: {rc} {err[-300:]}")
rc, _, err = t.run(["generate", dup, "-o", dout, "--resume", "--max-tokens", "5"])
t.check(rc == 2 and "sampling.max_tokens" in err, f"--resume with other options: refused naming them: {rc} {err[-300:]}")
norec = t.path("norec.jsonl")
with open(norec, "w") as f:
    f.write('{"id": "a", "text": "x", "finish_reason": "stop"}\n')
rc, _, err = t.run(["generate", dup, "-o", norec, "--resume"])
t.check(rc == 2 and "no record of the run" in err, f"--resume of an output without a run record: refused: {rc} {err[-300:]}")
rc, _, err = t.run(["generate", "-", "-o", dout, "--resume"], stdin=open(dup, "rb").read())
t.check(rc == 2 and "stdin" in err, f"--resume from stdin: refused: {rc} {err[-300:]}")
# the same input under another name is the same input
moved = t.path("moved.jsonl")
os.rename(dup, moved)
rc, _, err = t.run(["generate", moved, "-o", dout, "--resume", *Q])
t.check(rc == 0 and len(read_records(dout)) == 3, f"--resume with the same input moved: continues: {rc} {err[-300:]}")
# the KV cache's size and layout change no output (cmd/runrecord.h): a resume may change them
with open(dout) as f:
    first_line = f.readline()
with open(dout, "w") as f:
    f.write(first_line)
rc, _, err = t.run(["generate", moved, "-o", dout, "--resume", "--no-kv-hybrid", "--kv-cache-mb", "32", *Q])
t.check(rc == 0 and len(read_records(dout)) == 3,
        f"--resume with --no-kv-hybrid and another --kv-cache-mb: continues: {rc} {err[-300:]}")

# --retry-errors: an error of the first run (prompt over the context) runs again
rin = t.write("retry.jsonl", [{"id": "short", "prompt": "Hi", "max_tokens": 2},
                              {"id": "long", "prompt": "one two three four five six seven eight nine ten eleven twelve", "max_tokens": 2}])
rout = t.path("retry.out.jsonl")
rc, _, err = t.run(["generate", rin, "-o", rout, "--max-model-len", "8", *Q])
t.check(rc == 1 and [r["finish_reason"] == "error" for r in read_records(rout)].count(True) == 1,
        f"retry: the first run has one error line: {rc} {read_records(rout)}")
rc, _, err = t.run(["generate", rin, "-o", rout, "--resume", *Q])
t.check(rc == 0 and len(read_records(rout)) == 2, f"--resume alone does not rerun error lines: {rc} {err[-300:]}")
rc, _, err = t.run(["generate", rin, "-o", rout, "--resume", "--retry-errors"])
recs = read_records(rout)
t.check(rc == 0 and sorted(keys(recs)) == ["long", "short"] and all(r["finish_reason"] != "error" for r in recs),
        f"--retry-errors reruns the error line, each id once: {rc} {recs} {err[-300:]}")

# n > 1 written in part: only the missing completion is written
nin = t.write("n3.jsonl", [{"id": "m", "prompt": "Once upon a time", "max_tokens": 3, "n": 3, "temperature": 0.8, "seed": 7}])
nout = t.path("n3.out.jsonl")
rc, _, err = t.run(["generate", nin, "-o", nout, *Q])
full = read_records(nout)
t.check(rc == 0 and sorted(r["index"] for r in full) == [0, 1, 2], f"n=3: three lines: {full}")
with open(nout, "w") as f:
    for r in full:
        if r["index"] != 1:
            f.write(json.dumps(r) + "\n")
rc, _, err = t.run(["generate", nin, "-o", nout, "--resume", *Q])
recs = read_records(nout)
t.check(rc == 0 and sorted(r["index"] for r in recs) == [0, 1, 2],
        f"--resume of a request written in part writes its missing completion only: {rc} {[r.get('index') for r in recs]}")
t.check(sorted(json.dumps([r["index"], r["text"]]) for r in recs) == sorted(json.dumps([r["index"], r["text"]]) for r in full),
        "the completion written on resume equals the first run's (seeded)")

# ---------------------------------------------------------------- --strict keeps finished work
sin = t.write("strict.jsonl", [{"id": f"g{i}", "prompt": f"Tell me about {i}", "max_tokens": 8} for i in range(6)]
              + [{"id": "bad", "prompt": "x", "temprature": 1}, {"id": "after", "prompt": "y", "max_tokens": 2}])
sout = t.path("strict.out.jsonl")
rc, _, err = t.run(["generate", sin, "-o", sout, "--strict", "--max-seqs", "2"])
recs = read_records(sout)
good = sorted(r["id"] for r in recs if r["finish_reason"] != "error")
t.check(rc == 3 and good == [f"g{i}" for i in range(6)] and "bad" in err and "strict.jsonl:7" in err,
        f"--strict: every record before the bad one is written, the bad one named, exit 3: rc {rc} {good} {err[-300:]}")
t.check("after" not in [r["id"] for r in recs], "--strict: nothing after the bad record runs")

# ---------------------------------------------------------------- files that are not records
pretty = t.write_text("pretty.json", json.dumps({"id": "a", "prompt": "x", "max_tokens": 2}, indent=2) + "\n")
nums = t.write_text("nums.json", "[1,2]\n")
for cmd in ("generate", "tokenize"):
    for path, needle in ((pretty, "pretty.json: not JSON lines of records: line 1"), (nums, "nums.json: a JSON list, but not of records: element 1")):
        rc, out, err = t.run([cmd, path])
        lines = [l for l in err.splitlines() if l.startswith("pllm:") and "device" not in l]
        t.check(rc == 3 and out == "" and needle in err and len([l for l in lines if "line" in l or "element" in l]) == 1,
                f"{cmd} {os.path.basename(path)}: one error (exit 3), no output: rc {rc} out {out[:200]!r} err {err[-400:]}")
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n"), ("empty_list.json", "[]")):
        rc, out, err = t.run([cmd, t.write_text(name, text)])
        t.check(rc == 2 and "no records" in err and out == "", f"{cmd} {name}: a usage error, not a silent success: {rc} {err[-200:]}")

# ---------------------------------------------------------------- compression by magic bytes
plain = t.write("plain.jsonl", [{"id": f"z{i}", "prompt": f"Count {i}", "max_tokens": 2} for i in range(3)])
raw = open(plain, "rb").read()
zst = subprocess.run(["zstd", "-q", "-c", plain], capture_output=True).stdout
gz = gzip.compress(raw)
with open(t.path("noext_zstd"), "wb") as f:
    f.write(zst)
with open(t.path("data.jsonl.gz"), "wb") as f:
    f.write(gz)
rc, ref, _ = t.run(["generate", plain, *Q])
ref_texts = {r["id"]: r["text"] for r in records(ref)}
for name, args, data in (("zstd on stdin", ["generate", "-"], zst), ("gzip on stdin", ["generate", "-"], gz),
                         ("a zstd file without .zst", ["generate", t.path("noext_zstd")], None),
                         ("a .gz file", ["generate", t.path("data.jsonl.gz")], None)):
    rc, out, err = t.run([*args, *Q], stdin=data)
    got = {r["id"]: r["text"] for r in records(out)} if rc == 0 else {}
    t.check(rc == 0 and got == ref_texts, f"{name}: the same records as the plain file: rc {rc} {err[-300:]}")
rc, out, err = t.run(["tokenize", "-", "--counts-only"], stdin=gz)
t.check(rc == 0 and len(records(out)) == 3 and all("n_tokens" in r for r in records(out)), f"tokenize: gzip on stdin: {rc} {err[-200:]}")

t.finish()
