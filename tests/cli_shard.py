#!/usr/bin/env python3
"""cli_shard: pllm generate --shard K/N and pllm merge without a scheduler (seconds).

- The partition: for N = 3 and both balances, the shards' ids are disjoint and cover the input;
  records sharing their first --shard-key-tokens tokens (a document followed by questions) land
  in one shard; the same command gives the same partition; stdin falls back to hash, saying so.
- The token balance: with --shard-balance tokens the planned prompt tokens of the shards are
  within the heaviest key of each other.
- A bad record among them: counted at its position, the others' shards unchanged.
- The planning pass's threads: the same plan and shard with 1 and 2 of them, over 2600 records.
- --resume of a shard's output with another --shard is refused (exit 2).
- merge: a torn last line (a killed shard) is skipped and the shard named incomplete (exit 1);
  after --resume of that shard, merge is complete (exit 0) and equals the uninterrupted merge.
"""
import json
import os
import subprocess

from cli_util import PLLM, Test, read_records

t = Test("cli_shard")
t.need_model()
DOCS = [f"Document {d}: " + " ".join(f"word{d}x{i}" for i in range(60)) for d in range(6)]
recs = [{"id": f"d{d}q{q}", "prompt": f"{doc}\nQuestion {q}: what is word{d}x{q}?", "max_tokens": 2}
        for d, doc in enumerate(DOCS) for q in range(4)]
recs += [{"id": f"solo{i}", "prompt": f"Solo prompt number {i} about {'abc' * i}", "max_tokens": 2} for i in range(8)]
inp = t.write("in.jsonl", recs)
ids = [r["id"] for r in recs]
COMMON = ["--quiet", "-t", "1", "--num-blocks", "256"]


def shard_ids(bal, n, tag):
    got = []
    for k in range(n):
        o = t.path(f"{tag}-{k}.jsonl")
        rc, _, err = t.run(["generate", inp, "--shard", f"{k}/{n}", "--shard-balance", bal, "-o", o, *COMMON])
        t.check(rc == 0, f"{bal} shard {k}/{n}: exit {rc}: {err[-300:]}")
        got.append([r["id"] for r in read_records(o)])
    return got


for bal in ("tokens", "hash"):
    a = shard_ids(bal, 3, f"{bal}a")
    flat = [i for s in a for i in s]
    t.check(sorted(flat) == sorted(ids), f"{bal}: the shards do not partition the input: {a}")
    for d in range(len(DOCS)):
        where = {k for k, s in enumerate(a) if any(i.startswith(f"d{d}q") for i in s)}
        t.check(len(where) == 1, f"{bal}: document {d}'s questions are split over shards {where}")
    if bal == "tokens":
        a_tokens = a
    if bal == "tokens":  # hash needs no plan: the same rule per record
        b = shard_ids(bal, 3, f"{bal}b")
        t.check([sorted(s) for s in a] == [sorted(s) for s in b], f"{bal}: not deterministic: {a} vs {b}")
    if bal == "tokens":
        sc = [json.load(open(t.path(f"tokensa-{k}.jsonl.shard.json"))) for k in range(3)]
        planned = [s["planned_prompt_tokens"] for s in sc]
        t.check(all(s["records_in_shard"] == len(x) and s["complete"] for s, x in zip(sc, a)), f"sidecars: {sc}")
        heaviest = max(sum(r["prompt_tokens"] for r in read_records(t.path(f"tokensa-{k}.jsonl")) if r["id"].startswith(f"d{d}q"))
                       for k in range(3) for d in range(len(DOCS)))
        t.check(max(planned) - min(planned) <= heaviest, f"planned tokens {planned} spread more than the heaviest key ({heaviest})")
        print(f"tokens balance: planned prompt tokens per shard {planned} (heaviest key {heaviest})")

# a bad record (no prompt) among the others: it is counted at its position in every pass, so the
# records after it keep the keys the planning pass gave them (the main pass reuses them without
# tokenizing again): the partition still covers the input with each document in one shard, and
# the bad record's error line is in exactly one shard (that shard exits 1)
bad_recs = recs[:5] + [{"id": "bad", "max_tokens": 2}] + recs[5:]
bad_inp = t.write("in_bad.jsonl", bad_recs)
got, rcs = [], []
for k in range(3):
    o = t.path(f"bad-{k}.jsonl")
    rc, _, err = t.run(["generate", bad_inp, "--shard", f"{k}/3", "--shard-balance", "tokens", "-o", o, *COMMON])
    rcs.append(rc)
    got.append([r["id"] for r in read_records(o)])
t.check(sorted(rcs) == [0, 0, 1] and sorted(i for s in got for i in s) == sorted(ids + ["bad"]),
        f"a bad record: exits {rcs}, shards {got}")
for d in range(len(DOCS)):
    where = {k for k, s in enumerate(got) if any(i.startswith(f"d{d}q") for i in s)}
    t.check(len(where) == 1, f"a bad record: document {d}'s questions are split over shards {where}")
