#!/usr/bin/env python3
"""cli_bench: `pllm bench` end to end on the real default model.

- --dataset sharegpt on the shared sample: every reported field is present (stderr table and
  --stats-json) and consistent: token counts add up (the report's totals, the engine counters,
  the workload, and an independent count with Hugging Face `tokenizers`), throughputs equal the
  counts over the durations, TTFT + 7 x TPOT = E2E for 8-token outputs, mean ITL = mean TPOT
  (every output has 8 tokens; ITL pools the gaps between consecutive tokens), percentiles ordered,
  the 95% interval brackets the mean, the counters repeat across runs;
- `generate --stats-json` and its table report the same latencies, ITL included;
- output lengths default to 128 when the data has no reply; sharegpt needs --dataset-path;
- random and prefix workloads: deterministic in the seed; the prefix workload hits the cache
  for every shared prefix block after the first computation;
- a prompt file as the dataset takes output lengths from its records;
- the CI gate: a rerun passes, a planted throughput regression and a planted counter change
  fail (exit 1), a different workload is "not comparable" (exit 3).
"""
import copy
import json
import os
import sys
import time

from cli_util import MODEL, SHAREGPT, Test

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "pyref"))
import hf_tok  # noqa: E402

t = Test("cli_bench")
t.need_model()
ENGINE = ["--num-blocks", "512"]  # a fixed KV size: the workload (and its counters) is then the same everywhere


def bench(args, name=None):
    stats = t.path((name or "stats") + ".json")
    t0 = time.time()
    rc, out, err = t.run(["bench", *ENGINE, "--stats-json", stats, *args], timeout=900)
    print(f"bench {name}: {time.time() - t0:.1f} s", flush=True)
    st = json.load(open(stats)) if os.path.exists(stats) and rc in (0, 1) else {}
    return rc, st, err, stats


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


# ---------------------------------------------------------------- sharegpt, every field
N, OUT = 4, 8
rc, st, err, base_path = bench(["--dataset", "sharegpt", "--dataset-path", SHAREGPT, "--num-prompts", str(N),
                                "--output-len", str(OUT), "--repeat", "2", "--warmup", "1"], "sharegpt")
t.check(rc == 0, f"bench sharegpt exits 0: {rc} {err[-500:]}")
labels = ["Successful requests:", "Failed requests:", "Duration (s):", "Total input tokens:", "Total generated tokens:",
          "Request throughput (req/s):", "Input token throughput (tok/s):", "Output token throughput (tok/s):",
          "Total token throughput (tok/s):", "Prefix cache hit rate:", "Mean TTFT (ms):", "Median TTFT (ms):",
          "P99 TTFT (ms):", "Mean TPOT (ms):", "Median TPOT (ms):", "P99 TPOT (ms):", "Mean ITL (ms):",
          "Median ITL (ms):", "P99 ITL (ms):", "Mean E2EL (ms):",
          "Median E2EL (ms):", "P99 E2EL (ms):", "Steps:", "Preemptions:", "Prompt tokens computed:",
          "Prompt tokens cached:", "Peak KV blocks in use:", "Runs:", "95% CI", "Workload fingerprint:"]
missing = [l for l in labels if l not in err]
t.check(not missing, f"the table shows every field: missing {missing}")
keys = ["workload", "setup", "num_runs", "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
        "total_cached_tokens", "request_throughput", "input_throughput", "output_throughput", "total_token_throughput",
        "prefix_cache_hit_rate", "best_prefix_cache_hit_rate", "throughput_ci95", "runs", "counters", "counters_repeat",
        "peak_rss_mb"]
for s in ("ttft", "tpot", "itl", "e2el"):
    keys += [f"{m}_{s}_ms" for m in ("mean", "median", "std", "p99")]
