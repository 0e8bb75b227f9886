#!/usr/bin/env python3
"""cli_devices: `pllm generate --device cuda:0,1` (a worker per device, one output), on pllm-emu
with two emulated devices (PLLM_CUEMU_DEVICES=2; each worker is its own process, so each has its
own emulated device) and the default model.

1. The two-device run's output equals a one-device run's, record for record (greedy text and
   tokens), every id once; the workers split the prompts (both get some); each device's share is
   in the report and in --stats-json ("devices"), and the shares add up to the merged counters.
2. SIGINT to the parent mid-run reaches the workers: exit 130, nothing merged, the workers'
   files kept; the same command with --resume finishes the job, equal to the one-device run.
3. Usage errors before any work: a device out of range, a device named twice, --shard with a
   list, no -o, bench with a list, a list entry that is not a CUDA device.

usage: cli_devices.py PLLM_EMU
"""
import json
import os
import signal
import subprocess
import sys
import time

EMU = sys.argv[1]
HOME = os.environ.get("PLLM_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pllm")
MODEL = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TMP = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "cli_devices")
ENV = dict(os.environ, PLLM_CUEMU_DEVICES="2")
SANITIZE = bool(os.environ.get("PLLM_SANITIZE"))
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def run(args, timeout=900):
    p = subprocess.run([EMU] + args, capture_output=True, text=True, env=ENV, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def records(path):
    with open(path) as f:
        return {r["id"]: r for r in (json.loads(l) for l in f if l.strip())}


def main():
    if not os.path.exists(MODEL):
        print(f"cli_devices: FAIL: the default model is missing: {MODEL} (run scripts/setup.sh)")
        return 1
    os.makedirs(TMP, exist_ok=True)
    for f in os.listdir(TMP):
        os.remove(os.path.join(TMP, f))
    prompts = os.path.join(TMP, "p.jsonl")
    qs = ["The capital of France is", "Two plus two is", "Name a colour:", "The sun rises in the",
          "def add(a, b):", "Once upon a time", "The largest ocean is", "Water boils at"]
    if SANITIZE:  # under ASan+UBSan every emulated step of the 135M model is seconds: 4 prompts
        qs = qs[:4]
    with open(prompts, "w") as f:
        for i, q in enumerate(qs):
            f.write(json.dumps({"id": f"r{i}", "prompt": q}) + "\n")
    n_tok = "2" if SANITIZE else "4"
    common = ["generate", prompts, "--model", MODEL, "--max-tokens", n_tok, "--temperature", "0",
              "--token-ids", "--max-seqs", "4"]

    # 1. one device vs two
    one = os.path.join(TMP, "one.jsonl")
    rc, _, err = run(common + ["--device", "cuda", "-o", one])
    if not check(rc == 0, f"one-device run: exit {rc}: {err[-1500:]}"):
        return 1
    ref = records(one)
    two = os.path.join(TMP, "two.jsonl")
    sj = os.path.join(TMP, "two.stats.json")
    t0 = time.time()
    plot = os.path.join(TMP, "two.svg")
    rc, _, err = run(common + ["--device", "cuda:0,1", "-o", two, "--stats-json", sj, "--plot", plot])
    print(f"  two devices: exit {rc} in {time.time() - t0:.1f} s")
    if not check(rc == 0, f"two-device run: exit {rc}: {err[-2500:]}"):
        return 1
    got = records(two)
    with open(two) as f:
        n_lines = sum(1 for l in f if l.strip())
    check(n_lines == len(qs) and set(got) == set(ref), f"ids: {sorted(got)} ({n_lines} lines) vs {sorted(ref)}")
    for k, r in ref.items():
        g = got.get(k, {})
        check(g.get("token_ids") == r.get("token_ids") and g.get("text") == r.get("text"),
              f"{k}: two devices gave {g.get('token_ids')} {g.get('text')!r}, one {r.get('token_ids')} {r.get('text')!r}")
        check("input_index" not in g, f"{k}: the merged line keeps the workers' input_index")
    w = [records(os.path.join(TMP, f"two.dev{k}.jsonl")) for k in range(2)]
    check(all(len(x) > 0 for x in w) and sum(len(x) for x in w) == len(qs),
          f"the workers' split: {[sorted(x) for x in w]}")
    for k in range(2):
        check(f"cuda:{k} " in err and "of the output" in err, f"the report lacks device cuda:{k}'s share: {err[-1500:]}")
    for k in range(2):  # --plot: each worker draws its own run
        p = os.path.join(TMP, f"two.dev{k}.svg")
        check(os.path.exists(p) and open(p).read().lstrip().startswith("<"), f"worker {k} drew no {p}")
    st = json.load(open(sj))
    devs = st.get("devices", [])
    check(len(devs) == 2 and [d["device"] for d in devs] == ["cuda:0", "cuda:1"],
          f"--stats-json devices: {devs}")
    check(sum(d["completed"] for d in devs) == st.get("completed") == len(qs) and
          sum(d["total_output_tokens"] for d in devs) == st.get("total_output_tokens"),
          f"the shares do not add up to the merged counters: {devs} vs {st.get('completed')}, "
          f"{st.get('total_output_tokens')}")
    print(f"  shares: {[(d['device'], d['completed'], d['total_output_tokens']) for d in devs]}")

    # 2. interrupted, then resumed
    three = os.path.join(TMP, "three.jsonl")
    args = [EMU] + common + ["--device", "cuda:0,1", "-o", three, "--max-seqs", "1"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    w0 = os.path.join(TMP, "three.dev0.jsonl")
    deadline = time.time() + 600
    while time.time() < deadline and p.poll() is None:  # one finished record, then stop it
        if os.path.exists(w0) and os.path.getsize(w0) > 0:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=600)
    rc = p.returncode
    if rc == 0:
        print("  (the run finished before the interrupt landed; resume checked on a finished job)")
    else:
        check(rc == 130, f"interrupted run: exit {rc}, not 130: {err[-1500:]}")
        check("--resume finishes the job" in err, f"the interrupted run does not say how to finish: {err[-1500:]}")
        check(not os.path.exists(three), "an interrupted run merged an output")
    rc, _, err = run(common + ["--device", "cuda:0,1", "-o", three, "--max-seqs", "1", "--resume"])
    check(rc == 0, f"resumed run: exit {rc}: {err[-1500:]}")
    if rc == 0:
        got = records(three)
        check({k: r.get("token_ids") for k, r in got.items()} == {k: r.get("token_ids") for k, r in ref.items()},
              f"resumed output differs from the one-device run: {sorted(got)}")
        print(f"  interrupted (exit {p.returncode}) and resumed: {len(got)} records, equal to one device")

    # 3. usage errors, before any work
    base = common + ["-o", os.path.join(TMP, "bad.jsonl")]
    for dev, want in (("cuda:0,5", "CUDA device 5 is out of range"), ("cuda:0,0", "cuda:0 is named twice"),
                      ("cuda:0,cpu", "a list names CUDA devices"), ("cuda:0,", "ends with a comma")):
        rc, out, err = run(base + ["--device", dev])
        check(rc == 2 and want in err, f"--device {dev}: exit {rc}: {err}")
    rc, out, err = run(base + ["--device", "cuda:0,1", "--shard", "0/2"])
    check(rc == 2 and "--shard cannot be given with a device list" in err, f"--shard with a list: exit {rc}: {err}")
    rc, out, err = run(common + ["--device", "cuda:0,1"])
    check(rc == 2 and "give -o FILE" in err, f"a list without -o: exit {rc}: {err}")
    rc, out, err = run(["bench", "--model", MODEL, "--dataset", "random", "-n", "1", "--device", "cuda:0,1"])
    check(rc == 2 and "bench runs on one device" in err, f"bench with a list: exit {rc}: {err}")
    check(not os.path.exists(os.path.join(TMP, "bad.jsonl")), "a refused run wrote its output")
    if failures:
        print(f"cli_devices: {len(failures)} check(s) failed")
        return 1
    print("cli_devices: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
