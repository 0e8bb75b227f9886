#!/usr/bin/env python3
"""spec_ceiling: the most that draft-free speculation (prompt lookup, n-grams) can gain on
spec_bench's copy workload on this machine, against what pllm measures there, in one run.

    bench/spec_ceiling.py [--pllm build/pllm] [--step-bench build/bench/spec_step_bench]
                          [--threads 2] [--repeat 7] [--keep DIR]

spec_bench.py sets the CPU targets (copy1 >= 2x, copy16 >= 1.3x output tokens/s against
--speculate off). This answers whether a policy could reach them with these proposers and this
backend's step costs, by an upper bound that no online policy can beat:

  1. The workload and its greedy outputs: spec_bench's 32 copy requests, run once through
     `pllm generate` (greedy, ignore EOS, each request's max_tokens: what `pllm bench` runs), and
     their prompts' token ids (`pllm tokenize`).
  2. The best proposal at every output position m, in hindsight: any copy of the text that
     follows an earlier occurrence of the last token (of the prompt, the output so far, or any
     other request's whole output), kept as far as it agrees with the real output. That is every
     proposal prompt lookup (a suffix of n >= 1 tokens, any occurrence) or an n-gram table over
     the batch could make, and the best of them, with no wrong draft ever run.
  3. Step costs measured here, in the same run (bench/spec_step_bench: the CPU backend's
     verification step, the CLI's KV cache type, at the workload's mean decode context): the
     wall time of a step of S sequences with k drafts each, for S in 1, 2, 4, 8, 16 and k in
     0, 1, 2, 4, 8, 16 (linear in between). For copy1 the one-sequence row is shifted so that
     a step with no drafts costs what `pllm bench --speculate off` measured a decode step to
     cost (the bench's step came out ~0.5 ms dearer than the engine's); the drafts' costs are
     the bench's.
  4. The fastest decode in hindsight:
       copy1  (1 sequence): dynamic programming over each request's positions: a step at m runs
              j <= min(16, acc(m)) drafts, all kept, and costs cost(1, j); the minimum total;
       copy16 (16 sequences, the engine's admission order): every step, each sequence drafts
              all the tokens its best proposal would have right (a kept draft, ~0.75 ms at 16
              sequences, costs less than the ~1.4 ms per sequence of the step that would
              otherwise produce it), the step costing cost(S, mean k).
     The decode time with --speculate off is the same model with no drafts.
  5. The ceilings: decode alone, off / best, which bounds the whole run's ratio (prefill is
     the same work in both); and for copy1 the whole run's, with the prefill and other time
     that `pllm bench --speculate off` measures (its duration minus its requests' decode
     spans) added to both sides.

  6. The same two ceilings with the engine's own proposer (prompt lookup's rule, the n-gram
     table's turn taken by the best proposal), and, for copy1, the engine's auto policy replayed
     on those proposals with these costs (an online policy of the engine's kind: not a bound).

The ceiling is generous to speculation: proposals are the best in hindsight, no draft is ever
wrong, no step ever explores, and spec_step_bench's steps cost less than the engine's own (a
step trace of copy1 on 2026-11-27: 8 drafts 10.2 ms in the engine, 8.6 in the bench; the
engine's sequence is at many contexts, the bench's at one). Prints the cost grid, the
proposals' statistics and the ceilings.
"""
import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import spec_bench  # noqa: E402

MAX_DRAFT = 16
SEQS = [1, 2, 4, 8, 16]
KS = [0, 1, 2, 4, 8, 16]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"spec_ceiling: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


def workload(args, tmp):
    """The copy workload (spec_bench's), its prompts' ids and its greedy outputs' ids."""
    path = os.path.join(tmp, "copy.jsonl")
    work = spec_bench.write_copy_workload(args.pllm, path, tmp)
    prompts = {}
    for line in run([args.pllm, "tokenize", "--no-total", path]).splitlines():
        if line.strip():
            r = json.loads(line)
            prompts[r["id"]] = r["token_ids"]
    out = os.path.join(tmp, "out.jsonl")
    run([args.pllm, "generate", path, "-o", out, "--overwrite", "--token-ids", "--temperature", "0",
         "--ignore-eos", "--order", "input", "-t", str(args.threads), "-q"])
    outputs = {}
    for line in open(out):
        r = json.loads(line)
        if "token_ids" not in r:
            sys.exit(f"spec_ceiling: {out}: request {r.get('id')} has no output: {line[:200]}")
        outputs[r["id"]] = r["token_ids"]
    ids = [r["id"] for r in work]
    for r in work:
        if len(outputs[r["id"]]) != r["max_tokens"]:
            sys.exit(f"spec_ceiling: request {r['id']}: {len(outputs[r['id']])} output tokens, "
                     f"expected max_tokens {r['max_tokens']}")
    return path, ids, prompts, outputs


