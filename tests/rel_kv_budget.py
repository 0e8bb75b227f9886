#!/usr/bin/env python3
"""KV cache budgets that cannot work.

1. More than the machine has: --kv-cache-mb twice the RAM. pllm must refuse up front with a
   clear message that gives the largest budget that fits (a number of MB no larger than the
   available memory), instead of allocating (overcommit) and being killed by the OOM killer
   later; and that budget must then work.
2. Too small for one request: a budget of a few blocks (--kv-cache-mb 1, and --num-blocks 3).
   The request whose context cannot fit fails with an error record (finish_reason "error",
   with a message), and the other requests complete with exactly the text they get with the
   default budget (greedy).
"""
import os
import re

from rel_common import (check, describe_exit, finish, log, need_model, read_output, run, sharegpt_prompts, tmpdir,
                        write_jsonl)

need_model()
TMP = tmpdir("rel_kv_")


def meminfo(key):
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) // 1024
    return 0


# 1. larger than RAM
small = write_jsonl(os.path.join(TMP, "small.jsonl"),
                    [{"id": "a", "prompt": "The capital of France is", "max_tokens": 2},
                     {"id": "b", "prompt": "One, two, three,", "max_tokens": 2}])
total_mb = meminfo("MemTotal")
ask = 2 * total_mb
rc, out, err = run(["generate", small, "--quiet", "--kv-cache-mb", str(ask)])
log(f"--kv-cache-mb {ask} (RAM {total_mb} MB): {describe_exit(rc)}: {err.strip()[-400:]}")
check(rc > 0, f"a KV budget of twice the RAM must be refused with an error exit, got {describe_exit(rc)}")
nums = [int(x) for x in re.findall(r"(\d+)\s*(?:MB|MiB)", err) if int(x) != ask]
fits = [n for n in nums if 0 < n <= meminfo("MemAvailable") + 512]
check(bool(fits), f"the message must give the largest budget that fits (a number of MB within the available memory): {err[-300:]}")
if fits:
    n = max(fits)
    rc, out, err = run(["generate", small, "--quiet", "--kv-cache-mb", str(n)])
    check(rc == 0, f"the budget the message suggested ({n} MB) must work: {describe_exit(rc)}: {err[-300:]}")

# 2. too small for one request's context
short = sharegpt_prompts(5, max_chars=30, offset=700)
long_text = " ".join(sharegpt_prompts(12, max_chars=400, offset=710))
recs = [{"id": f"short{i}", "prompt": p, "max_tokens": 6} for i, p in enumerate(short)]
recs.insert(2, {"id": "long", "prompt": long_text, "max_tokens": 6})
inp = write_jsonl(os.path.join(TMP, "mixed.jsonl"), recs)
ref_path = os.path.join(TMP, "ref.jsonl")
rc, _, err = run(["generate", inp, "--quiet", "--token-ids", "-o", ref_path])
ref = {r["id"]: r for r in read_output(ref_path)[0]}
check(rc == 0 and len(ref) == len(recs), f"reference run: {describe_exit(rc)}: {err[-300:]}")

for label, opts in (("--kv-cache-mb 1", ["--kv-cache-mb", "1"]), ("--num-blocks 3", ["--num-blocks", "3"])):
    out_path = os.path.join(TMP, f"out_{opts[1]}.jsonl")
    rc, _, err = run(["generate", inp, "--quiet", "--token-ids", "-o", out_path, *opts])
    got = {r["id"]: r for r in read_output(out_path)[0]}
    log(f"{label}: {describe_exit(rc)}; records {sorted(got)}; stderr {err.strip()[-200:]}")
    check(rc in (0, 1), f"{label}: the run must go on past the request that cannot fit: {describe_exit(rc)}: {err[-300:]}")
    lg = got.get("long", {})
    check(lg.get("finish_reason") == "error" and lg.get("error"),
          f"{label}: the request that cannot fit must end with an error record: {str(lg)[:300]}")
    log(f"{label}: long request: {lg.get('error')}")
    for r in recs:
        if r["id"] == "long":
            continue
        g, w = got.get(r["id"]), ref.get(r["id"], {})
        check(g is not None and g.get("finish_reason") != "error" and g.get("token_ids") == w.get("token_ids"),
              f"{label}: {r['id']} must complete as with the default budget: got {str(g)[:200]} want {w.get('text')!r}")

finish("rel_kv_budget")
