#!/usr/bin/env python3
"""The CUDA backend end to end against the CPU backend (tests/cuda_vs_cpu.c does each run).

    cuda_e2e.py TOOL random     the random test models of tests/gen_models.py (5 shapes, 11
                                weight dtypes): every model with F32 weights and an F32 KV cache
                                (logits to ~1e-6 of the CPU's, the same greedy token at every
                                step; through the engine too for one model per shape), one model
                                per shape in the production setting (F16 or BF16 weights, F16
                                KV), attention split over the context, a run without graphs,
                                three Hugging Face directories (tests/gen_hf_models.py: BF16
                                shards as they are, mistral head_dim 48, Llama-3 rope scaling),
                                Qwen3 (q/k head norms), Phi-3 (fused projections, LongRoPE)
                                and Gemma 3 (sliding-window layers, GeGLU, post-norms) as HF
                                and GGUF,
                                and sampled runs (same tokens, logprobs and top logprobs)
    cuda_e2e.py TOOL model      the default model ($PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf):
                                3 short text prompts, 3 greedy tokens each, production setting;
                                and Gemma 3 270M (gemma-3-270m-q4_k_m.gguf): 2 prompts x 3 tokens

TOOL is cuda_vs_cpu (the emulated build) or cuda_vs_cpu_gpu (the real one; it exits 77 when no
GPU answers, and so does this script). Runs go two at a time (the machine's cores).
"""
import concurrent.futures
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# Under the ASan+UBSan build (PLLM_SANITIZE, scripts/ci-extra.sh), where the emulated kernels
# run many times slower and the sanitizers, not the numerics, are what the run checks: the
# teacher-forced F32 run goes through one model per weight dtype (each dtype still converted
# and run, each shape still in the list) instead of all 35, with 2 prompts x 3 tokens; each
# shape's first model runs teacher forced (4 prompts x 6 tokens) without the engine part, and
# so does the sharded BF16 Hugging Face directory: the engine over the CUDA backend still runs
# for every shape in its production run, which is 3 prompts x 4 tokens (halves in flight,
# decode graphs captured and replayed) instead of 4 x 6; the split-attention runs and the
# Llama-3 rope-scaling run take 2 of their 4 long prompts (every decode step still splits /
# scales); the no-graph, mistral and sampled runs keep their sizes. The default model runs 1
# text prompt x 2 tokens, teacher forced (the Q4_1 -> F16 conversion, a prefill step and a decode
# step captured as a CUDA graph, at the real shape: vocabulary 49152), instead of 3 prompts x 3
# tokens and the engine part: under ASan each step of the 135M model through the emulated
# kernels costs 15-50 s, and the rest (batches of several sequences, halves in flight, graph
# replays, the engine over the CUDA backend) runs under the sanitizers on the random models here
# for every shape, and in cudacli_e2e's real-model run (pllm-emu generate: the engine).
SANITIZE = bool(os.environ.get("PLLM_SANITIZE"))


def run(tool, model, args):
    # the CPU reference in its float32 math (cpu_backend.h): the CUDA backend's numerics (float
    # activations into F16/BF16/F32 GEMMs) follow it; the CPU's default int8-activation path for
    # quantized matrices is a different approximation
    env = dict(os.environ, PLLM_CPU_MATH="f32")
    t0 = time.time()
    p = subprocess.run([tool, model] + args, capture_output=True, text=True, env=env)
    return p.returncode, p.stderr, time.time() - t0


