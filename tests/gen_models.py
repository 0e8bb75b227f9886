#!/usr/bin/env python3
"""Tiny random-weight GGUF models for the CPU backend tests.

    gen_models.py OUTDIR            writes OUTDIR/<shape>-<dtype>.gguf and OUTDIR/models.json

Shapes (each in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1):
  mha    llama, n_head 4 = n_head_kv 4, head_dim 16, n_ff 128, tied output, vocab 256,
         Llama-3 style per-pair RoPE factors (rope_freqs.weight, random in [1, 8])
  gqa    llama, n_head 6, n_head_kv 2 (GQA), n_embd 96, head_dim 16, n_ff 160, untied,
         vocab 300, linear RoPE scaling (factor 2), rope base 50000
  odd    llama, n_embd 96, n_head 4 -> head_dim 24 (not a power of two), n_head_kv 2,
         n_ff 224, partial rotary (rope_dim 16 of 24), 3 layers, untied, vocab 320, eps 1e-6
  qwen2  qwen2 (Q/K/V biases, NEOX RoPE), n_head 4, n_head_kv 2, head_dim 16, n_ff 96, tied,
         vocab 288
and, in the K-quants Q4_K, Q5_K, Q6_K (rows of 256-element super-blocks):
  kq     llama, n_embd 256, n_head 4, n_head_kv 2, head_dim 64, n_ff 512, untied, vocab 300

Matrices are quantized with gguf.quants.quantize (the PyPI gguf package, independent of pllm);
the gguf package cannot quantize K-quants, so their matrices are random super-blocks (random
codes, sub-block scales and mins) whose d/dmin are set so that the dequantized matrix has the
wanted standard deviation. Norm weights and biases stay F32 as llama.cpp's converter leaves them. Weights are random
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
K_DTYPES = ["Q4_K", "Q5_K", "Q6_K"]

SHAPES = {
    "mha": dict(arch="llama", n_vocab=256, n_embd=64, n_layer=2, n_head=4, n_head_kv=4, n_ff=128,
                tied=True, rope_theta=10000.0, eps=1e-5, rope_freqs=True),
    "gqa": dict(arch="llama", n_vocab=300, n_embd=96, n_layer=2, n_head=6, n_head_kv=2, n_ff=160,
                tied=False, rope_theta=50000.0, eps=1e-5, rope_linear=2.0),
    "odd": dict(arch="llama", n_vocab=320, n_embd=96, n_layer=3, n_head=4, n_head_kv=2, n_ff=224,
                tied=False, rope_theta=10000.0, eps=1e-6, rope_dim=16),
    "qwen2": dict(arch="qwen2", n_vocab=288, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                  tied=True, rope_theta=1000000.0, eps=1e-6, bias=True),
    "kq": dict(arch="llama", n_vocab=300, n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512,
               tied=False, rope_theta=10000.0, eps=1e-5, dtypes=K_DTYPES),
}

# K-quant super-block layouts (bytes): the offset of the half-float d (and dmin), and the mean
# of dmin * mn that cancels the mean of d * sc * q (so that weights are centred)
_KQ = {"Q4_K": dict(size=144, d=0, dmin=2, dmin_ratio=7.5),
       "Q5_K": dict(size=176, d=0, dmin=2, dmin_ratio=15.5),
       "Q6_K": dict(size=210, d=208, dmin=None, dmin_ratio=0.0)}


def _random_kquant(rng, rows, cols, std, dtype):
    """Random K-quant super-blocks [rows][cols/256] scaled to the given standard deviation."""
    from gguf.quants import dequantize
    k = _KQ[dtype]
    nb = cols // 256
    blocks = rng.integers(0, 256, size=(rows, nb, k["size"]), dtype=np.uint8)

    def set_scales(d, dmin):
        blocks[:, :, k["d"]:k["d"] + 2] = np.full((rows, nb, 1), d, dtype=np.float16).view(np.uint8)
        if k["dmin"] is not None:
            blocks[:, :, k["dmin"]:k["dmin"] + 2] = np.full((rows, nb, 1), dmin, dtype=np.float16).view(np.uint8)

    set_scales(1.0, k["dmin_ratio"])
    s = float(dequantize(blocks.reshape(rows, -1), Q[dtype]).std())
    set_scales(std / s, k["dmin_ratio"] * std / s)
    return blocks.reshape(rows, -1)


def _matrix(w, dtype):
    """(data, raw_dtype) for add_tensor: w is [rows][cols] float32."""
    if dtype == "F32":
        return w.astype(np.float32), None
    if dtype == "F16":
        return w.astype(np.float16), None
    qt = Q[dtype]
    return quantize(w.astype(np.float32), qt), qt


def write_model(path, shape, dtype, seed):
    """One random model: shape is a SHAPES key, or a config dict of the same fields (plus n_ctx,
    default 512, and name); dtype as in DTYPES or K_DTYPES."""
    cfg = SHAPES[shape] if isinstance(shape, str) else shape
    if not isinstance(shape, str):
        shape = cfg.get("name", "custom")
    rng = np.random.default_rng(seed)
    E, F, V, H, HKV = cfg["n_embd"], cfg["n_ff"], cfg["n_vocab"], cfg["n_head"], cfg["n_head_kv"]
    hd = E // H
    arch = cfg["arch"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"pllm-test-{shape}-{dtype}")
    w.add_context_length(cfg.get("n_ctx", 512))
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
        if dtype in _KQ:
            w.add_tensor(name, _random_kquant(rng, rows, cols, std, dtype), raw_dtype=Q[dtype])
            return
        data, raw = _matrix(rng.standard_normal((rows, cols)).astype(np.float32) * std, dtype)
        w.add_tensor(name, data, raw_dtype=raw)

    def vec(name, n, mean, std):
        w.add_tensor(name, (mean + std * rng.standard_normal(n)).astype(np.float32))

    if cfg.get("rope_freqs"):
        w.add_tensor("rope_freqs.weight", rng.uniform(1.0, 8.0, cfg.get("rope_dim", hd) // 2).astype(np.float32))
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
        for di, dtype in enumerate(dtypes or SHAPES[shape].get("dtypes", DTYPES)):
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