t.check([sorted(i for i in s if i != "bad") for s in got] == [sorted(s) for s in a_tokens],
        f"a bad record moved other records: {got} against {a_tokens}")

# the planning pass tokenizes on every thread, in batches of 1024 records: on 2600 records
# (prompts, chat messages and bad records mixed, so batches straddle them) a shard's plan and
# records are the same with 1 and 2 threads
big = []
for i in range(2600):
    if i % 97 == 5:
        big.append({"id": f"b{i}", "max_tokens": 1})  # no prompt: bad
    elif i % 3 == 0:
        big.append({"id": f"m{i}", "messages": [{"role": "user", "content": f"Tell me about item {i} " * (i % 7 + 1)}], "max_tokens": 1})
    else:
        big.append({"id": f"p{i}", "prompt": f"{DOCS[i % 6][:40 + i % 50]} / record {i}", "max_tokens": 1})
big_inp = t.write("big.jsonl", big)
side = {}
for th in ("1", "2"):
    o = t.path(f"big-t{th}.jsonl")
    rc, _, err = t.run(["generate", big_inp, "--shard", "7/400", "-o", o, "--quiet", "-t", th, "--num-blocks", "256"])
    sc = json.load(open(o + ".shard.json")) if os.path.exists(o + ".shard.json") else {}
    side[th] = (rc in (0, 1), sc.get("planned_prompt_tokens"), sc.get("records_read"), sorted(r["id"] for r in read_records(o)))
t.check(side["1"] == side["2"] and side["1"][0] and side["1"][2] == len(big) and side["1"][3],
        f"the planning pass with 1 and 2 threads: {side['1'][:3]} {side['2'][:3]}, ids {side['1'][3][:5]} vs {side['2'][3][:5]}")
print(f"2600 records, shard 7/400: {len(side['1'][3])} records, planned {side['1'][1]} prompt tokens with 1 and 2 threads")

# stdin: hash (also when tokens is asked for, saying so); the same partition as --shard-balance hash on the file
with open(inp, "rb") as f:
    r = subprocess.run([PLLM, "generate", "-", "--shard", "1/3", "--shard-balance", "tokens", "-o", t.path("stdin.jsonl"), "-t", "1", "--num-blocks", "256"],
                       stdin=f, capture_output=True, text=True)
t.check(r.returncode == 0 and "using hash" in r.stderr, f"stdin: exit {r.returncode}: {r.stderr[-300:]}")
t.check(sorted(x["id"] for x in read_records(t.path("stdin.jsonl"))) == sorted(a[1]), "stdin shard 1/3 differs from hash shard 1/3")

# --resume with another shard is refused
rc, _, err = t.run(["generate", inp, "--shard", "2/3", "--shard-balance", "hash", "-o", t.path("hasha-1.jsonl"), "--resume", *COMMON])
t.check(rc == 2 and "belongs to shard 1/3" in err, f"resume with another shard: exit {rc}: {err[-300:]}")

# merge: complete, then with a torn shard, then resumed
shards = [t.path(f"tokensa-{k}.jsonl") for k in range(3)]
rc, _, err = t.run(["merge", *shards, "-o", t.path("m.jsonl"), "--order", "input", "--input", inp, "-q"])
t.check(rc == 0, f"merge: exit {rc}: {err[-300:]}")
full = open(t.path("m.jsonl")).read()
t.check([r["id"] for r in read_records(t.path("m.jsonl"))] == ids, "merge --order input: not the input order")
lines = open(shards[0]).read().splitlines(True)
with open(shards[0], "w") as f:  # a killed shard: two lines lost, the last one torn
    f.writelines(lines[:-2])
    f.write(lines[-2][: len(lines[-2]) // 2])
sc = json.load(open(shards[0] + ".shard.json"))
sc["complete"] = False
sc["attempts"][-1].update(finished_at=None, exit=None)
json.dump(sc, open(shards[0] + ".shard.json", "w"))
rc, _, err = t.run(["merge", *shards, "-o", t.path("m2.jsonl"), "--input", inp])
t.check(rc == 1 and "shard 0/3" in err and "missing:" in err and "torn" in err, f"merge of a torn shard: exit {rc}: {err[-600:]}")
rc, _, err = t.run(["generate", inp, "--shard", "0/3", "-o", shards[0], "--resume", *COMMON])
t.check(rc == 0, f"resume of the torn shard: exit {rc}: {err[-300:]}")
rc, _, err = t.run(["merge", *shards, "-o", t.path("m3.jsonl"), "--order", "input", "--input", inp, "-q"])
t.check(rc == 0, f"merge after resume: exit {rc}: {err[-300:]}")
# the same records, but timings, and cached tokens of the first record the resumed attempt ran
# (its prefix cache starts cold)
strip = lambda p: [{k: v for k, v in r.items() if k not in ("ttft_ms", "latency_ms", "cached_tokens")} for r in read_records(p)]
t.check(strip(t.path("m3.jsonl")) == strip(t.path("m.jsonl")), "merge after resume differs from the uninterrupted merge")
t.finish()
