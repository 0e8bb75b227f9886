#!/usr/bin/env python3
"""cli_prefix_cache: the persistent prefix cache (--prefix-cache-dir) end to end on the real
default model.

- greedy outputs are identical with no prefix cache, a cold directory, a warm one, a damaged
  one, and with two runs (shards) sharing a fresh directory at once;
- a cold run saves every full prompt block once; a warm run loads the shared prefix blocks
  instead of computing them (prompt tokens computed drop to the last block of each prompt);
- a flipped byte and a truncated file are reported, ignored, removed and rewritten;
- the int8 KV cache is a different namespace (it never loads fp16 blocks) and round-trips too;
- usage errors: a file as the directory, --no-prefix-cache with a directory.
"""
import glob
import json
import os
import subprocess

from cli_util import MODEL, PLLM, Test, read_records

t = Test("cli_prefix_cache")
t.need_model()

PREFIX = ("You are a careful assistant. Answer in one short sentence. The following is a long shared "
          "preamble that every request repeats, so that its blocks are worth keeping on disk: "
          + " ".join(f"fact {i}: the number {i} is {'even' if i % 2 == 0 else 'odd'}." for i in range(40)))
QUESTIONS = ["What is 2 + 2?", "Name a colour.", "Is 7 odd?", "Say hello.", "What is the capital of France?",
             "Count to three."]
SANITIZE = os.environ.get("PLLM_SANITIZE") == "1"
if SANITIZE:  # under ASan (scripts/ci-extra.sh): 3 prompts, no int8 round (7.5 min -> about 3)
    QUESTIONS = QUESTIONS[:3]
prompts = t.write("prompts.jsonl", [{"id": f"q{i}", "prompt": PREFIX + " Question: " + q}
                                    for i, q in enumerate(QUESTIONS)])
BASE = ["--max-tokens", "8", "--temperature", "0", "--threads", "2", "--num-blocks", "256"]


def generate(name, *extra, expect_rc=0):
    out, stats = t.path(name + ".jsonl"), t.path(name + ".json")
    rc, _, err = t.run(["generate", prompts, "-o", out, "--stats-json", stats, *BASE, *extra])
    t.check(rc == expect_rc, f"{name}: exit {rc}, expected {expect_rc}: {err[-800:]}")
    if rc != 0:
        return None, None, err
    texts = {r["id"]: r.get("token_ids", r["text"]) for r in read_records(out)}
    with open(stats) as f:
        return texts, json.load(f), err


ref, ref_stats, _ = generate("nocache", "--no-prefix-cache")
t.check(ref and len(ref) == len(QUESTIONS), "reference run")

d = t.path("kv")
cold, cs, _ = generate("cold", "--prefix-cache-dir", d)
t.check(cold == ref, "cold directory: outputs differ from the run without a prefix cache")
pc = cs.get("prefix_cache_dir", {}) if cs else {}
n_files = len(glob.glob(os.path.join(d, "*.kvb")))
t.check(pc.get("blocks_loaded") == 0, f"cold: loaded {pc.get('blocks_loaded')}")
t.check(pc.get("blocks_saved", 0) > 0 and pc.get("blocks_saved") == n_files,
        f"cold: saved {pc.get('blocks_saved')}, {n_files} files")

warm, ws, _ = generate("warm", "--prefix-cache-dir", d)
t.check(warm == ref, "warm directory: outputs differ")
pw = ws.get("prefix_cache_dir", {}) if ws else {}
t.check(pw.get("blocks_loaded", 0) > 0, f"warm: loaded {pw.get('blocks_loaded')}")
t.check(pw.get("blocks_saved") == 0, f"warm: saved {pw.get('blocks_saved')} (every block was there)")
cc, wc = cs["counters"]["prompt_tokens_computed"], ws["counters"]["prompt_tokens_computed"]
# a warm run computes at most each prompt's last block (the last token is always recomputed)
t.check(wc <= 16 * len(QUESTIONS) and wc < cc / 4, f"warm: {wc} prompt tokens computed, cold {cc}")
print(f"cold: {cc} prompt tokens computed, {pc.get('blocks_saved')} blocks saved; warm: {wc} computed, "
      f"{pw.get('blocks_loaded')} blocks loaded")