missing = [k for k in keys if k not in st]
t.check(not missing, f"the stats JSON has every field: missing {missing}")
if not missing:
    c, w = st["counters"], st["workload"]
    print(json.dumps({k: st[k] for k in ("completed", "total_input_tokens", "total_output_tokens", "request_throughput",
                                         "output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")}))
    print("counters", json.dumps(c))
    # token counts add up
    ref = hf_tok.load(MODEL)
    human = [e["conversations"][0]["value"] for e in json.load(open(SHAREGPT))[:N]]
    n_in = sum(len(ref.encode(h, add_special=True, parse_special=True)) for h in human)
    t.check(st["completed"] == N == w["num_requests"] and st["failed"] == 0, f"{N} requests completed: {st['completed']}")
    t.check(st["total_input_tokens"] == w["prompt_tokens"] == c["prompt_tokens"] == n_in,
            f"input tokens: report {st['total_input_tokens']}, workload {w['prompt_tokens']}, engine {c['prompt_tokens']}, "
            f"HF tokenizers {n_in}")
    t.check(st["total_output_tokens"] == N * OUT == c["output_tokens"] == w["output_tokens"],
            f"output tokens: {st['total_output_tokens']} = {N} x {OUT} = engine {c['output_tokens']}")
    if c["preemptions"] == 0:
        t.check(c["prompt_tokens_computed"] + c["prompt_tokens_cached"] == c["prompt_tokens"],
                f"computed + cached = prompt tokens: {c}")
    else:
        t.check(c["prompt_tokens_computed"] + c["prompt_tokens_cached"] >= c["prompt_tokens"], f"with preemptions: {c}")
    t.check(st["total_cached_tokens"] == c["prompt_tokens_cached"] and
            close(st["prefix_cache_hit_rate"], c["prompt_tokens_cached"] / c["prompt_tokens"]), "cache hit rate = cached / input")
    t.check(c["requests_finished"] == N and c["requests_failed"] == 0 and c["steps"] > 0, f"engine requests: {c}")
    t.check(0 < c["peak_kv_blocks"] <= c["kv_blocks"] == 512 and c["block_size"] == 16, f"KV blocks: {c}")
    # throughputs are the counts over the durations, per run; the mean and its interval
    t.check(st["num_runs"] == 2 and len(st["runs"]) == 2 and st["counters_repeat"] is True, "two runs, counters repeat")
    for r in st["runs"]:
        d = r["duration"]
        t.check(close(r["request_throughput"] * d, N) and close(r["output_throughput"] * d, N * OUT) and
                close(r["input_throughput"] * d, n_in) and close(r["total_token_throughput"], r["input_throughput"] + r["output_throughput"]),
                f"a run's throughputs are its counts over its duration: {r}")
    for k in ("request_throughput", "input_throughput", "output_throughput", "total_token_throughput"):
        ci = st["throughput_ci95"][k]
        mean = sum(r[k] for r in st["runs"]) / 2
        t.check(close(st[k], mean) and close(ci["mean"], mean) and ci["ci95_low"] <= mean <= ci["ci95_high"] and ci["n"] == 2,
                f"{k}: the mean of the runs inside its interval: {ci}")
    # latencies
    for s in ("ttft", "tpot", "itl", "e2el"):
        t.check(isinstance(st[f"mean_{s}_ms"], float) and
                0 < st[f"median_{s}_ms"] <= st[f"p99_{s}_ms"] and st[f"mean_{s}_ms"] > 0 and st[f"std_{s}_ms"] >= 0,
                f"{s}: 0 < median <= p99: {[st[f'{m}_{s}_ms'] for m in ('mean', 'median', 'std', 'p99')]}")
    t.check(close(st["mean_e2el_ms"], st["mean_ttft_ms"] + (OUT - 1) * st["mean_tpot_ms"], 1e-4),
            f"E2E = TTFT + {OUT - 1} TPOT (every request has {OUT} tokens): {st['mean_e2el_ms']} vs "
            f"{st['mean_ttft_ms']} + {OUT - 1} x {st['mean_tpot_ms']}")
    # ITL pools the gaps between consecutive tokens; a completion's gaps sum to its last token
    # time - first token time, TPOT is (finish - first token) / (n - 1): with every completion
    # OUT tokens long, mean ITL = mean TPOT up to the microseconds between the last token and
    # finish
    itl_ok = abs(st["mean_itl_ms"] - st["mean_tpot_ms"]) <= 1e-3 * st["mean_tpot_ms"] + 0.05
    t.check(itl_ok, f"mean ITL = mean TPOT when every output has {OUT} tokens: {st['mean_itl_ms']} vs {st['mean_tpot_ms']}")
    t.check(st["p99_itl_ms"] <= st["duration"] * 1e3 and st["mean_itl_ms"] * (OUT - 1) <= st["mean_e2el_ms"] - st["mean_ttft_ms"] + 0.05,
            "(OUT - 1) mean ITL <= E2E - TTFT")
    t.check(st["mean_e2el_ms"] <= st["duration"] * 1e3 * 1.001, "no request lasts longer than its run")

