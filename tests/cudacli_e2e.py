#!/usr/bin/env python3
"""The command line on the CUDA backend, proven without a GPU (tests/cudacli.cmake).

    cudacli_e2e.py PLLM_EMU HAVE_REAL_CUDA

PLLM_EMU is pllm built with the emulated CUDA library (cuda/emu/): its `--device cuda` runs the
CUDA backend's host code and kernels on the host. $PLLM_BIN is the real pllm; HAVE_REAL_CUDA
(1/0) says whether it was built with the real CUDA backend (nvcc found).

1. Greedy generation through `pllm-emu generate --device cuda` gives exactly the tokens of
   `pllm generate --device cpu`:
   - random test models (tests/gen_models.py, given a small byte-level BPE tokenizer here) of 4
     shapes (GQA, head_dim 24 with partial rotary, qwen2 biases, K-quants): with --dtype float32
     --kv-cache-dtype fp32 (logits equal to float rounding) and in the production setting (F16
     or BF16 weights, F16 KV cache); prompts with a shared prefix (prefix-cache hits: prefill
     over a cached prefix) and decode batches (CUDA graphs);
   - a padded vocabulary (the model's 300 rows, the tokenizer's 268 tokens, as Phi-3 and
     Qwen2.5 pad theirs), greedy and sampled: both samplers never draw an id without a token,
     and the two backends agree;
   - the real default model ($PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf), 5 short
     prompts (raw and chat), production setting.
   The CPU runs use the CPU backend's float32 math (PLLM_CPU_MATH=f32), the reference the CUDA
   backend's numerics follow (float activations); the CPU's default int8-activation path for
   quantized weights is a different approximation, so its agreement is only reported.
2. Device selection on this machine: the real binary's --device cuda / cuda:7 fail with exit 2
   naming the reason (no driver / no device, or a build without CUDA) before the model is
   loaded; --device auto picks the CPU and says why; pllm-emu's cuda:7 is out of range (1
   device) and its auto picks the emulated device; malformed --device values are usage errors.
   On a machine whose real binary finds a GPU, the no-GPU checks are skipped (said so).
3. --gpu-memory-fraction: out-of-range values are usage errors (both binaries, generate and
   bench); on the emulated device (PLLM_CUEMU_MEM_MB) the KV pool grows with the fraction by
   the fraction's share of the device memory, and the reports name the device.
"""
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_hf_models  # noqa: E402  (bytes_to_unicode)
PLLM = os.environ["PLLM_BIN"]
HOME = os.environ.get("PLLM_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pllm")
MODEL = os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TMP = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "cudacli_e2e")
EMU_MEM_MB = 1024  # the emulated device's memory for these runs (host memory it may take)
# Under the ASan+UBSan build (PLLM_SANITIZE, scripts/ci-extra.sh; both binaries are several times
# slower there, and the sanitizers are what that run checks) part 1 runs less: each random model
# once, in one of the two settings (f32 for the first dtype of a shape, production for the
# second: every shape and dtype still runs, and both settings), 5 tokens instead of 10 (the same
# 4 prompts: prefix hits and decode batches); the real model on 2 of its 5 prompts (one raw, one
# chat, prefilled in one step) x 4 tokens instead of 16 (prefill, then decode steps as a CUDA
# graph captured and replayed), without the report-only run of the CPU's int8 path (cpu_math_cli
# covers that path under the sanitizers): each step of the 135M model through the emulated
# kernels costs tens of seconds under ASan, and this is the sanitizer run's one real-model pass
# through the engine on the CUDA backend (cuda_model runs one teacher-forced prefill step of
# it). Parts 2 and 3 are unchanged. Each job's and each part's seconds are printed.
SANITIZE = bool(os.environ.get("PLLM_SANITIZE"))
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg)
    return cond


def run(binary, args, env=None, timeout=900):
    e = dict(os.environ)
    e["PLLM_CUEMU_MEM_MB"] = str(EMU_MEM_MB)
    e.update(env or {})
    p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def write_jsonl(name, recs):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return path


