#!/usr/bin/env python3
"""The issue-6 CPU benchmark report in one command (run through bench/cpu_report.sh).

    bench/cpu_report.sh [--old REV] [--threads N] [--rounds R] [--work DIR] [--quick] [--no-sharegpt]
                        [--sharegpt-prompts 200] [--sharegpt-output 128]

1. Builds the version before issue 6 (--old, default 65d4b40, checked out with `git worktree add`
   into WORK/old-src) and the current working tree, both with -DPLLM_CUDA=OFF Release and the
   same flags, into WORK/old and WORK/new (incremental on later runs).
2. Measures the machine's ceilings (WORK/new/bench/ceilings --json).
3. Generates the random-weight TinyLlama-1.1B-shaped Q4_0 model into $PLLM_HOME/bench-models if
   it is missing (bench/gen_tinyllama.py).
4. On the real default model ($PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf) and the 1.1B
   one: bench/decode_bench of old and new, interleaved (R rounds, which binary goes first
   alternates), best of the rounds: one-sequence decode tok/s and its fraction of the read
   bandwidth (weight bytes read per token x tok/s / measured N-thread bandwidth; the bandwidth is
   also measured again right before each round, since a shared host's bandwidth moves from one
   minute to the next, and the note gives the median and range of new's fraction against the
   reading just before it); prefill of 512
   tokens in one step, tok/s and GOP/s (2 x matmul parameters x tokens) as a fraction of the
   int8 VNNI and the fp32 FMA peaks.
5. 200 ShareGPT prompts x 128 output tokens (--sharegpt-prompts/--sharegpt-output), ignore_eos
   (`pllm bench`), old then new: total output tok/s. On a loaded 2-core machine the old build
   needs the better part of an hour for the full size; smaller sizes keep the ratio meaningful.
Prints each figure new / old / ratio with the load (`uptime`) around each measurement, and writes
WORK/report.json. WORK defaults to $PLLM_HOME/cpu-report ($PLLM_HOME: ~/.cache/pllm).
--quick shrinks everything (a smoke run of the harness, a few minutes).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.environ.get("PLLM_HOME") or os.path.expanduser("~/.cache/pllm")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("+ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, text=True, **kw)


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def build(src, bdir, targets):
    run(["cmake", "-S", src, "-B", bdir, "-DPLLM_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Release", "-DPLLM_WERROR=OFF"],
        stdout=subprocess.DEVNULL)
    run(["cmake", "--build", bdir, "-j2", "--target"] + targets, stdout=subprocess.DEVNULL)


def model_stats(path):
    """(bytes of weights read per decoded token, matmul parameters of the layers, of the LM head)."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    names = {t.name for t in r.tensors}
    read = layer_params = head_params = 0
    for t in r.tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            pass  # untied: one row per token is looked up, the matrix is not streamed
        else:
            read += int(t.n_bytes)
        if len(t.shape) == 2 and t.name.startswith("blk."):
            layer_params += int(t.n_elements)
        if t.name == "output.weight" or (t.name == "token_embd.weight" and "output.weight" not in names):
            head_params = int(t.n_elements)
    return read, layer_params, head_params


DB = re.compile(r"prefill (\d+) tokens: ([\d.]+) tok/s .*decode (\d+) tokens after \d+: ([\d.]+) tok/s")


def read_bw(ceilings, threads, path):
    """The N-thread read bandwidth now, in bytes/s (a fresh bench/ceilings run)."""
    run([ceilings, "--threads", str(threads), "--json", path], stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)["read_bw_gbs"][str(threads)] * 1e9


def decode_bench(binary, model, threads, n_decode, n_prefill):
    out = run([binary, model, "--threads", str(threads), "--repeat", "1", "--decode", str(n_decode), "--prefill",
               str(n_prefill)], stdout=subprocess.PIPE).stdout
    m = DB.search(out)
    if not m:
        raise SystemExit(f"cpu_report: cannot parse decode_bench output:\n{out}")
    return float(m.group(2)), float(m.group(4))