# damage an entry every run reads (a sequence's first block, depth 0 in its header): a flipped
# byte in the payload, then a truncated file


def first_block():
    for path in glob.glob(os.path.join(d, "*.kvb")):
        with open(path, "rb") as f:
            h = f.read(60)
        if int.from_bytes(h[56:60], "little") == 0:
            return path
    return None


for how in ("flip", "truncate"):
    path = first_block()
    t.check(path is not None, "no entry of depth 0")
    if how == "flip":
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 10)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x20]))
    else:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    dmg, ds, err = generate("damaged_" + how, "--prefix-cache-dir", d)
    t.check(dmg == ref, f"{how}: outputs differ")
    pd = ds.get("prefix_cache_dir", {}) if ds else {}
    t.check(pd.get("corrupt_ignored") == 1, f"{how}: {pd.get('corrupt_ignored')} corrupt entries reported")
    word = "checksum" if how == "flip" else "truncated"
    t.check(err.count("corrupt entry") == 1 and word in err, f"{how}: the warning names the damage: {err[-1500:]}")
    t.check(pd.get("blocks_saved") == 1, f"{how}: the entry was saved again ({pd.get('blocks_saved')})")
    t.check(len(glob.glob(os.path.join(d, "*.kvb"))) == n_files, f"{how}: entries missing")
again, ags, _ = generate("repaired", "--prefix-cache-dir", d)
t.check(again == ref, "repaired directory: outputs differ")
t.check(ags and ags["prefix_cache_dir"]["blocks_loaded"] == pw.get("blocks_loaded"), "repaired: loads as warm")

# int8 KV: its own namespace
if not SANITIZE:
    ref8, _, _ = generate("nocache8", "--no-prefix-cache", "--kv-cache-dtype", "int8")
    c8, s8, _ = generate("cold8", "--prefix-cache-dir", d, "--kv-cache-dtype", "int8")
    w8, s8w, _ = generate("warm8", "--prefix-cache-dir", d, "--kv-cache-dtype", "int8")
    t.check(c8 == ref8 and w8 == ref8, "int8 KV: outputs differ with the prefix cache")
    t.check(s8 and s8["prefix_cache_dir"]["blocks_loaded"] == 0, "int8 KV: loaded fp16 blocks")
    t.check(s8w and s8w["prefix_cache_dir"]["blocks_loaded"] > 0, "int8 KV: a warm run loaded nothing")

# two shards at once on a fresh directory
d2 = t.path("kv2")
procs = []
for k in range(2):
    out = t.path(f"shard{k}.jsonl")
    procs.append((out, subprocess.Popen([PLLM, "generate", prompts, "-o", out, *BASE, "--prefix-cache-dir", d2],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
for out, p in procs:
    _, err = p.communicate(timeout=600)
    t.check(p.returncode == 0, f"concurrent run: exit {p.returncode}: {err.decode()[-500:]}")
    got = {r["id"]: r.get("token_ids", r["text"]) for r in read_records(out)}
    t.check(got == ref, "concurrent run: outputs differ")
t.check(not glob.glob(os.path.join(d2, ".tmp-*")), "concurrent runs left temporary files")
after, _, _ = generate("after_concurrent", "--prefix-cache-dir", d2)
t.check(after == ref, "after the concurrent runs: outputs differ")

# usage errors
notdir = t.write_text("notdir", "x")
rc, _, err = t.run(["generate", prompts, *BASE, "--prefix-cache-dir", notdir])
t.check(rc != 0 and "notdir" in err and "not a directory" in err, f"a file as the directory: {rc} {err[-300:]}")
rc, _, err = t.run(["generate", prompts, *BASE, "--prefix-cache-dir", d, "--no-prefix-cache"])
t.check(rc == 2 and "--no-prefix-cache" in err, f"--no-prefix-cache with a directory: {rc} {err[-300:]}")
t.finish()