# ---------------------------------------------------------------- generate's statistics: the same names, ITL included
gp = t.write("gen.jsonl", [{"id": i, "prompt": f"Count to {i + 3}:", "max_tokens": 6, "ignore_eos": True} for i in range(3)])
gs = t.path("gen-stats.json")
rc, out, err = t.run(["generate", gp, *ENGINE, "--stats-json", gs])
g = json.load(open(gs)) if rc == 0 and os.path.exists(gs) else {}
t.check(rc == 0 and g.get("completed") == 3 and g.get("total_output_tokens") == 18, f"generate runs: {rc} {err[-300:]}")
t.check(all(f"{m} {n} (ms):" in err for m in ("Mean", "Median", "P99") for n in ("TTFT", "TPOT", "ITL", "E2EL")),
        f"generate's table shows TTFT, TPOT, ITL, E2EL: {err[-1500:]}")
if g:
    t.check(all(isinstance(g.get(f"{m}_itl_ms"), float) for m in ("mean", "median", "std", "p99")), "generate: ITL in --stats-json")
    t.check(abs(g["mean_itl_ms"] - g["mean_tpot_ms"]) <= 1e-3 * g["mean_tpot_ms"] + 0.05,
            f"generate: mean ITL = mean TPOT (every output 6 tokens): {g['mean_itl_ms']} vs {g['mean_tpot_ms']}")

rc, _, err = t.run(["bench", "--dataset", "sharegpt"])
t.check(rc == 2 and "--dataset-path" in err, f"sharegpt without --dataset-path: exit 2 and says so: {rc} {err}")

# ---------------------------------------------------------------- default output length (no replies in the sample)
rc, st2, err, _ = bench(["--dataset", "sharegpt", "--dataset-path", SHAREGPT, "--num-prompts", "1", "--quiet"], "default")
t.check(rc == 0 and st2.get("total_output_tokens") == 128 and st2.get("workload", {}).get("output_len") == "from data",
        f"no reply in the data: 128 output tokens each: {st2.get('total_output_tokens')}")

# ---------------------------------------------------------------- random and prefix workloads
R = ["--dataset", "random", "--num-prompts", "3", "--input-len", "24", "--output-len", "2", "--quiet"]
rc1, a, _, _ = bench(R + ["--seed", "5"], "r1")
rc2, b, _, _ = bench(R + ["--seed", "5"], "r2")
rc3, c3, _, _ = bench(R + ["--seed", "6"], "r3")
t.check(rc1 == rc2 == rc3 == 0 and a["workload"]["fingerprint"] == b["workload"]["fingerprint"] != c3["workload"]["fingerprint"],
        "random: the same seed gives the same workload, another seed another")
t.check(a["counters"] == b["counters"] and a["total_input_tokens"] == 72, f"random: exact counters repeat: {a.get('counters')}")
P = ["--dataset", "prefix", "--num-prompts", "8", "--num-prefixes", "2", "--prefix-len", "64", "--input-len", "8",
     "--output-len", "2", "--quiet"]
rc, p, err, _ = bench(P, "prefix")
pc = p.get("counters", {})
# 8 prompts of 64 + 8 tokens over 2 prefixes of 4 full blocks: each prefix is computed once and
# served from the cache to the 3 other prompts that share it
t.check(rc == 0 and p["total_input_tokens"] == 8 * 72 and pc.get("prompt_tokens_cached") == 6 * 64,
        f"prefix: every shared prefix block computed once: cached {pc.get('prompt_tokens_cached')} (want {6 * 64}), {pc}")