def best_accepts(ids, prompts, outputs):
    """acc[id][m]: the most drafts any proposal at output position m (m tokens generated) gets
    right: the longest agreement between the real continuation out[m:] and the text after any
    earlier occurrence of out[m-1] in prompt + out[:m-1], or after any occurrence in another
    request's output."""
    acc = {}
    glob = {}  # token -> (request, position) of its occurrences in every output
    for i in ids:
        for pos, t in enumerate(outputs[i][:-1]):
            glob.setdefault(t, []).append((i, pos))
    for i in ids:
        p, o = prompts[i], outputs[i]
        where = {}  # token -> positions in h (the history) where it occurs
        h = list(p)
        for pos, t in enumerate(h):
            where.setdefault(t, []).append(pos)
        a = [0] * (len(o) + 1)
        for m in range(1, len(o)):
            last = o[m - 1]
            h.append(last)
            best = 0
            cont = o[m:m + MAX_DRAFT]
            for pos in where.get(last, ()):  # occurrences before the last token itself
                n = 0
                while n < len(cont) and pos + 1 + n < len(h) and h[pos + 1 + n] == cont[n]:
                    n += 1
                best = max(best, n)
                if best == len(cont):
                    break
            if best < len(cont):
                for j, pos in glob.get(last, ()):
                    if j == i:
                        continue
                    q = outputs[j]
                    n = 0
                    while n < len(cont) and pos + 1 + n < len(q) and q[pos + 1 + n] == cont[n]:
                        n += 1
                    best = max(best, n)
            where.setdefault(last, []).append(len(h) - 1)
            a[m] = min(best, len(o) - m - 1)  # drafts past the last token are never run
        acc[i] = a
    return acc


def lookup_accepts(ids, prompts, outputs, best):
    """acc[id][m] for the engine's prompt lookup (engine/speculate.c: the longest suffix of 8 down
    to 1 tokens that occurs earlier in prompt + output, its most recent occurrence; 16 drafts),
    kept as far as they agree with the real output; where it finds no match (the engine then
    asks its n-gram table), the best proposal of best_accepts."""
    acc, match = {}, {}
    for i in ids:
        p, o = prompts[i], outputs[i]
        h = list(p)
        where = {}
        for pos, t in enumerate(h):
            where.setdefault(t, []).append(pos)
        a = [0] * (len(o) + 1)
        ml = [0] * (len(o) + 1)
        for m in range(1, len(o)):
            h.append(o[m - 1])
            n = len(h)
            found = -1
            for k in range(min(8, n - 1), 0, -1):  # suffix h[n-k:], an occurrence ending before n-1
                for e in reversed(where.get(h[-1], ())):  # e: where that occurrence ends
                    if e - k + 1 >= 0 and h[e - k + 1:e + 1] == h[n - k:]:
                        found = e + 1
                        break
                if found >= 0:
                    ml[m] = k
                    break
            where.setdefault(h[-1], []).append(n - 1)
            if found < 0:
                a[m] = best[i][m]
                continue
            cont, d = o[m:m + MAX_DRAFT], h[found:found + MAX_DRAFT]
            j = 0
            while j < len(cont) and j < len(d) and d[j] == cont[j]:
                j += 1
            a[m] = min(j, len(o) - m - 1)
        acc[i] = a
        match[i] = ml
    return acc, match


def step_costs(args, ctx):
    """cost[S][k]: median wall seconds of a step of S sequences with k drafts each."""
    cost = {}
    for s in SEQS:
        ks = [k for k in KS if s * (k + 1) <= 512]
        outp = run([args.step_bench, "--threads", str(args.threads), "--seqs", str(s), "--ctx", str(ctx),
                    "--drafts", ",".join(map(str, ks)), "--repeat", str(args.repeat)])
        row = {}
        for line in outp.splitlines():
            line = line.strip()
            if line.startswith("k ") and "median" in line:
                k = int(line.split()[1].rstrip(":"))
                row[k] = float(line.split("median")[1].split("ms")[0]) / 1e3
        cost[s] = row
    return cost


def interp(xs, ys, x):
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:  # past the grid: the last segment's slope
        return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - xs[-1])
    i = bisect.bisect_right(xs, x) - 1
    return ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])


