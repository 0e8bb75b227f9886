#!/usr/bin/env python3
"""Tiny random-weight GGUF models for the CPU backend tests.

    gen_models.py OUTDIR            writes OUTDIR/<shape>-<dtype>.gguf and OUTDIR/models.json

Shapes (each in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1):
  mha    llama, n_head 4 = n_head_kv 4, head_dim 16, n_ff 128, tied output, vocab 256
  gqa    llama, n_head 6, n_head_kv 2 (GQA), n_embd 96, head_dim 16, n_ff 160, untied,
         vocab 300, linear RoPE scaling (factor 2), rope base 50000
  odd    llama, n_embd 96, n_head 4 -> head_dim 24 (not a power of two), n_head_kv 2,
         n_ff 224, partial rotary (rope_dim 16 of 24), 3 layers, untied, vocab 320, eps 1e-6
  qwen2  qwen2 (Q/K/V biases, NEOX RoPE), n_head 4, n_head_kv 2, head_dim 16, n_ff 96, tied,
         vocab 288

Matrices are quantized with gguf.quants.quantize (the PyPI gguf package, independent of pllm);
norm weights and biases stay F32 as llama.cpp's converter leaves them. Weights are random
normal with std 1/sqrt(fan_in) (token embeddings std 1), so activations stay of order one.
No tokenizer metadata: the model loader needs only llama.vocab_size. Deterministic per seed.
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize

DTYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]

SHAPES = {
    "mha": dict(arch="llama", n_vocab=256, n_embd=64, n_layer=2, n_head=4, n_head_kv=4, n_ff=128,
                tied=True, rope_theta=10000.0, eps=1e-5),
    "gqa": dict(arch="llama", n_vocab=300, n_embd=96, n_layer=2, n_head=6, n_head_kv=2, n_ff=160,
                tied=False, rope_theta=50000.0, eps=1e-5, rope_linear=2.0),
    "odd": dict(arch="llama", n_vocab=320, n_embd=96, n_layer=3, n_head=4, n_head_kv=2, n_ff=224,
                tied=False, rope_theta=10000.0, eps=1e-6, rope_dim=16),
    "qwen2": dict(arch="qwen2", n_vocab=288, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                  tied=True, rope_theta=1000000.0, eps=1e-6, bias=True),
}


def _matrix(w, dtype):
    """(data, raw_dtype) for add_tensor: w is [rows][cols] float32."""
    if dtype == "F32":
        return w.astype(np.float32), None
    if dtype == "F16":
        return w.astype(np.float16), None
    qt = Q[dtype]
    return quantize(w.astype(np.float32), qt), qt


def write_model(path, shape, dtype, seed):
    cfg = SHAPES[shape]
    rng = np.random.default_rng(seed)
    E, F, V, H, HKV = cfg["n_embd"], cfg["n_ff"], cfg["n_vocab"], cfg["n_head"], cfg["n_head_kv"]
    hd = E // H
    arch = cfg["arch"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"pllm-test-{shape}-{dtype}")
    w.add_context_length(512)
    w.add_embedding_length(E)
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_layer_norm_rms_eps(cfg["eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg.get("rope_dim", hd))
    w.add_vocab_size(V)
    if "rope_linear" in cfg:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(cfg["rope_linear"])

    def mat(name, rows, cols, std):
        data, raw = _matrix(rng.standard_normal((rows, cols)).astype(np.float32) * std, dtype)
        w.add_tensor(name, data, raw_dtype=raw)

    def vec(name, n, mean, std):
        w.add_tensor(name, (mean + std * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, E, 1.0)
    vec("output_norm.weight", E, 1.0, 0.1)
    if not cfg["tied"]:
        mat("output.weight", V, E, 1.0 / np.sqrt(E))
    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight", E, 1.0, 0.1)
        mat(p + "attn_q.weight", H * hd, E, 1.0 / np.sqrt(E))
        mat(p + "attn_k.weight", HKV * hd, E, 1.0 / np.sqrt(E))
        mat(p + "attn_v.weight", HKV * hd, E, 1.0 / np.sqrt(E))
        if cfg.get("bias"):
            vec(p + "attn_q.bias", H * hd, 0.0, 0.2)
            vec(p + "attn_k.bias", HKV * hd, 0.0, 0.2)
            vec(p + "attn_v.bias", HKV * hd, 0.0, 0.2)
        mat(p + "attn_output.weight", E, H * hd, 1.0 / np.sqrt(H * hd))
        vec(p + "ffn_norm.weight", E, 1.0, 0.1)
        mat(p + "ffn_gate.weight", F, E, 1.0 / np.sqrt(E))
        mat(p + "ffn_up.weight", F, E, 1.0 / np.sqrt(E))
        mat(p + "ffn_down.weight", E, F, 1.0 / np.sqrt(F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def generate(outdir, shapes=None, dtypes=None):
    """Write every (shape, dtype) model into outdir; returns the manifest list."""
    os.makedirs(outdir, exist_ok=True)
    manifest = []
    for si, shape in enumerate(shapes or SHAPES):
        for di, dtype in enumerate(dtypes or DTYPES):
            path = os.path.join(outdir, f"{shape}-{dtype}.gguf")
            write_model(path, shape, dtype, seed=1000 + 17 * si + di)
            manifest.append(dict(shape=shape, dtype=dtype, path=path, **SHAPES[shape]))
    with open(os.path.join(outdir, "models.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_models.py OUTDIR")
    for m in generate(sys.argv[1]):
        print(m["path"])