# ---- a byte-level BPE tokenizer for the random models ------------------------------------------

WORDS = ("the of and to in is was that for on with as by at from his her are were this which be or "
         "an had not but all one have they their has been more can there who some would when what "
         "into time only new could about after other than then first these two may any water "
         "people because over also such through most where made long little very great").split()


def train_bpe(n_merges):
    """Tokens (256 bytes then merges) and merges, learnt on WORDS with GPT-2's space marker."""
    b2u = gen_hf_models.bytes_to_unicode()
    words = [[b2u[b] for b in (" " + w).encode()] for w in WORDS] + [[b2u[b] for b in w.encode()] for w in WORDS]
    tokens = [b2u[b] for b in range(256)]
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        (a, b), _n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    return tokens, merges


def random_models():
    """Random test models of 4 shapes (tests/gen_models.py), with a tokenizer: byte-level BPE, the
    vocabulary's last token an EOS control token."""
    import gguf
    import gen_models

    base = gguf.GGUFWriter

    class WithTokenizer(base):
        def add_vocab_size(self, n):
            self._pllm_vocab = n
            super().add_vocab_size(n)

        pad = 0  # embedding rows past the tokenizer's last id (a padded vocabulary)

        def write_header_to_file(self, *a, **k):
            v = self._pllm_vocab - self.pad
            tokens, merges = train_bpe(v - 257)
            tokens = tokens[:v - 1] + ["<|eos|>"]
            types = [1] * (v - 1) + [3]  # normal, then control
            self.add_tokenizer_model("gpt2")
            self.add_tokenizer_pre("default")
            self.add_token_list(tokens)
            self.add_token_types(types)
            self.add_token_merges(merges[:len(tokens) - 257])
            self.add_eos_token_id(v - 1)
            self.add_add_bos_token(False)
            super().write_header_to_file(*a, **k)

    gen_models.gguf.GGUFWriter = WithTokenizer
    try:
        out = os.path.join(TMP, "models")
        want = [("gqa", "F32"), ("gqa", "Q4_1"), ("odd", "F16"), ("odd", "BF16"), ("qwen2", "Q8_0"),
                ("qwen2", "Q5_1"), ("kq", "Q4_K"), ("kq", "Q6_K")]
        models = []
        for shape in ("gqa", "odd", "qwen2", "kq"):
            dtypes = [d for s, d in want if s == shape]
            models += gen_models.generate(os.path.join(out, shape), shapes=[shape], dtypes=dtypes)
        # a padded vocabulary, as Phi-3 (32064 rows, 32011 tokens) and Qwen2.5 have: 300 rows,
        # 268 tokens; random weights put the padding's ids among the top ones at once
        WithTokenizer.pad = PAD
        padded = gen_models.generate(os.path.join(out, "padded"), shapes=["gqa"], dtypes=["F32"])
        for m in padded:
            m["shape"] = "padded"
        return models + padded
    finally:
        gen_models.gguf.GGUFWriter = base


PAD = 32  # the padded model's rows without a token (byte-level BPE needs 256 + merges)


# ---- greedy agreement ------------------------------------------------------------------------

def records(text):
    return {r["id"]: r for r in (json.loads(l) for l in text.splitlines() if l.strip())}


