#!/usr/bin/env python3
"""A random-weight TinyLlama-1.1B-shaped GGUF for CPU benchmarks (memory-bound decode).

    gen_tinyllama.py OUT.gguf [--dtype Q4_0|Q8_0] [--seed N]

Shape (TinyLlama-1.1B-Chat v1.0): llama, n_embd 2048, n_ff 5632, 22 layers, 32 heads, 4 KV heads
(head_dim 64), vocab 32000, untied output, rope base 10000, eps 1e-5, context 2048. Matrices are
random normal with std 1/sqrt(fan_in) (embeddings std 1), quantized with gguf.quants.quantize
(the PyPI gguf package); norms are F32 near 1. No tokenizer: the benchmarks feed token ids.
Written to OUT.gguf.tmp then renamed, so an interrupted run never leaves a truncated model.
Deterministic per seed. Takes about a minute and ~2 GB of memory.
"""
import argparse
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize

SHAPE = dict(n_vocab=32000, n_embd=2048, n_layer=22, n_head=32, n_head_kv=4, n_ff=5632)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="Q4_0", choices=["Q4_0", "Q8_0"])
    ap.add_argument("--seed", type=int, default=1100)
    args = ap.parse_args()
    E, F, V, H, HKV, NL = (SHAPE[k] for k in ("n_embd", "n_ff", "n_vocab", "n_head", "n_head_kv", "n_layer"))
    hd = E // H
    rng = np.random.default_rng(args.seed)
    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"tinyllama-1.1b-random-{args.dtype}")
    w.add_context_length(2048)
    w.add_embedding_length(E)
    w.add_block_count(NL)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(V)
    qt = Q[args.dtype]

    def mat(name, rows, cols, std):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std))
        w.add_tensor(name, quantize(x, qt), raw_dtype=qt)

    def vec(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, E, 1.0)
    vec("output_norm.weight", E)
    mat("output.weight", V, E, 1.0 / np.sqrt(E))
    for l in range(NL):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", H * hd, E, 1.0 / np.sqrt(E))
        mat(p + "attn_k.weight", HKV * hd, E, 1.0 / np.sqrt(E))
        mat(p + "attn_v.weight", HKV * hd, E, 1.0 / np.sqrt(E))
        mat(p + "attn_output.weight", E, H * hd, 1.0 / np.sqrt(H * hd))
        vec(p + "ffn_norm.weight", E)
        mat(p + "ffn_gate.weight", F, E, 1.0 / np.sqrt(E))
        mat(p + "ffn_up.weight", F, E, 1.0 / np.sqrt(E))
        mat(p + "ffn_down.weight", E, F, 1.0 / np.sqrt(F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
