#!/usr/bin/env python3
"""cli_gate: the bench gate judges a throughput drop against the measured noise (issue 23).

`pllm bench --baseline B --current C` gates two saved --stats-json files without running, so the
verdicts here are exact: the files are written by this test (per-run throughputs in "runs").

- both sides with 3 runs, a 5.5% drop of the mean inside a +-4% run-to-run spread: PASS (the
  old gate, one mean against a fixed 5%, failed it), and P(drop) and P(>limit) equal Welch's
  one-sided tests computed here independently (the Student-t pdf integrated numerically);
- a 10% drop with a 0.5% spread: FAIL, P(>limit) ~ 1; a 5.5% drop with a 0.5% spread is surely
  a drop (P(drop) ~ 1) but not surely past 5% (P(>limit) ~ 0.8): PASS;
- one current run against a 3-run baseline: judged against the prediction interval of one run,
  and the gate says when --max-regression is inside that noise;
- one run on each side: no noise is known; the fixed margin decides, with a warning;
- an exact counter change still fails, another workload is still not comparable (exit 3).
"""
import json
import math
import re

from cli_util import Test

t = Test("cli_gate")
KEYS = ("request_throughput", "input_throughput", "output_throughput", "total_token_throughput")
WORKLOAD = {"dataset": "random", "fingerprint": "0123456789abcdef", "num_prompts": 8, "seed": 0}


def doc(runs, steps=10):
    """A stats file whose throughputs are runs[i] (req/s), tokens/s proportional."""
    scale = {"request_throughput": 1.0, "input_throughput": 64.0, "output_throughput": 16.0, "total_token_throughput": 80.0}
    per = [{k: r * scale[k] for k in KEYS} | {"duration": 8.0 / r} for r in runs]
    d = {"command": "bench", "workload": WORKLOAD, "setup": {"device": "cpu"}, "num_runs": len(runs), "runs": per,
         "completed": 8, "failed": 0, "total_input_tokens": 512, "total_output_tokens": 128, "total_cached_tokens": 0,
         "counters": {"steps": steps, "preemptions": 0}}
    for k in KEYS:
        d[k] = sum(p[k] for p in per) / len(per)
    return d


def t_cdf(x, df):
    """P(T <= x), Student's t, by Simpson's rule on the pdf (independent of pllm's incomplete beta)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    pdf = lambda u: c * (1 + u * u / df) ** (-(df + 1) / 2)
    a, n = abs(x), 20000
    h = a / n
    s = pdf(0) + pdf(a) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, n))
    area = s * h / 3
    return 0.5 + area if x >= 0 else 0.5 - area


def welch_p_drop(b, c, limit=0.0):
    """P(mean(c) < (1 - limit/100) mean(b)), Welch's one-sided test (the limit scales b)."""
    k = 1 - limit / 100
    b = [k * x for x in b]
    mb, mc = sum(b) / len(b), sum(c) / len(c)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
    vc = sum((x - mc) ** 2 for x in c) / (len(c) - 1)
    se2 = vb / len(b) + vc / len(c)
    df = se2 ** 2 / ((vb / len(b)) ** 2 / (len(b) - 1) + (vc / len(c)) ** 2 / (len(c) - 1))
    return t_cdf((mb - mc) / math.sqrt(se2), df)


def gate(base_runs, cur_runs, extra=(), base=None, cur=None):
    bp, cp = t.path("base.json"), t.path("cur.json")
    json.dump(base or doc(base_runs), open(bp, "w"))
    json.dump(cur or doc(cur_runs), open(cp, "w"))
    rc, out, err = t.run(["bench", "--baseline", bp, "--current", cp, *extra])
    m = re.search(r"Request throughput \(req/s\)\s+\S+\s+\S+\s+(\S+)%\s+(\S+)\s+(\S+)\s+(.*)", err)
    return rc, err, (float(m.group(1)), m.group(2), m.group(3), m.group(4)) if m else (None, None, None, "")


# a 5.5% drop of the mean within the noise: the old gate's false alarm
b, c = [100.0, 104.0, 96.0], [94.5, 98.5, 90.5]
rc, err, (ch, p, pl, verdict) = gate(b, c)
want = welch_p_drop(b, c)
t.check(rc == 0 and "verdict: PASS" in err and "within the noise" in verdict,
        f"a 5.5% drop inside a +-4% spread passes: rc {rc} {err[-900:]}")