def random_runs(tmp):
    import gen_models  # noqa: E402 (numpy, gguf: only needed here)

    models = gen_models.generate(os.path.join(tmp, "models"))
    runs = []
    by_shape = {}
    for m in models:
        by_shape.setdefault(m["shape"], []).append(m)
    # every model teacher forced (identical greedy tokens at every step); through the engine too
    # for the first model of each shape
    firsts = {ms[0]["path"] for ms in by_shape.values()}
    per_dtype = {}  # under SANITIZE: the model each dtype runs on, shapes taken in turn
    for i, m in enumerate(models):
        per_dtype.setdefault(m["dtype"], [])
        per_dtype[m["dtype"]].append(m["path"])
    picked = {ps[i % len(ps)] for i, ps in enumerate(per_dtype.values())}
    for m in models:
        if m["path"] in firsts:
            runs.append((m["path"], ["--weights", "f32", "--kv", "f32", "--seed", "7"] + ([] if SANITIZE else ["--engine"])))
        elif not SANITIZE:
            runs.append((m["path"], ["--weights", "f32", "--kv", "f32", "--seed", "7"]))
        elif m["path"] in picked:
            runs.append((m["path"], ["--weights", "f32", "--kv", "f32", "--seed", "7", "--prompts", "2", "--gen", "3"]))
    for shape, ms in sorted(by_shape.items()):
        pick = next((m for m in ms if m["dtype"] in ("Q4_1", "Q4_K")), ms[0])
        runs.append((pick["path"], ["--kv", "f16", "--engine", "--seed", "11"] + (["--prompts", "3", "--gen", "4"] if SANITIZE else [])))
    bf16 = next(m for m in models if m["dtype"] == "BF16")
    runs.append((bf16["path"], ["--kv", "f16", "--seed", "13"]))
    # contexts of 60..130 positions, decode attention split into 64-position ranges
    for m in (models[0], next(m for m in models if m["shape"] == "odd")):
        runs.append((m["path"], ["--weights", "f32", "--kv", "f32", "--split", "64", "--len", "60:130", "--gen", "4",
                                 "--budget", "64", "--seed", "17"] + (["--prompts", "2"] if SANITIZE else [])))
    runs.append((models[1]["path"], ["--no-graphs", "--kv", "f16", "--seed", "19"]))
    # Hugging Face directories (tests/gen_hf_models.py): BF16 shards uploaded as they are, a
    # mistral with head_dim 48 != hidden / heads, Llama-3 rope scaling
    hf = os.path.join(tmp, "hf")
    subprocess.run([sys.executable, os.path.join(HERE, "gen_hf_models.py"), hf], check=True, capture_output=True)
    runs.append((os.path.join(hf, "qwen2-hf-bf16-sharded"), ["--kv", "f16", "--seed", "29"] + ([] if SANITIZE else ["--engine"])))
    runs.append((os.path.join(hf, "mistral-hf-f32-sharded"), ["--weights", "f32", "--kv", "f32", "--seed", "31"]))
    runs.append((os.path.join(hf, "llama3-hf-f32"), ["--weights", "f32", "--kv", "f32", "--len", "30:90", "--seed", "37"]
                 + (["--prompts", "2"] if SANITIZE else [])))
    # Qwen3 (per-head q/k RMSNorm): HF F32 through the engine, GGUF F32 teacher forced, BF16 GGUF
    # in the production setting (F16 KV)
    runs.append((os.path.join(hf, "qwen3-hf-f32"), ["--weights", "f32", "--kv", "f32", "--seed", "41"]
                 + ([] if SANITIZE else ["--engine"])))
    runs.append((os.path.join(hf, "qwen3-f32.gguf"), ["--weights", "f32", "--kv", "f32", "--seed", "43"]))
    runs.append((os.path.join(hf, "qwen3-bf16.gguf"), ["--kv", "f16", "--seed", "47"]))
    # Phi-3 (fused projections, partial rotary, LongRoPE past position 16 of prompts up to 40)
    runs.append((os.path.join(hf, "phi3-hf-f32"), ["--weights", "f32", "--kv", "f32", "--seed", "53"]
                 + ([] if SANITIZE else ["--engine"])))
    runs.append((os.path.join(hf, "phi3-f32.gguf"), ["--weights", "f32", "--kv", "f32", "--seed", "59"]))
    runs.append((os.path.join(hf, "phi3-bf16.gguf"), ["--kv", "f16", "--seed", "61"]))
    # Gemma 3 (GeGLU, post-norms, scaled embeddings, query_pre_attn_scalar, a window of 8 on
    # layers 0 and 2 with their own RoPE base): HF F32 through the engine, GGUF F32 with contexts
    # of 30..90 and decode attention split into 64-position ranges (a range wholly before the
    # window takes no position), HF BF16 shards and the F16 GGUF in the production setting
    runs.append((os.path.join(hf, "gemma3-hf-f32"), ["--weights", "f32", "--kv", "f32", "--seed", "67"]
                 + ([] if SANITIZE else ["--engine"])))
    runs.append((os.path.join(hf, "gemma3-f32.gguf"), ["--weights", "f32", "--kv", "f32", "--split", "64", "--len",
                                                       "30:90", "--gen", "4", "--budget", "64", "--seed", "71"]
                 + (["--prompts", "2"] if SANITIZE else [])))
    runs.append((os.path.join(hf, "gemma3-hf-bf16-sharded"), ["--kv", "f16", "--seed", "73"]))
    runs.append((os.path.join(hf, "gemma3-f16.gguf"), ["--kv", "f16", "--seed", "79"]))
    # mixtures of experts (cuda/moe.cu: router, grouping by expert, grouped GEMMs, weighted sum):
    # Qwen3-MoE HF F32 through the engine (a dense layer between), its GGUF F32 and the BF16 GGUF
    # with F16 KV, without norm_topk_prob, Mixtral GGUF F32 (stacked experts) and the F16
    # per-expert GGUF with F16 KV
    runs.append((os.path.join(hf, "qwen3moe-hf-f32"), ["--weights", "f32", "--kv", "f32", "--seed", "83"]
                 + ([] if SANITIZE else ["--engine"])))
    runs.append((os.path.join(hf, "qwen3moe-f32.gguf"), ["--weights", "f32", "--kv", "f32", "--seed", "89"]))
    runs.append((os.path.join(hf, "qwen3moe-bf16.gguf"), ["--kv", "f16", "--seed", "97"]))
    runs.append((os.path.join(hf, "qwen3moe-nonorm-f32.gguf"), ["--weights", "f32", "--kv", "f32", "--seed", "101"]))
    runs.append((os.path.join(hf, "mixtral-f32.gguf"), ["--weights", "f32", "--kv", "f32", "--seed", "103"]))
    # Qwen2-MoE: Q/K/V biases, no renormalization, a shared expert behind a sigmoid gate
    runs.append((os.path.join(hf, "qwen2moe-hf-f32"), ["--weights", "f32", "--kv", "f32", "--seed", "109"]
                 + ([] if SANITIZE else ["--engine"])))
    runs.append((os.path.join(hf, "qwen2moe-bf16.gguf"), ["--kv", "f16", "--seed", "113"]))
    runs.append((os.path.join(hf, "mixtral-f16-perexpert.gguf"), ["--kv", "f16", "--seed", "107"]))
    # the fused experts of transformers 5 (mlp.experts.gate_up_proj / down_proj, sliced per expert
    # at load): Qwen3-MoE BF16 shards in the production setting, Qwen2-MoE and Mixtral F32, and
    # Mixtral's F16 shards through the engine
    runs.append((os.path.join(hf, "qwen3moe-hf-bf16-sharded-fused"), ["--kv", "f16", "--seed", "127"]))
    runs.append((os.path.join(hf, "qwen2moe-hf-f32-fused"), ["--weights", "f32", "--kv", "f32", "--seed", "131"]))
    runs.append((os.path.join(hf, "mixtral-hf-f32-fused"), ["--weights", "f32", "--kv", "f32", "--seed", "137"]))
    runs.append((os.path.join(hf, "mixtral-hf-f16-sharded-fused"), ["--kv", "f16", "--seed", "139"]
                 + ([] if SANITIZE else ["--engine"])))
    # sampling (temperature, top-k/p, min-p, penalties, bans, logprobs) through graphs and eager steps
    for m in (models[0], next(m for m in models if m["shape"] == "qwen2" and m["dtype"] == "Q4_1")):
        runs.append((m["path"], ["--weights", "f32", "--kv", "f32", "--sample", "--prompts", "6", "--gen", "8",
                                 "--seed", "23"]))
    return runs


