#!/usr/bin/env python3
"""sampler_ref.py: checks pllm's sampler against an independent numpy implementation of the
semantics stated in model/sampling.h (written from that header, not from model/sampler.c).

Runs the C sampler through tests/sampler_tool (JSON cases on stdin) and checks:
  1. pllm_rng_uniform bit-for-bit against a Python-integer SplitMix64 on random (seed, step);
  2. a few hundred random cases (vocab 1..5000, a few larger; random logits with ties, -inf,
     NaN and +inf; random params, histories, bans): the token must equal the reference's
     unless the reference finds the case ambiguous (the drawn u, the top-p cut or a min_p
     threshold within 1e-6 of a boundary; such cases are counted and skipped), logprobs within
     1e-5 (relative beyond magnitude 1), top-N ids exactly;
  3. sampling frequencies over many steps against the filtered distribution (chi-square), and
     that every drawn token lies in the kept set.

usage: sampler_ref.py path/to/sampler_tool [n_cases] [seed]
"""
import json
import math
import subprocess
import sys
from collections import Counter

import numpy as np

M64 = (1 << 64) - 1
FLT_MAX = float(np.finfo(np.float32).max)
EPS_BOUNDARY = 1e-6


# ---- the reference, from sampling.h -----------------------------------------------------

def splitmix_fin(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def rng_uniform(seed, step):
    key = splitmix_fin(seed ^ 0x243F6A8885A308D3)
    x = splitmix_fin((key + (step + 1) * 0x9E3779B97F4A7C15) & M64)
    return (x >> 11) * 2.0 ** -53


def to_f32(v):
    if v == "nan":
        return np.float32(np.nan)
    if v == "inf":
        return np.float32(np.inf)
    if v == "-inf":
        return np.float32(-np.inf)
    return np.float32(v)


class Ref:
    """The outcome of one case: token, raw logprobs, kept set and probabilities (random
    path), and whether rounding could flip the result (ambiguous)."""

    def __init__(self, case):
        f32 = np.float32
        p = dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                 presence_penalty=0.0, frequency_penalty=0.0, seed="0", logprobs=0)
        p.update(case.get("params", {}))
        l = np.array([to_f32(v) for v in case["logits"]], dtype=np.float32)
        n = len(l)
        # Input: NaN -> -inf, +inf -> FLT_MAX.
        l[np.isnan(l)] = -np.inf
        l[np.isposinf(l)] = np.float32(FLT_MAX)
        raw = l.copy()
        ids = np.arange(n)

        # Raw logprobs (float64 log_softmax), top-N by raw logit desc, id asc.
        r64 = raw.astype(np.float64)
        rmax = r64.max()
        if rmax == -np.inf:
            self.logprobs = np.full(n, -np.inf)
        else:
            self.logprobs = r64 - (rmax + math.log(np.sum(np.exp(r64 - rmax))))
        n_top = min(int(p["logprobs"]), n)
        order = np.lexsort((ids, -r64))
        self.top_ids = [int(i) for i in order[:n_top]]

        def valid(xs):
            return [int(i) for i in xs if 0 <= i < n]

        prompt, output, banned = (valid(case.get(k, [])) for k in ("prompt", "output", "banned"))
        with np.errstate(all="ignore"):
            # 1. bans
            for b in banned:
                l[b] = -np.inf
            # 2. repetition penalty over distinct ids of prompt and output
            r = f32(p["repetition_penalty"])
            if r != f32(1):
                for i in set(prompt) | set(output):
                    v = l[i]
                    l[i] = min(v / r if v > 0 else v * r, f32(FLT_MAX))
            # 3. frequency / presence over output
            fp, pp = f32(p["frequency_penalty"]), f32(p["presence_penalty"])
            if fp != 0 or pp != 0:
                for i, c in Counter(output).items():
                    l[i] = min(l[i] - (fp * f32(c) + pp), f32(FLT_MAX))
        self.processed = l
        self.ambiguous = []
        self.n_topp = 0  # candidates entering top-p
        self.kept = None
        banned_set = set(banned)

        def fallback():
            for t in range(n):
                if t not in banned_set:
                    return t
            return 0

        temp, top_k = float(f32(p["temperature"])), int(p["top_k"])
        if temp == 0 or top_k == 1:
            self.token = int(np.argmax(l)) if l.max() > -np.inf else fallback()
            return
        lmax = float(l.max())
        if lmax == -np.inf:
            self.token = fallback()
            return
        l64 = l.astype(np.float64)
        with np.errstate(all="ignore"):
            w = np.exp((l64 - lmax) / temp)
        alive = l > -np.inf
        # a. min_p on the full distribution
        min_p = float(f32(p["min_p"]))
        if min_p > 0:
            d = np.abs(w - min_p)
            near = alive & (d > 0) & (d <= EPS_BOUNDARY * min_p)  # w == min_p: exp(0) == 1 exactly
            if near.any():
                self.ambiguous.append("min_p")
            alive &= w >= min_p
        # b. top_k: the k-th largest processed logit, ties kept
        if 0 < top_k < n:
            kth = np.sort(l)[::-1][top_k - 1]
            alive &= l >= kth
        # c. top_p on the renormalised survivors
        top_p = float(f32(p["top_p"]))
        if top_p < 1:
            s = ids[alive]
            self.n_topp = len(s)
            z = w[s].sum()
            o = s[np.lexsort((s, -l64[s]))]
            before = np.concatenate(([0.0], np.cumsum(w[o])[:-1]))
            if np.any(np.abs(before / z - top_p) <= EPS_BOUNDARY):
                self.ambiguous.append("top_p")
            keep = o[before < top_p * z]
            alive = np.zeros(n, dtype=bool)
            alive[keep] = True
        # d. the draw, ascending ids
        kept = ids[alive]
        c = np.cumsum(w[kept])
        total = c[-1]
        u = rng_uniform(int(p["seed"]), len(case.get("output", [])))
        target = u * total
        hit = np.nonzero(c > target)[0]
        if len(hit):
            self.token = int(kept[hit[0]])
        else:
            self.token = int(kept[np.nonzero(w[kept] > 0)[0][-1]])
        if np.any(np.abs(c / total - u) <= EPS_BOUNDARY):
            self.ambiguous.append("draw")
        self.kept = kept
        self.probs = w[kept] / total