t.check(ch is not None and abs(ch - (-5.5)) < 0.06, f"the change is reported: {ch}")
t.check(p not in (None, "n/a") and abs(float(p) - want) < 0.002, f"P(drop) is Welch's one-sided test: {p} vs {want:.4f}")
t.check(pl not in (None, "n/a") and abs(float(pl) - welch_p_drop(b, c, 5)) < 0.002,
        f"P(>limit) is Welch's test against the baseline less 5%: {pl} vs {welch_p_drop(b, c, 5):.4f}")
t.check("Welch" in err, "the gate says which test it used")

# a real 10% drop: fails, P(drop) ~ 1
b, c = [100.0, 100.5, 99.5], [90.0, 90.5, 89.5]
rc, err, (ch, p, pl, verdict) = gate(b, c)
t.check(rc == 1 and "verdict: FAIL" in err and "beyond the noise" in verdict and float(p) > 0.999 and float(pl) > 0.999,
        f"a 10% drop with a 0.5% spread fails: rc {rc} {err[-900:]}")
t.check(abs(float(p) - welch_p_drop(b, c)) < 0.002, f"P(drop) {p} vs {welch_p_drop(b, c):.4f}")
# a drop just past the limit that is surely real but not surely past the limit: passes
b, c = [100.0, 100.5, 99.5], [94.5, 95.0, 94.0]
rc, err, (ch, p, pl, verdict) = gate(b, c)
t.check(rc == 0 and float(p) > 0.999 and 0.5 < float(pl) < 0.95 and abs(float(pl) - welch_p_drop(b, c, 5)) < 0.002,
        f"a 5.5% drop with a 0.5% spread: P(drop) ~1, P(>limit) {pl} < 0.95: passes: rc {rc} {err[-700:]}")
# the 10% drop, but within the limit: passes
b, c = [100.0, 100.5, 99.5], [90.0, 90.5, 89.5]
rc, err, _ = gate(b, c, ["--max-regression", "15%"])
t.check(rc == 0 and "verdict: PASS" in err, f"a 10% drop with --max-regression 15% passes: rc {rc}")

# one current run against a noisy 3-run baseline: the prediction interval of one run
b, c = [100.0, 108.0, 92.0], [93.0]
rc, err, (ch, p, pl, verdict) = gate(b, c)
sd = 8.0
want = t_cdf((100.0 - 93.0) / (sd * math.sqrt(1 + 1 / 3)), 2)
want_l = t_cdf((95.0 - 93.0) / (0.95 * sd * math.sqrt(1 + 1 / 3)), 2)
t.check(rc == 0 and "within the noise" in verdict and "inside one run's noise" in err,
        f"one run against a noisy baseline: judged against its spread, and the gate says the limit is inside it: rc {rc} {err[-900:]}")
t.check(abs(float(p) - want) < 0.002 and abs(float(pl) - want_l) < 0.002,
        f"one run: P(drop) {p} vs {want:.4f}, P(>limit) {pl} vs {want_l:.4f}")
# ... and a drop far outside that noise fails
rc, err, (ch, p, pl, verdict) = gate([100.0, 101.0, 99.0], [80.0])
t.check(rc == 1 and "beyond the noise" in verdict, f"one run far below a tight baseline fails: rc {rc} {err[-600:]}")

# one run each: no noise known, the fixed margin decides, with a warning
rc, err, (ch, p, pl, verdict) = gate([100.0], [94.0])
t.check(rc == 1 and p == "n/a" and pl == "n/a" and "noise is unknown" in err, f"one run each: the fixed margin, and a warning: rc {rc} {err[-600:]}")
rc, err, _ = gate([100.0], [96.0])
t.check(rc == 0, f"one run each, within the margin: passes: rc {rc}")

# exact counters and comparability are unchanged by the noise model
rc, err, _ = gate(None, None, base=doc([100.0, 101.0, 99.0]), cur=doc([100.0, 101.0, 99.0], steps=11))
t.check(rc == 1 and "changed" in err and "verdict: FAIL" in err, f"a changed counter fails: rc {rc} {err[-600:]}")
other = doc([100.0, 101.0, 99.0])
other["workload"] = dict(WORKLOAD, seed=1)
rc, err, _ = gate(None, None, base=doc([100.0, 101.0, 99.0]), cur=other)
t.check(rc == 3 and "not comparable" in err and "seed" in err, f"another workload: exit 3: rc {rc} {err[-600:]}")
rc, _, err = t.run(["bench", "--current", t.path("cur.json")])
t.check(rc == 2 and "--baseline" in err, f"--current without --baseline: usage error: {rc}")

t.finish()