def model_runs():
    home = os.environ.get("PLLM_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pllm")
    path = os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        print(f"FAIL: the default model is missing: {path} (run scripts/setup.sh or set PLLM_HOME)")
        sys.exit(1)
    n = ["--prompts", "1", "--gen", "2"] if SANITIZE else ["--prompts", "3", "--gen", "3", "--engine"]
    runs = [(path, ["--text"] + n + ["--block-size", "16", "--budget", "48"])]
    # Gemma 3 270M (scripts/setup.sh fetches it; model_gemma3_real says how when it is missing):
    # head_dim 256, GeGLU, post-norms, a 262144-token LM head, Q5_0/Q4_K/Q6_K/Q8_0 -> F16
    gemma = os.path.join(home, "models", "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(gemma):
        print(f"FAIL: the third model is missing: {gemma} (run scripts/setup.sh or set PLLM_HOME)")
        sys.exit(1)
    if not SANITIZE:
        runs.append((gemma, ["--text", "--prompts", "2", "--gen", "3", "--block-size", "16", "--budget", "48"]))
    return runs


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("random", "model"):
        sys.exit("usage: cuda_e2e.py TOOL random|model")
    tool, mode = sys.argv[1], sys.argv[2]
    probe = subprocess.run([tool, "--probe"], capture_output=True, text=True)
    if probe.returncode == 77:
        print(probe.stderr.strip())
        return 77
    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "cuda_e2e")
    os.makedirs(tmp, exist_ok=True)
    runs = random_runs(tmp) if mode == "random" else model_runs()
    failures, skipped = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for (model, args), (rc, err, secs) in zip(runs, pool.map(lambda r: run(tool, *r), runs)):
            name = os.path.basename(model) + " " + " ".join(args)
            if rc == 77:
                skipped += 1
                print(err.strip().splitlines()[-1])
                continue
            lines = [l for l in err.splitlines() if l.startswith("cuda_vs_cpu ") or l.startswith("  ")]
            print(f"== {name} ({secs:.1f} s)\n" + "\n".join(lines))
            if rc != 0:
                print(err)
                failures.append(name)
    if skipped == len(runs):
        return 77
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    print(f"cuda_e2e {mode}: {len(runs)} runs passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