def compare(name, cpu, emu):
    """Token agreement of two runs' records: (agreeing positions, compared positions)."""
    rc_c, out_c, err_c = cpu
    rc_e, out_e, err_e = emu
    if not check(rc_c == 0, f"{name}: cpu run exited {rc_c}: {err_c[-2000:]}"):
        return 0, 0
    if not check(rc_e == 0, f"{name}: emulated cuda run exited {rc_e}: {err_e[-2000:]}"):
        return 0, 0
    rc, re_ = records(out_c), records(out_e)
    check(set(rc) == set(re_), f"{name}: different request ids {sorted(rc)} vs {sorted(re_)}")
    agree = total = 0
    for rid in sorted(set(rc) & set(re_)):
        a, b = rc[rid].get("token_ids", []), re_[rid].get("token_ids", [])
        n = max(len(a), len(b))
        same = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        agree += same
        total += n
        check(a == b and rc[rid].get("text") == re_[rid].get("text"),
              f"{name}: request {rid}: cpu tokens {a} vs cuda {b} (first difference at {same})")
        check(rc[rid].get("finish_reason") == re_[rid].get("finish_reason"),
              f"{name}: request {rid}: finish reason {rc[rid].get('finish_reason')} vs {re_[rid].get('finish_reason')}")
    check(total > 0, f"{name}: no tokens generated")
    return agree, total


def gen_args(model, prompts, extra):
    return ["generate", prompts, "--model", model, "--token-ids", "--threads", "1", "--log-interval", "1000",
            "--temperature", "0"] + extra  # greedy whatever the model's generation defaults say