def main():
    ap = argparse.ArgumentParser(description="issue-6 CPU benchmark report")
    ap.add_argument("--old", default="65d4b40")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(HOME, "cpu-report"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-sharegpt", action="store_true")
    ap.add_argument("--sharegpt-prompts", type=int, default=200)
    ap.add_argument("--sharegpt-output", type=int, default=128)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    t_start = time.time()
    loads = [("start", load())]

    # 1. builds
    old_src = os.path.join(a.work, "old-src")
    if not os.path.isdir(old_src):
        run(["git", "-C", REPO, "worktree", "add", "--detach", old_src, a.old])
    old_rev = run(["git", "-C", old_src, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE).stdout.strip()
    new_rev = run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE).stdout.strip()
    dirty = run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], stdout=subprocess.PIPE).stdout.strip()
    build(old_src, os.path.join(a.work, "old"), ["pllm", "decode_bench"])
    build(REPO, os.path.join(a.work, "new"), ["pllm", "decode_bench", "ceilings"])
    bins = {v: (os.path.join(a.work, v, "pllm"), os.path.join(a.work, v, "bench", "decode_bench")) for v in ("old", "new")}

    # 2. ceilings
    ceil_json = os.path.join(a.work, "ceilings.json")
    loads.append(("ceilings", load()))
    run([os.path.join(a.work, "new", "bench", "ceilings"), "--threads", str(a.threads), "--json", ceil_json])
    with open(ceil_json) as f:
        ceil = json.load(f)
    nt = str(a.threads)
    bw = ceil["read_bw_gbs"][nt] * 1e9
    int8_peak = (ceil.get("int8_vnni512_gops") or ceil.get("int8_avxvnni_gops") or {}).get(nt)
    fp32_peak = (ceil.get("fp32_fma_gflops") or {}).get(nt)

    # 3. models
    m135 = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(m135):
        raise SystemExit(f"cpu_report: {m135} is missing (run scripts/setup.sh)")
    m11 = os.path.join(HOME, "bench-models", "tinyllama-1.1b-random.Q4_0.gguf")
    if not os.path.exists(m11):
        os.makedirs(os.path.dirname(m11), exist_ok=True)
        run([sys.executable, os.path.join(REPO, "bench", "gen_tinyllama.py"), m11, "--dtype", "Q4_0"])

    rows = []  # (figure, new, old, unit, note)

    # 4. decode and prefill, interleaved
    for label, model, n_dec in (("135M Q4_1", m135, 128), ("1.1B Q4_0", m11, 32)):
        n_pre = 128 if a.quick else 512
        n_dec = 16 if a.quick else n_dec
        read_bytes, layer_params, head_params = model_stats(model)
        best = {"old": [0.0, 0.0], "new": [0.0, 0.0]}
        paired = []  # new's decode fraction of the bandwidth read just before its round
        l0 = load()
        for r in range(a.rounds):
            bw_r = read_bw(os.path.join(a.work, "new", "bench", "ceilings"), a.threads,
                           os.path.join(a.work, "ceilings-round.json"))
            for v in (("old", "new") if r % 2 == 0 else ("new", "old")):
                pre, dec = decode_bench(bins[v][1], model, a.threads, n_dec, n_pre)
                best[v] = [max(best[v][0], pre), max(best[v][1], dec)]
                if v == "new":
                    paired.append(dec * read_bytes / bw_r)
                    log(f"{label} new: decode {dec:.1f} tok/s, {100 * paired[-1]:.0f}% of {bw_r / 1e9:.1f} GB/s read just before")
        loads.append((f"decode_bench {label}", max(l0, load())))
        for v in ("old", "new"):
            log(f"{label} {v}: prefill {best[v][0]:.1f} tok/s, decode {best[v][1]:.1f} tok/s")
        dn, do = best["new"][1], best["old"][1]
        pn, po = best["new"][0], best["old"][0]
        ops_per_tok = 2 * layer_params + 2 * head_params / n_pre
        rows.append((f"{label} decode, 1 seq", dn, do, "tok/s",
                     f"{read_bytes / 1e6:.0f} MB/token: {100 * dn * read_bytes / bw:.0f}% of read bw (old {100 * do * read_bytes / bw:.0f}%); "
                     f"per round against the bandwidth read just before: median {100 * statistics.median(paired):.0f}% "
                     f"({100 * min(paired):.0f}-{100 * max(paired):.0f}%)"))
        note = f"{pn * ops_per_tok / 1e9:.1f} GOP/s"
        if int8_peak:
            note += f": {100 * pn * ops_per_tok / 1e9 / int8_peak:.1f}% of int8 VNNI peak"
        if fp32_peak:
            note += f", {100 * pn * ops_per_tok / 1e9 / fp32_peak:.1f}% of fp32 peak"
        note += f" (old {po * ops_per_tok / 1e9:.1f} GOP/s)"
        rows.append((f"{label} prefill {n_pre}", pn, po, "tok/s", note))

    # 5. ShareGPT batch
    if not a.no_sharegpt:
        data = os.path.join(os.environ.get("PLLM_SHARED_DATA", os.path.join(REPO, "..", "shared", "data")), "sharegpt",
                            "ShareGPT_V3_filtered_1000.json")
        n_prompts, out_len = (16, 16) if a.quick else (a.sharegpt_prompts, a.sharegpt_output)
        res = {}
        l0 = load()
        for v in ("old", "new"):
            sj = os.path.join(a.work, f"sharegpt-{v}.json")
            run([bins[v][0], "bench", "--dataset", "sharegpt", "--dataset-path", data, "--num-prompts", str(n_prompts),
                 "--output-len", str(out_len), "--threads", str(a.threads), "--model", m135, "-q", "--stats-json", sj])
            with open(sj) as f:
                res[v] = json.load(f)
        loads.append(("sharegpt", max(l0, load())))
        rows.append((f"ShareGPT {n_prompts} x {out_len} (135M)", res["new"]["output_throughput"],
                     res["old"]["output_throughput"], "out tok/s",
                     f"total {res['new']['total_token_throughput']:.0f} tok/s (old {res['old']['total_token_throughput']:.0f}), "
                     f"{res['new']['duration']:.0f} s vs {res['old']['duration']:.0f} s"))

    loads.append(("end", load()))
    # report
    print(f"\nissue-6 CPU report: new {new_rev}{' + uncommitted changes' if dirty else ''} vs old {old_rev}, "
          f"{a.threads} threads, {time.time() - t_start:.0f} s")
    print("ceilings (" + nt + " threads): read bw %.1f GB/s; fp32 FMA %s GFLOP/s; int8 VNNI %s GOP/s; AMX int8 %s GOP/s" % (
        bw / 1e9, f"{fp32_peak:.0f}" if fp32_peak else "-", f"{int8_peak:.0f}" if int8_peak else "-",
        f"{ceil['int8_amx_gops'][nt]:.0f}" if ceil.get("int8_amx_gops") else "-"))
    print(f"{'figure':34} {'new':>9} {'old':>9} {'ratio':>7}  unit      notes")
    for name, n, o, unit, note in rows:
        print(f"{name:34} {n:9.1f} {o:9.1f} {n / o if o else float('nan'):6.2f}x  {unit:9} {note}")
    print("load (1-min average, the max seen around each measurement): " + ", ".join(f"{k} {v:.1f}" for k, v in loads))
    with open(os.path.join(a.work, "report.json"), "w") as f:
        json.dump(dict(new=new_rev, dirty=bool(dirty), old=old_rev, threads=a.threads, ceilings=ceil,
                       rows=[dict(figure=r[0], new=r[1], old=r[2], unit=r[3], note=r[4]) for r in rows], load=loads), f,
                  indent=1)


if __name__ == "__main__":
    main()