t.check(rc == 0 and close(p["prefix_cache_hit_rate"], 6 * 64 / (8 * 72)), f"prefix: hit rate {p.get('prefix_cache_hit_rate')}")
t.check(rc == 0 and pc.get("best_cached_tokens") == 6 * 64 and close(p["best_prefix_cache_hit_rate"], p["prefix_cache_hit_rate"])
        and pc.get("prompt_blocks_recomputed") == 0 and pc.get("prompt_blocks_computed") == 8 * 4 - 6 * 4,
        f"prefix: the best achievable rate is reached, no shared block computed twice: {pc}")
rc, pf, err, _ = bench(P + ["--eviction", "future"], "prefix-future")
t.check(rc == 0 and pf["workload"]["engine"]["eviction"] == "future" and pf["total_output_tokens"] == 16,
        f"--eviction future runs and is part of the workload: {rc} {err[-300:]}")

# ---------------------------------------------------------------- a prompt file as the dataset
f = t.write("prompts.jsonl", [{"id": i, "prompt": f"Tell me about {i}.", "max_tokens": 2 + i} for i in range(4)] +
            [{"id": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}, {"id": "bad"}])
rc, fs, err, _ = bench(["--dataset", f], "file")
t.check(rc == 0 and fs.get("total_output_tokens") == 2 + 3 + 4 + 5 + 3 and fs["workload"]["dataset"] == "file"
        and "skipping a bad record" in err, f"a prompt file: output lengths from max_tokens, bad records skipped and said: "
        f"{fs.get('total_output_tokens')} {err[-300:]}")

# ---------------------------------------------------------------- the CI gate
G = ["--dataset", "random", "--num-prompts", "4", "--input-len", "32", "--output-len", "4", "--seed", "1", "--quiet"]
rc, g0, err, gpath = bench(G, "gate-base")
t.check(rc == 0, f"gate baseline: {rc} {err[-300:]}")
rc, _, err, _ = bench(G + ["--baseline", gpath, "--max-regression", "90%"], "gate-rerun")
t.check(rc == 0 and "verdict: PASS" in err and "vs baseline" in err and "steps" in err, f"a rerun passes the gate: {rc} {err[-900:]}")

planted = copy.deepcopy(g0)
for k in ("request_throughput", "input_throughput", "output_throughput", "total_token_throughput"):
    planted[k] *= 10  # the baseline was 10x faster: now a 90% regression
    for r in planted["runs"]:  # the gate reads the per-run values
        r[k] *= 10
ppath = t.path("planted-speed.json")
json.dump(planted, open(ppath, "w"))
rc, _, err, _ = bench(G + ["--baseline", ppath, "--max-regression", "20"], "gate-speed")
t.check(rc == 1 and "verdict: FAIL" in err and "FAIL (a drop past the limit" in err, f"a planted throughput regression fails: {rc} {err[-900:]}")

planted = copy.deepcopy(g0)
planted["counters"]["steps"] += 1
cpath = t.path("planted-counter.json")
json.dump(planted, open(cpath, "w"))
rc, _, err, _ = bench(G + ["--baseline", cpath, "--max-regression", "100"], "gate-counter")
t.check(rc == 1 and "verdict: FAIL" in err and "changed" in err, f"a changed exact counter fails: {rc} {err[-900:]}")

rc, _, err, _ = bench([*G[:-3], "--seed", "2", "--quiet", "--baseline", gpath], "gate-other")
t.check(rc == 3 and "not comparable" in err and "fingerprint" in err and "FAIL" not in err,
        f"another workload is not comparable (exit 3), not a regression: {rc} {err[-600:]}")
rc, _, err = t.run(["bench", *G, "--baseline", t.path("nope.json")])
t.check(rc == 3 and "nope.json" in err, f"a missing baseline: exit 3 naming it: {rc} {err[-200:]}")
rc, _, err = t.run(["bench", *G, "--max-regression", "five"])
t.check(rc == 2 and "--max-regression" in err, "a bad --max-regression: exit 2")

t.finish()