def e2e(pool):
    models = random_models()
    shared = " ".join(WORDS[:40])  # > 2 blocks of 16 tokens shared by two prompts
    prompts = write_jsonl("random.jsonl", [
        {"id": "a", "prompt": shared + " water people"},
        {"id": "b", "prompt": shared + " because over also"},
        {"id": "c", "prompt": "the time of great"},
        {"id": "d", "prompt": "x"},
    ])
    jobs = []
    common = ["--max-tokens", "5" if SANITIZE else "10", "--ignore-eos", "--max-seqs", "4", "--max-batched-tokens", "64"]
    first_of_shape = {}
    for m in models:
        first_of_shape.setdefault(m["shape"], m["path"])
    for m in models:
        if m["shape"] == "padded":
            continue
        if not SANITIZE or first_of_shape[m["shape"]] == m["path"]:
            jobs.append((f"{os.path.basename(m['path'])} f32", m["path"], prompts, common,
                         ["--dtype", "float32", "--kv-cache-dtype", "fp32"]))
    for m in models:
        if m["shape"] == "padded":
            continue
        if not SANITIZE or first_of_shape[m["shape"]] != m["path"]:
            jobs.append((f"{os.path.basename(m['path'])} production", m["path"], prompts, common, []))
    # the padded vocabulary: no id without a token is ever sampled, greedy or at temperature 1.5
    # (a22fb61 sampled one at once: 'token id ... out of range' ended the run, exit 3)
    padded = next(m for m in models if m["shape"] == "padded")
    jobs.append(("padded-vocabulary greedy", padded["path"], prompts, common,
                 ["--dtype", "float32", "--kv-cache-dtype", "fp32"]))
    jobs.append(("padded-vocabulary sampled", padded["path"], prompts,
                 common + ["--temperature", "1.5", "--seed", "11"], ["--dtype", "float32", "--kv-cache-dtype", "fp32"]))
    if not os.path.exists(MODEL):
        check(False, f"the default model is missing: {MODEL} (run scripts/setup.sh or set PLLM_HOME)")
    else:
        real_recs = [
            {"id": "france", "prompt": "The capital of France is"},
            {"id": "chat", "messages": [{"role": "user", "content": "What is 2 + 2?"}]},
            {"id": "list", "prompt": "Three colours of the rainbow are red,"},
            {"id": "code", "messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}]},
            {"id": "story", "prompt": "Once upon a time, in a small village by the sea,"},
        ]
        if SANITIZE:
            real_recs = [r for r in real_recs if r["id"] in ("france", "chat")]
        real = write_jsonl("real.jsonl", real_recs)
        jobs.append(("SmolLM2-135M Q4_1 production", MODEL, real,
                     ["--max-tokens", "4" if SANITIZE else "16", "--max-seqs", "4", "--max-batched-tokens", "128"], []))
        # decode attention by the FlashInfer path (in pllm-emu: its contract reference)
        jobs.append(("SmolLM2-135M Q4_1 production flashinfer", MODEL, real,
                     ["--max-tokens", "4" if SANITIZE else "16", "--max-seqs", "4", "--max-batched-tokens", "128"],
                     ["--attention-backend", "flashinfer"]))

    def one(job):
        name, model, pfile, args, cuda_args = job
        t0 = time.time()
        cpu = run(PLLM, gen_args(model, pfile, args + ["--device", "cpu"]), env={"PLLM_CPU_MATH": "f32"})
        emu = run(EMU, gen_args(model, pfile, args + ["--device", "cuda"] + cuda_args))
        cpu_int8 = run(PLLM, gen_args(model, pfile, args + ["--device", "cpu"])) if "SmolLM2" in name and not SANITIZE else None
        return cpu, emu, cpu_int8, time.time() - t0

    totals = {}
    for job, (cpu, emu, cpu_int8, secs) in zip(jobs, pool.map(one, jobs)):
        name = job[0]
        a, t = compare(name, cpu, emu)
        if cpu_int8 is not None and cpu_int8[0] == 0 and emu[0] == 0:
            ri, re_ = records(cpu_int8[1]), records(emu[1])
            n = sum(len(r.get("token_ids", [])) for r in re_.values())
            same = sum(next((i for i, (x, y) in enumerate(zip(ri[k].get("token_ids", []), r.get("token_ids", [])))
                             if x != y), min(len(ri[k].get("token_ids", [])), len(r.get("token_ids", []))))
                       for k, r in re_.items() if k in ri)
            print(f"  (report only) {name} vs the CPU's default int8-activation path: {same}/{n} tokens "
                  f"before the first difference")
        if name.startswith("padded"):
            n_tok = padded["n_vocab"] - PAD
            for which, (rc_, out_, _err) in (("cpu", cpu), ("emulated cuda", emu)):
                ids = [t for r in records(out_).values() for t in r.get("token_ids", [])]
                check(rc_ == 0 and ids and max(ids) < n_tok,
                      f"{name} ({which}): ids past the tokenizer's {n_tok} were sampled, or the run failed "
                      f"(exit {rc_}): {sorted(set(t for t in ids if t >= n_tok))}")
        kind = "real model" if "SmolLM2" in name else name.split()[-1]
        ta = totals.setdefault(kind, [0, 0, 0])
        ta[0] += a
        ta[1] += t
        ta[2] += 1
        print(f"  {name}: {a}/{t} greedy tokens identical ({secs:.1f} s)")
        if name.endswith("flashinfer") and emu[0] == 0:
            check("flashinfer contract reference (emulated) attention" in emu[2],
                  f"{name}: the report does not say FlashInfer ran the attention: {emu[2][-1500:]}")
        if "SmolLM2" in name and emu[0] == 0:
            check("Device" in emu[2] and "cuda:0" in emu[2] and "emulated" in emu[2],
                  f"the emulated run's report does not name the device: {emu[2][-1500:]}")
            check(re.search(r"device: cuda:0 \(asked for; 1 emulated device", emu[2]) is not None,
                  f"the emulated run does not say which device it runs on: {emu[2][:800]}")
            txt = records(emu[1]).get("france", {}).get("text", "")
            print(f"  real model, emulated cuda: 'The capital of France is' ->{txt!r}")
    for kind, (a, t, n) in totals.items():
        print(f"cudacli_e2e: {kind}: {n} runs, {a}/{t} greedy tokens identical (emulated cuda vs cpu)")


# ---- device selection and option errors --------------------------------------------------------

def device_checks(tiny):
    prompts = write_jsonl("one.jsonl", [{"id": "p", "prompt": "the time"}])
    base = ["generate", prompts, "--model", tiny, "--max-tokens", "3", "--token-ids", "--threads", "1"]

    rc, out, err = run(PLLM, base + ["--device", "auto"])
    check(rc == 0, f"pllm --device auto exited {rc}: {err}")
    m = re.search(r"pllm: device: (\S+) \(auto: ([^\n]*)\)", err)
    gpu_here = m is not None and m.group(1).startswith("cuda")
    if gpu_here:
        print(f"NOTE: the real pllm finds a GPU here ({m.group(2)}): the no-GPU checks are skipped")
    else:
        check(m is not None and m.group(1) == "cpu",
              f"pllm --device auto does not say it picked the CPU and why: {err[:600]}")
        if m:
            print(f"  pllm --device auto: cpu ({m.group(2)})")
            if HAVE_REAL_CUDA:
                check(re.search(r"driver|no CUDA device|cannot start", m.group(2)),
                      f"auto's reason does not name the driver/device problem: {m.group(2)}")
            else:
                check("without the CUDA backend" in m.group(2), f"auto's reason: {m.group(2)}")
        rc2, out2, _ = run(PLLM, base + ["--device", "cpu"])  # same math as auto's (the CPU's default)
        def toks(o):
            return {k: (r.get("text"), r.get("token_ids")) for k, r in records(o).items()}
        check(rc2 == 0 and toks(out2) == toks(out), "--device auto and --device cpu generate differently")
        for dev in ("cuda", "cuda:0", "cuda:7"):
            for cmd in (base, ["bench", "--model", "/nonexistent/model.gguf", "--dataset", "random",
                               "--num-prompts", "1"]):
                rc, out, err = run(PLLM, cmd + ["--device", dev])
                what = f"pllm {cmd[0]} --device {dev}"
                check(rc == 2, f"{what} exited {rc}, not 2: {err}")
                check(f"--device {dev}:" in err, f"{what}: the message does not name the option: {err}")
                if HAVE_REAL_CUDA:
                    check(re.search(r"no CUDA device can be used here: (no usable CUDA driver|no CUDA device|"
                                    r"the CUDA runtime cannot start)", err),
                          f"{what}: the message does not give the reason: {err}")
                else:
                    check("built without the CUDA backend" in err, f"{what}: {err}")
                check("cannot load model" not in err and "model" not in out,
                      f"{what}: the model was touched before the device was refused: {err}")
                if cmd[0] == "generate" and dev == "cuda":
                    print(f"  pllm --device cuda (exit {rc}): {err.strip()}")

    # the emulated binary: one device, the emulator's
    rc, out, err = run(EMU, base + ["--device", "auto"])
    check(rc == 0 and re.search(r"device: cuda:0 \(auto: 1 emulated device", err),
          f"pllm-emu --device auto does not pick the emulated device: exit {rc}: {err[:600]}")
    rc, out, err = run(EMU, base + ["--device", "cuda:7"])
    check(rc == 2 and "CUDA device 7 is out of range" in err and "1 emulated device" in err,
          f"pllm-emu --device cuda:7: exit {rc}: {err}")
    print(f"  pllm-emu --device cuda:7 (exit {rc}): {err.strip()}")
    for binary in (PLLM, EMU):
        for dev in ("gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "cuda0", "CPU", ""):
            rc, out, err = run(binary, base + ["--device", dev])
            check(rc == 2 and "is not one of auto, cpu, cuda, cuda:N" in err,
                  f"{os.path.basename(binary)} --device '{dev}': exit {rc}: {err}")
        for f in ("0", "-0.5", "1.01", "inf"):
            for cmd in (base, ["bench", "--dataset", "random", "--num-prompts", "1"]):
                rc, out, err = run(binary, cmd + ["--gpu-memory-fraction", f])
                check(rc == 2 and "--gpu-memory-fraction must be in (0, 1]" in err,
                      f"{os.path.basename(binary)} {cmd[0]} --gpu-memory-fraction {f}: exit {rc}: {err}")
        for f in ("half", "nan"):  # not a number: the option parser's error
            rc, out, err = run(binary, base + ["--gpu-memory-fraction", f])
            check(rc == 2 and "gpu-memory-fraction" in err, f"--gpu-memory-fraction {f}: exit {rc}: {err}")
        rc, out, err = run(binary, base + ["--dtype", "fp8"])
        check(rc == 2 and "--dtype 'fp8' is not one of" in err, f"--dtype fp8: exit {rc}: {err}")
        rc, out, err = run(binary, base + ["--attention-backend", "flash"])
        check(rc == 2 and "--attention-backend 'flash' is not one of auto, own, flashinfer" in err,
              f"--attention-backend flash: exit {rc}: {err}")
        rc, out, err = run(binary, base + ["--device", "cpu", "--attention-backend", "flashinfer"])
        check(rc == 2 and "--attention-backend flashinfer needs a CUDA device" in err,
              f"--device cpu --attention-backend flashinfer: exit {rc}: {err}")
        rc, out, err = run(binary, base + ["--kv-cache-dtype", "int4"])
        check(rc == 2 and "--kv-cache-dtype 'int4' is not one of" in err, f"--kv-cache-dtype int4: exit {rc}: {err}")
    rc, out, err = run(PLLM, ["generate", "--help"])
    check(all(o in out + err for o in ("--device", "--gpu-memory-fraction", "--dtype", "--kv-cache-dtype")),
          "generate --help does not list the device options")
    rc, out, err = run(PLLM, ["bench", "--help"])
    check(all(o in out + err for o in ("--device", "--gpu-memory-fraction")), "bench --help does not list them")


def kv_fraction_checks(tiny):
    """The KV pool follows --gpu-memory-fraction on the emulated device: blocks x block bytes grows
    by the fraction's share of the device memory (the weights and workspace stay the same)."""
    if not os.path.exists(MODEL):
        return
    prompts = write_jsonl("frac.jsonl", [{"id": "p", "prompt": "Hello"}])
    blocks = {}
    for f in ("0.8", "0.9"):
        sj = os.path.join(TMP, f"frac-{f}.json")
        rc, out, err = run(EMU, ["generate", prompts, "--model", MODEL, "--device", "cuda", "--max-tokens", "1",
                                 "--gpu-memory-fraction", f, "--stats-json", sj, "--max-seqs", "4",
                                 "--max-batched-tokens", "64"])
        if not check(rc == 0, f"pllm-emu --gpu-memory-fraction {f}: exit {rc}: {err[-1500:]}"):
            return
        with open(sj) as fh:
            st = json.load(fh)
        blocks[f] = st["counters"]["kv_blocks"]
        check(st.get("device") == "cuda:0" and "emulated" in st.get("kernels", ""),
              f"--stats-json does not name the device: {st.get('device')} {st.get('kernels')}")
        m = re.search(r"KV pool ([0-9.]+) GB", err)
        check(m is not None, f"the report does not give the KV pool: {err[-1200:]}")
    # SmolLM2-135M: 30 layers x 2 (K, V) x 3 kv heads x 64 x F16 = 23040 bytes per token
    block_bytes = 30 * 2 * 3 * 64 * 2 * 16
    grow = (blocks["0.9"] - blocks["0.8"]) * block_bytes
    want = 0.1 * EMU_MEM_MB * 2 ** 20
    print(f"  KV blocks: --gpu-memory-fraction 0.8: {blocks['0.8']}, 0.9: {blocks['0.9']} "
          f"(grew {grow / 2**20:.1f} MiB, 0.1 x {EMU_MEM_MB} MiB = {want / 2**20:.1f} MiB)")
    check(blocks["0.8"] > 0 and abs(grow - want) <= 2 * block_bytes,
          f"the KV pool does not follow --gpu-memory-fraction: {blocks}")
    # a fraction too small for the weights: a clear error, no crash
    rc, out, err = run(EMU, ["generate", prompts, "--model", MODEL, "--device", "cuda", "--max-tokens", "1",
                             "--gpu-memory-fraction", "0.05"])
    check(rc == 3 and ("gpu-memory-fraction" in err or "memory" in err),
          f"pllm-emu --gpu-memory-fraction 0.05 (weights do not fit): exit {rc}: {err[-1200:]}")
    print(f"  --gpu-memory-fraction 0.05 (exit {rc}): {err.strip().splitlines()[-1] if err.strip() else ''}")


def prefix_cache_checks(tiny):
    """--prefix-cache-dir on the CUDA backend (kv_read_block / kv_write_block through the
    emulator): greedy tokens identical with no cache, a cold directory and a warm one; the warm
    run loads blocks; the CPU backend, a different namespace, loads none of them."""
    shared = " ".join(WORDS[:60])
    prompts = write_jsonl("prefix.jsonl", [{"id": f"p{i}", "prompt": shared + " " + w}
                                           for i, w in enumerate(("water people", "because over", "great"))])
    d = os.path.join(TMP, "prefix_kv")
    shutil.rmtree(d, ignore_errors=True)  # cold: the test directory outlives a run
    args = ["--max-tokens", "4", "--ignore-eos", "--max-seqs", "4", "--device", "cuda"]
    outs, stats = [], []
    for i, extra in enumerate((["--no-prefix-cache"], ["--prefix-cache-dir", d], ["--prefix-cache-dir", d])):
        sj = os.path.join(TMP, f"prefix_stats{i}.json")
        rc, out, err = run(EMU, gen_args(tiny, prompts, args + extra + ["--stats-json", sj]))
        if not check(rc == 0, f"prefix cache on cuda, run {i}: exit {rc}: {err[-1500:]}"):
            return
        outs.append({k: r.get("token_ids") for k, r in records(out).items()})
        with open(sj) as f:
            stats.append(json.load(f))
    check(outs[0] == outs[1] == outs[2], f"prefix cache on cuda: tokens differ: {outs}")
    cold, warm = stats[1]["prefix_cache_dir"], stats[2]["prefix_cache_dir"]
    check(cold["blocks_saved"] > 0 and warm["blocks_loaded"] > 0 and warm["blocks_saved"] == 0,
          f"prefix cache on cuda: cold {cold}, warm {warm}")
    sj = os.path.join(TMP, "prefix_stats_cpu.json")
    rc, out, err = run(PLLM, gen_args(tiny, prompts, args[:-2] + ["--device", "cpu", "--prefix-cache-dir", d,
                                                                  "--stats-json", sj]))
    if check(rc == 0, f"prefix cache, cpu after cuda: exit {rc}: {err[-800:]}"):
        with open(sj) as f:
            check(json.load(f)["prefix_cache_dir"]["blocks_loaded"] == 0,
                  "the CPU backend loaded blocks the CUDA backend saved")
    print(f"cudacli_e2e: prefix cache on cuda: {cold['blocks_saved']} blocks saved cold, "
          f"{warm['blocks_loaded']} loaded warm, tokens identical")


def main():
    global EMU, HAVE_REAL_CUDA
    if len(sys.argv) != 3:
        sys.exit("usage: cudacli_e2e.py PLLM_EMU HAVE_REAL_CUDA(0|1)")
    EMU, HAVE_REAL_CUDA = sys.argv[1], sys.argv[2] == "1"
    os.makedirs(TMP, exist_ok=True)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        e2e(pool)
    t1 = time.time()
    tiny = os.path.join(TMP, "models", "gqa", "gqa-F32.gguf")
    device_checks(tiny)
    t2 = time.time()
    kv_fraction_checks(tiny)
    prefix_cache_checks(tiny)
    print(f"cudacli_e2e: greedy agreement {t1 - t0:.1f} s, device selection {t2 - t1:.1f} s, "
          f"--gpu-memory-fraction {time.time() - t2:.1f} s")
    if failures:
        print(f"cudacli_e2e: {len(failures)} failures")
        return 1
    print("cudacli_e2e: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