# ---- random cases -----------------------------------------------------------------------

def f32v(x):
    return float(np.float32(x))


def jlogit(v):
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def random_case(g):
    large_topp = g.random() < 0.1
    if large_topp:
        n = int(g.integers(2500, 20000))
    elif g.random() < 0.95:
        n = max(1, int(math.exp(g.uniform(0, math.log(5000)))))
    else:
        n = int(g.integers(5000, 30000))
    kind = g.integers(4)
    if large_topp and kind == 2:
        kind = 3
    scale = g.uniform(0.3, 8.0)
    l = g.normal(0.0, scale, n)
    if kind == 1:
        l = np.round(l * 2) / 2  # many exact ties
    elif kind == 2:
        l[g.integers(0, n, size=max(1, n // 500))] += g.uniform(5, 15)  # peaked, like an LM
    elif kind == 3:
        l = g.uniform(-1, 1, n) * 0.05  # nearly flat: top-p keeps many ids
    l = l.astype(np.float32)
    if g.random() < 0.1:
        l[g.integers(0, n, size=max(1, n // 10))] = -np.inf
    if g.random() < 0.05:
        l[g.integers(0, n)] = np.nan
    if g.random() < 0.02:
        l[g.integers(0, n)] = np.inf
    params = {
        "temperature": 0.0 if g.random() < 0.2 else f32v(g.choice([g.uniform(0.05, 2.0), 1e-3, 1.0])),
        "top_k": int(g.choice([0, -1, 1, int(g.integers(1, n + 4)), int(g.integers(1, 60))])),
        "top_p": 1.0 if g.random() < 0.4 else f32v(g.choice([g.uniform(0.05, 1.0), 0.999, 0.9])),
        "min_p": 0.0 if g.random() < 0.5 else f32v(g.choice([g.uniform(0, 0.3), 1.0, 0.05])),
        "repetition_penalty": 1.0 if g.random() < 0.5 else f32v(g.uniform(0.5, 2.0)),
        "presence_penalty": 0.0 if g.random() < 0.5 else f32v(g.uniform(-2, 2)),
        "frequency_penalty": 0.0 if g.random() < 0.5 else f32v(g.uniform(-2, 2)),
        "seed": str(int(g.integers(0, 2**63)) * 2 + int(g.integers(2))),
        "logprobs": int(g.integers(0, 21)),
    }
    hot = g.integers(0, n, size=8)
    n_out = int(g.integers(0, 300))
    output = [int(hot[g.integers(8)]) if g.random() < 0.5 else int(g.integers(0, n)) for _ in range(n_out)]
    prompt = [int(g.integers(0, n)) for _ in range(int(g.integers(0, 40)))]
    if g.random() < 0.1:
        prompt += [-1, n, n + 7]  # out of range: ignored
    banned = [int(g.integers(0, n)) for _ in range(int(g.integers(0, 6)))]
    if large_topp:  # many candidates enter top-p: the histogram path
        params.update(temperature=f32v(g.uniform(0.3, 2.0)), top_k=0, top_p=f32v(g.uniform(0.05, 0.999)),
                      min_p=0.0 if g.random() < 0.7 else f32v(g.uniform(0, 0.01)))
    elif n > 1 and g.random() < 0.05:
        banned = list(range(n))  # everything banned: the fallback
    return {"logits": [jlogit(v) for v in l], "params": params, "prompt": prompt, "output": output,
            "banned": banned}


def run_tool(tool, cases):
    inp = "".join(json.dumps(c) + "\n" for c in cases)
    out = subprocess.run([tool], input=inp, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"sampler_tool failed with code {out.returncode}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def lp_value(v):
    return -math.inf if v == "-inf" else float(v)


def lp_close(got, want):
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= 1e-5 * max(1.0, abs(want))


def lp_err(max_abs, max_rel, got, want):
    if abs(want) <= 1:
        max_abs = max(max_abs, abs(got - want))
    else:
        max_rel = max(max_rel, abs(got - want) / abs(want))
    return max_abs, max_rel


# ---- checks -----------------------------------------------------------------------------

def check_rng(tool, g):
    pairs = [(int(g.integers(0, 2**63)) * 2 + int(g.integers(2)), int(g.integers(0, 2**63)) if i % 4 == 0
              else int(g.integers(0, 5000))) for i in range(2000)]
    pairs += [(0, 0), (M64, M64), (1, 0), (0, 1)]
    res = run_tool(tool, [{"rng": [[str(s), str(t)] for s, t in pairs]}])[0]["u"]
    bad = sum(1 for (s, t), u in zip(pairs, res) if u != rng_uniform(s, t))
    us = np.array(res)
    print(f"rng: {len(pairs)} (seed, step) pairs, {bad} mismatches; mean {us.mean():.4f} "
          f"(expect 0.5), min {us.min():.2e}, max {us.max():.6f}", file=sys.stderr)
    return bad == 0 and us.min() >= 0 and us.max() < 1


def check_random_cases(tool, g, n_cases):
    cases = [random_case(g) for _ in range(n_cases)]
    got = run_tool(tool, cases)
    fails = skipped = compared = 0
    max_lp_err = max_lp_rel = 0.0
    paths, reasons = Counter(), Counter()
    for i, (case, res) in enumerate(zip(cases, got)):
        ref = Ref(case)
        p = case["params"]
        paths["greedy" if p["temperature"] == 0 or p["top_k"] == 1 else "random"] += 1
        paths["top-p over > 2048 ids"] += ref.n_topp > 2048
        ok = True
        if ref.ambiguous:
            skipped += 1
            reasons.update(ref.ambiguous)
        else:
            compared += 1
            if res["token"] != ref.token:
                ok = False
                print(f"case {i}: token {res['token']} != reference {ref.token} (n={len(case['logits'])}, "
                      f"params={p})", file=sys.stderr)
        want = ref.logprobs[res["token"]]
        lp = lp_value(res["logprob"])
        if not lp_close(lp, want):
            ok = False
            print(f"case {i}: logprob {lp} != {want}", file=sys.stderr)
        elif not math.isinf(want):
            max_lp_err, max_lp_rel = lp_err(max_lp_err, max_lp_rel, lp, want)
        if res["top_ids"] != ref.top_ids:
            ok = False
            print(f"case {i}: top ids {res['top_ids']} != {ref.top_ids}", file=sys.stderr)
        for tid, tlp in zip(res["top_ids"], res["top_logprobs"]):
            tlp = lp_value(tlp)
            if not lp_close(tlp, ref.logprobs[tid]):
                ok = False
                print(f"case {i}: top logprob of {tid} {tlp} != {ref.logprobs[tid]}", file=sys.stderr)
            elif not math.isinf(tlp):
                max_lp_err, max_lp_rel = lp_err(max_lp_err, max_lp_rel, tlp, ref.logprobs[tid])
        fails += not ok
    print(f"random cases: {n_cases} ({dict(paths)}), tokens compared "
          f"{compared}, skipped as ambiguous {skipped} {dict(reasons)}, failures {fails}, max |logprob error| "
          f"{max_lp_err:.3g} (|logprob| <= 1), max relative {max_lp_rel:.3g}",
          file=sys.stderr)
    return fails == 0


def chi_square_z(counts, probs, n_draws):
    """Wilson-Hilferty z-score of Pearson's chi-square, merging cells with expected < 5."""
    exp = probs * n_draws
    order = np.argsort(exp)
    cells_o, cells_e, acc_o, acc_e = [], [], 0.0, 0.0
    for j in order:
        acc_o += counts[j]
        acc_e += exp[j]
        if acc_e >= 5:
            cells_o.append(acc_o)
            cells_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and cells_e:
        cells_o[-1] += acc_o
        cells_e[-1] += acc_e
    o, e = np.array(cells_o), np.array(cells_e)
    df = len(o) - 1
    if df < 1:
        return 0.0, 0, 0.0
    x2 = float(np.sum((o - e) ** 2 / e))
    z = ((x2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return z, df, x2


def check_frequencies(tool, g):
    ok = True
    setups = [
        dict(temperature=0.7, top_k=20, top_p=0.8, min_p=0.0),
        dict(temperature=1.3, top_k=0, top_p=0.95, min_p=0.02),
        dict(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.1),
        dict(temperature=0.5, top_k=7, top_p=1.0, min_p=0.0, repetition_penalty=1.5),
    ]
    n_draws = 20000
    for k, s in enumerate(setups):
        n = int(g.integers(30, 300))
        l = (g.normal(0, 2.0, n)).astype(np.float32)
        params = {"seed": str(int(g.integers(0, 2**63))), "logprobs": 0}
        params.update({key: f32v(v) if isinstance(v, float) else v for key, v in s.items()})
        case = {"logits": [float(v) for v in l], "params": params,
                "prompt": [int(x) for x in g.integers(0, n, size=5)], "output": [],
                "banned": [int(np.argmax(l))]}
        ref = Ref(case)
        tokens = run_tool(tool, [dict(case, repeat=n_draws)])[0]["tokens"]
        kept = {int(t): j for j, t in enumerate(ref.kept)}
        outside = sum(1 for t in tokens if t not in kept)
        counts = np.zeros(len(ref.kept))
        for t in tokens:
            if t in kept:
                counts[kept[t]] += 1
        z, df, x2 = chi_square_z(counts, ref.probs, n_draws)
        good = outside == 0 and z < 4.5
        ok &= good
        print(f"frequencies {k}: n={n} {s}: kept {len(ref.kept)} ids, {n_draws} draws, outside kept set "
              f"{outside}, chi2 {x2:.1f} on {df} df (z {z:.2f}, limit 4.5) {'ok' if good else 'FAIL'}",
              file=sys.stderr)
    return ok


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    tool = sys.argv[1]
    n_cases = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else int.from_bytes(open("/dev/urandom", "rb").read(4), "little")
    print(f"sampler_ref: seed {seed} (rerun: sampler_ref.py TOOL {n_cases} {seed})", file=sys.stderr)
    g = np.random.default_rng(seed)
    ok = check_rng(tool, g)
    ok &= check_random_cases(tool, g, n_cases)
    ok &= check_frequencies(tool, g)
    print("sampler_ref: " + ("all checks passed" if ok else "FAILED"), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
