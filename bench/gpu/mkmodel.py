#!/usr/bin/env python3
"""A random-weight Llama-family Hugging Face directory for the GPU check (bench/gpu/check.sh).

    mkmodel.py OUTDIR SHAPE TOKENIZER_DIR

SHAPE: 7b (Llama-2-7B: hidden 4096, 32 layers, 32 heads, MHA, ff 11008; 13.5 GB of fp16), smollm2
(SmolLM2-135M: hidden 576, 30 layers, 9 heads, GQA 3, ff 1536; the step whose host time matters) or
tiny (hidden 256, 2 layers, 8 heads; for the sanitizer runs). The vocabulary is 32064 rows, Phi-3's
padded size, over the phi-3-mini tokenizer's 32011 tokens (Llama-2's 32000 plus specials): random
weights sample the padding ids at once, which pllm must never draw (sampling.h, n_valid).
Weights: normal, std 0.02 (norms 1), fp16 safetensors in shards of at most 4 GiB, written with
torch on the GPU when there is one (about 20 s for 7b), else with numpy. Deterministic (seed 0).
"""
import json
import os
import shutil
import sys
import time

SHAPES = {
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32),
    # SmolLM2-135M's shape (576 hidden, 30 layers, 9 heads, 3 kv heads, ff 1536) over this
    # script's 32064-row vocabulary (SmolLM2's own is 49152): ~0.3 GB of fp16
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3),
    "tiny": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
                 num_key_value_heads=8),
}
VOCAB = 32064
SHARD_BYTES = 4 << 30


def tensors(shape):
    """(name, rows, cols) of every weight in file order; cols 0 marks a norm vector."""
    E, F, L = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    kv = E // shape["num_attention_heads"] * shape["num_key_value_heads"]
    yield "model.embed_tokens.weight", VOCAB, E
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", E, 0
        yield p + "self_attn.q_proj.weight", E, E
        yield p + "self_attn.k_proj.weight", kv, E
        yield p + "self_attn.v_proj.weight", kv, E
        yield p + "self_attn.o_proj.weight", E, E
        yield p + "post_attention_layernorm.weight", E, 0
        yield p + "mlp.gate_proj.weight", F, E
        yield p + "mlp.up_proj.weight", F, E
        yield p + "mlp.down_proj.weight", E, F
    yield "model.norm.weight", E, 0
    yield "lm_head.weight", VOCAB, E


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in SHAPES:
        sys.exit("usage: mkmodel.py OUTDIR 7b|smollm2|tiny TOKENIZER_DIR")
    out, name, tok = sys.argv[1], sys.argv[2], sys.argv[3]
    shape = SHAPES[name]
    os.makedirs(out, exist_ok=True)
    try:
        import torch
        from safetensors.torch import save_file
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        gen = torch.Generator(device=dev).manual_seed(0)

        def make(rows, cols):
            if cols == 0:
                return torch.ones(rows, dtype=torch.float16)
            return (torch.randn(rows, cols, generator=gen, device=dev) * 0.02).half().cpu()
    except ImportError:
        import numpy as np
        from safetensors.numpy import save_file
        rng = np.random.default_rng(0)

        def make(rows, cols):
            if cols == 0:
                return np.ones(rows, dtype=np.float16)
            return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    t0 = time.time()
    groups, cur, cur_bytes = [], [], 0
    for t in tensors(shape):
        b = t[1] * max(t[2], 1) * 2
        if cur and cur_bytes + b > SHARD_BYTES:
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.append(t)
        cur_bytes += b
    groups.append(cur)
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        fn = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: make(r, c) for n, r, c in group}, os.path.join(out, fn), metadata={"format": "pt"})
        for n, r, c in group:
            weight_map[n] = fn
            total += r * max(c, 1) * 2
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=VOCAB,
               max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000, torch_dtype="float16", **shape)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, fn), out)
    print(f"mkmodel: {name}: {total / 1e9:.2f} GB of fp16 in {len(groups)} shards, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