def step_cost(cost, s, k_mean):
    """A step of s sequences with k_mean drafts each on average: linear in k on the measured
    rows, linear in s between the measured batch sizes."""
    def at(si):
        row = cost[si]
        ks = sorted(row)
        return interp(ks, [row[k] for k in ks], k_mean)
    if s in cost:
        return at(s)
    lo = max(x for x in SEQS if x < s)
    hi = min(x for x in SEQS if x > s)
    return at(lo) + (at(hi) - at(lo)) * (s - lo) / (hi - lo)


def copy1_best(ids, outputs, acc, cost):
    off = best = 0.0
    steps = 0
    c1 = lambda j: step_cost(cost, 1, j)
    for i in ids:
        o, a = outputs[i], acc[i]
        n = len(o)
        # T[m]: the least time to generate tokens m..n-1 (token 0 comes with the prefill)
        T = [0.0] * (n + 1)
        nxt = [0] * (n + 1)
        for m in range(n - 1, 0, -1):
            bt, bj = None, 0
            for j in range(0, a[m] + 1):
                t = c1(j) + T[min(n, m + 1 + j)]
                if bt is None or t < bt:
                    bt, bj = t, j
            T[m], nxt[m] = bt, bj
        best += T[1]
        m = 1
        while m < n:
            steps += 1
            m += 1 + nxt[m]
        off += (n - 1) * c1(0)
    return off, best, steps


def copy16_best(ids, outputs, acc, cost, slots=16):
    def sim(draft):
        queue, active, pos = list(ids), [], {}
        t, steps = 0.0, 0
        while queue or active:
            while queue and len(active) < slots:
                i = queue.pop(0)
                active.append(i)
                pos[i] = 1  # the prefill made token 0
            active = [i for i in active if pos[i] < len(outputs[i])]
            if not active:
                continue
            drafts = 0
            for i in active:
                j = acc[i][pos[i]] if draft else 0
                drafts += j
                pos[i] += 1 + j
            t += step_cost(cost, len(active), drafts / len(active))
            steps += 1
            active = [i for i in active if pos[i] < len(outputs[i])]
        return t, steps
    off, _ = sim(False)
    best, steps = sim(True)
    return off, best, steps


def copy1_policy(ids, outputs, look, match, cost):
    """copy1 under the engine's auto policy (engine/speculate.c pllm_spec_choose), replayed on
    the engine's proposals with these step costs: per-draft acceptance alpha from the
    sequence's recent history (decay 0.8) with its source's run rate as prior (sources: match
    length 1, 2, 3, >= 4), drafts added while (G + g) t <= G (t + b) fails, with the linear
    fit t = a + b k of the cost row. An online policy of the engine's kind, not a bound."""
    ks = sorted(cost[1])
    n = len(ks)
    mk, mt = sum(ks) / n, sum(cost[1][k] for k in ks) / n
    b = sum((k - mk) * (cost[1][k] - mt) for k in ks) / sum((k - mk) ** 2 for k in ks)
    a = mt - b * mk
    src_acc, src_tr = [0.0] * 4, [0.0] * 4
    acc_all = tr_all = 0.0
    t = 0.0
    steps = drafts = 0
    for i in ids:
        o = outputs[i]
        sa = st = 0.0
        m = 1
        while m < len(o):
            mlen, right, avail = match[i][m], look[i][m], min(MAX_DRAFT, len(o) - m - 1)
            k = 0
            src = min(max(mlen, 1), 4) - 1
            if mlen > 0 and avail > 0:
                glob = (acc_all + 1) / (tr_all + 2)
                prior = (src_acc[src] + 4 * glob) / (src_tr[src] + 4)
                alpha = (sa + 4 * prior) / (st + 4)
                G, tt, g = 1.0, a, alpha
                while k < avail and not ((G + g) * tt <= G * (tt + b) or g < 0.02):
                    G, tt, g, k = G + g, tt + b, g * alpha, k + 1
            kept = min(right, k)
            if k > 0:
                tr = kept + (kept < k)
                acc_all, tr_all = acc_all + kept, tr_all + tr
                src_acc[src] += kept
                src_tr[src] += tr
                sa, st = 0.8 * sa + kept, 0.8 * st + tr
            t += step_cost(cost, 1, k)
            steps += 1
            drafts += k
            m += 1 + kept
    return t, steps, drafts


