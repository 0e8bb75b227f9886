#!/usr/bin/env python3
"""Random-weight GGUF models for bench/moe_bench.sh: a mixture of experts with Qwen3-30B-A3B's
ratios scaled down, and a dense model of the same active parameter count.

    gen_moe_models.py OUTDIR [--type Q8_0|Q4_0|F16] [--heads 16] [--layers 2]
                                                         writes OUTDIR/moe.gguf, OUTDIR/dense.gguf

Qwen3-30B-A3B: hidden 2048, 32/4 heads of 128 (q width 2 x hidden, kv width hidden / 4, 8 query
heads per kv head), 128 experts, 8 per token, expert FFN 768 (0.375 x hidden). Scaled: hidden
512, 16/2 heads of 64 (the same three ratios), 128 experts top-8, expert FFN 192 (0.375 x
hidden), 2 layers, vocabulary 2048 (GGUF qwen3moe). --heads 8 gives the earlier 8/2 heads (q
width = hidden, 4 query heads per kv head), which puts a larger share of the active parameters
in the experts. --layers N (default 2) gives both models N layers: with 16, the MoE's 668 MB of
Q8_0 experts exceed the last-level cache and the dense twin's 62 MB exceed the cores' L2, as the
real models' weights exceed any cache (the benchmark's batch-size conclusions hold there too).
The dense twin (GGUF qwen3) has the
same attention, embeddings and head and one SwiGLU MLP of 8 x 192 = 1536: per token it multiplies
the same weights as the MoE's 8 chosen experts (the MoE adds only its router, 128 x 512 a layer).
Matrices in --type (default Q8_0: the integer path), norms F32. Weights std 1/sqrt(fan_in), the
router's 2/sqrt(hidden) (well-separated choices).
"""
import math
import os
import sys

import numpy as np

E, HKV, HD, V, NE, K, FE = 512, 2, 64, 2048, 128, 8, 192


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit("usage: gen_moe_models.py OUTDIR [--type Q8_0|Q4_0|F16] [--heads 16] [--layers 2]")
    out = args[0]
    qt = args[args.index("--type") + 1] if "--type" in args else "Q8_0"
    H = int(args[args.index("--heads") + 1]) if "--heads" in args else 16
    L = int(args[args.index("--layers") + 1]) if "--layers" in args else 2
    if L < 1:
        sys.exit(f"gen_moe_models.py: --layers {L} must be at least 1")
    if H % HKV:
        sys.exit(f"gen_moe_models.py: --heads {H} is not a multiple of the {HKV} kv heads")
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2025)

    def mat(rows, cols, std):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)).astype(np.float32)

    def enc(x):
        if qt == "F16":
            return x.astype(np.float16), None
        return quantize(x.reshape(-1, x.shape[-1]), Q[qt]).reshape(*x.shape[:-1], -1), Q[qt]

    # the shared part: embeddings, attention, norms, output (identical in both files)
    shared = {"token_embd.weight": mat(V, E, 1.0), "output.weight": mat(V, E, 1 / math.sqrt(E))}
    for l in range(L):
        p = f"blk.{l}."
        shared[p + "attn_q.weight"] = mat(H * HD, E, 1 / math.sqrt(E))
        shared[p + "attn_k.weight"] = mat(HKV * HD, E, 1 / math.sqrt(E))
        shared[p + "attn_v.weight"] = mat(HKV * HD, E, 1 / math.sqrt(E))
        shared[p + "attn_output.weight"] = mat(E, H * HD, 1 / math.sqrt(H * HD))
    for kind in ("moe", "dense"):
        arch = "qwen3moe" if kind == "moe" else "qwen3"
        g = gguf.GGUFWriter(os.path.join(out, kind + ".gguf"), arch)
        g.add_name(f"pllm-bench-{kind}-{qt}")
        g.add_context_length(4096)
        g.add_embedding_length(E)
        g.add_block_count(L)
        g.add_feed_forward_length(FE if kind == "moe" else K * FE)
        g.add_head_count(H)
        g.add_head_count_kv(HKV)
        g.add_key_length(HD)
        g.add_value_length(HD)
        g.add_layer_norm_rms_eps(1e-6)
        g.add_rope_freq_base(1e6)
        g.add_vocab_size(V)
        if kind == "moe":
            g.add_expert_count(NE)
            g.add_expert_used_count(K)
            g.add_expert_feed_forward_length(FE)
        for n, x in shared.items():
            d, t = enc(x)
            g.add_tensor(n, d, raw_dtype=t)
        g.add_tensor("output_norm.weight", np.ones(E, np.float32))
        for l in range(L):
            p = f"blk.{l}."
            for n in ("attn_norm", "ffn_norm"):
                g.add_tensor(p + n + ".weight", np.ones(E, np.float32))
            for n in ("attn_q_norm", "attn_k_norm"):
                g.add_tensor(p + n + ".weight", np.ones(HD, np.float32))
            if kind == "moe":
                g.add_tensor(p + "ffn_gate_inp.weight", mat(NE, E, 2 / math.sqrt(E)))
                for n, (r, c) in (("gate", (FE, E)), ("up", (FE, E)), ("down", (E, FE))):
                    x = np.stack([mat(r, c, 1 / math.sqrt(c)) for _ in range(NE)])
                    d, t = enc(x)
                    g.add_tensor(p + f"ffn_{n}_exps.weight", d, raw_dtype=t)
            else:
                for n, (r, c) in (("gate", (K * FE, E)), ("up", (K * FE, E)), ("down", (E, K * FE))):
                    d, t = enc(mat(r, c, 1 / math.sqrt(c)))
                    g.add_tensor(p + f"ffn_{n}.weight", d, raw_dtype=t)
        g.write_header_to_file()
        g.write_kv_data_to_file()
        g.write_tensors_to_file()
        g.close()
        print(os.path.join(out, kind + ".gguf"))


if __name__ == "__main__":
    main()