def measured(args, path, case):
    extra = ["-n", "32", "--max-seqs", "1" if case == "copy1" else "16"]
    js = spec_bench.bench(argparse.Namespace(pllm=args.pllm, threads=args.threads), path, extra, "off")
    return js


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pllm", default=os.path.join(ROOT, "build", "pllm"))
    ap.add_argument("--step-bench", default=os.path.join(ROOT, "build", "bench", "spec_step_bench"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7, help="spec_step_bench repeats per cost")
    ap.add_argument("--keep", help="keep the workload and outputs here")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="spec_ceiling")
    os.makedirs(tmp, exist_ok=True)
    print(f"spec_ceiling: {args.threads} threads, load average at start {os.getloadavg()[0]:.1f}")

    path, ids, prompts, outputs = workload(args, tmp)
    acc = best_accepts(ids, prompts, outputs)
    n_out = sum(len(outputs[i]) for i in ids)
    ctx = round(sum(len(prompts[i]) + len(outputs[i]) / 2 for i in ids) / len(ids))
    right = sum(sum(1 for m in range(1, len(outputs[i])) if acc[i][m] > 0) for i in ids)
    print(f"  workload: 32 copy requests, {sum(len(prompts[i]) for i in ids)} prompt and {n_out} output "
          f"tokens, mean decode context {ctx}; the best proposal has its first draft right at "
          f"{100.0 * right / (n_out - len(ids)):.0f}% of the output positions")

    look, match = lookup_accepts(ids, prompts, outputs, acc)
    right_pl = sum(sum(1 for m in range(1, len(outputs[i])) if look[i][m] > 0) for i in ids)
    print(f"  the engine's prompt lookup has it right at {100.0 * right_pl / (n_out - len(ids)):.0f}%")

    cost = step_costs(args, ctx)
    print("  step cost, ms (spec_step_bench, median wall), S sequences x k drafts each:")
    for s in SEQS:
        print(f"    S {s:2d}: " + "  ".join(f"k{k} {1e3 * v:6.2f}" for k, v in sorted(cost[s].items())))

    js1 = measured(args, path, "copy1")
    js16 = measured(args, path, "copy16")
    # copy1 runs one request at a time: its decode is the sum of the requests' spans after their
    # first token; the rest (prefill, model load, the engine's host work) is the same with
    # speculation, and copy16 runs the same prompts (its prefill-carrying steps took the same
    # ~5.4 s in a step trace, 2026-11-27), so it is taken as copy16's non-decode time too
    decode1 = js1["completed"] * (js1["mean_e2el_ms"] - js1["mean_ttft_ms"]) / 1e3
    rest = js1["duration"] - decode1
    decode16 = js16["duration"] - rest
    print(f"  measured with --speculate off: copy1 {js1['duration']:.2f} s, of which decode {decode1:.2f} s; "
          f"copy16 {js16['duration']:.2f} s, so decode ~{decode16:.2f} s; the rest {rest:.2f} s")
    # one sequence's step cost calibrated to the engine's: its decode steps with --speculate off
    # took decode1 / (outputs - 1 each) seconds; the bench's k drafts add what they add there
    shift = decode1 / (n_out - len(ids)) - cost[1][0]
    cost1 = dict(cost)
    cost1[1] = {k: v + shift for k, v in cost[1].items()}
    print(f"  copy1's costs: the bench's one-sequence row shifted by {1e3 * shift:+.2f} ms to the engine's "
          f"measured {1e3 * cost1[1][0]:.2f} ms a decode step")
    for name, table in (("best proposal in hindsight", acc), ("the engine's prompt lookup", look)):
        off1, best1, steps1 = copy1_best(ids, outputs, table, cost1)
        off16, best16, steps16 = copy16_best(ids, outputs, table, cost)
        r1, r16 = off1 / best1, off16 / best16
        print(f"  {name}, every draft chosen in hindsight (never a wrong one):")
        print(f"    copy1:  {steps1} steps, {(n_out - len(ids)) / steps1:.2f} tokens a step; decode {r1:.2f}x "
              f"(modelled off {off1:.2f} s); whole run {js1['duration'] / (rest + decode1 / r1):.2f}x (target 2.0)")
        print(f"    copy16: {steps16} steps; decode {r16:.2f}x (modelled off {off16:.2f} s); whole run "
              f"{js16['duration'] / (rest + decode16 / r16):.2f}x (target 1.3)")
    tp, sp, dp = copy1_policy(ids, outputs, look, match, cost1)
    off1 = sum((len(outputs[i]) - 1) * step_cost(cost1, 1, 0) for i in ids)
    print(f"  the engine's prompt lookup and auto policy (replayed, not a bound): copy1 {sp} steps, {dp} drafts "
          f"({100.0 * (n_out - len(ids) - sp) / max(1, dp):.0f}% kept); decode {off1 / tp:.2f}x; whole run "
          f"{js1['duration'] / (rest + decode1 * tp / off1):.2f}x")
    print(f"  load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
