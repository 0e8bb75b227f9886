#!/usr/bin/env python3
"""Random-weight test models written both as Hugging Face directories and as GGUF files.

    gen_hf_models.py OUTDIR      writes every model below and OUTDIR/manifest.json

One set of float32 weights per spec (Hugging Face naming and layout, [out, in] matrices, Q/K
unpermuted), written as:
  hf-<dtype>[-sharded][-fused]
                         config.json, optional generation_config.json, model.safetensors or
                         model-0000i-of-0000n.safetensors + model.safetensors.index.json;
                         F32, F16 or BF16 (BF16 by round-to-nearest-even, as torch does);
                         -fused: the experts as transformers 5 saves them (fuse_experts)
  <name>.gguf            the same weights (the same rounded values) as llama.cpp's
                         convert_hf_to_gguf.py lays them out: llama/mistral Q and K rows
                         permuted per head (row 2i+j of a head <- HF row j*d/2 + i, so that
                         NEOX pairs (i, i+d/2) become adjacent pairs), qwen2 unpermuted; norms
                         and biases F32; Llama-3 rope scaling as a rope_freqs.weight tensor
  <name>-q4km.gguf etc.  K-quant mixes like llama.cpp's Q4_K_M / Q5_K_M / Q6_K files: most
                         matrices Q4_K (or Q5_K), attn_v / ffn_down / output Q6_K, quantized by
                         this file's own simple K-quant packer (the gguf package implements no
                         K-quant quantizer); each packed tensor is checked against
                         gguf.quants.dequantize (error within half a quantization step).
Safetensors files are written by this file's own writer (the safetensors package cannot write
BF16 from numpy); F32/F16 files are read back with the safetensors package as a check.

Specs:
  llama-gqa  llama, GQA 8/2 heads, hidden 256, ff 512, untied, 2 layers (K-quant friendly sizes)
  llama-mha  llama, 4/4 heads, hidden 128, tied, linear rope scaling (factor 2)
  mistral    mistral, 4/1 heads, head_dim 48 != hidden/heads (explicit head_dim), untied
  qwen2      qwen2 (q/k/v biases, NEOX in GGUF too), 4/2 heads, hidden 256, ff 512, tied
  qwen3      qwen3 (per-head q/k RMSNorm, no biases, NEOX in GGUF), 4/2 heads, head_dim 48 != hidden/heads,
             tied
  phi3       phi3 (Phi-4-mini-like): fused qkv_proj / gate_up_proj (GGUF attn_qkv, ffn_up of 2 n_ff
             rows), partial rotary 0.75, LongRoPE (original context 16, max 512), 4/2 heads
  gemma3     gemma3_text (GGUF gemma3): GeGLU, pre/post norms stored as w (1 + w applied; GGUF holds
             1 + w as llama.cpp's converter writes it), q/k norms, embeddings times sqrt(hidden),
             query_pre_attn_scalar 40 != head_dim 48, 3 layers sliding/global/sliding (layer_types;
             GGUF sliding_window_pattern as one bool per layer) with a window of 8 (prompts of 13
             and 45 cross it), rope 1e6 global / 10000 local, 4/2 heads, tied
  qwen3moe   qwen3_moe (GGUF qwen3moe): qwen3 attention, 3 layers, 16 experts top-4 of ff 64 with
             norm_topk_prob, layer 1 dense (mlp_only_layers; ff 192); GGUF ffn_gate_inp and stacked
             ffn_{gate,up,down}_exps, expert_feed_forward_length
  qwen3moe-nonorm  the same without norm_topk_prob (GGUF expert_weights_norm false), 2 layers
  qwen2moe   qwen2_moe (GGUF qwen2moe): qwen2 attention (biases), 8 experts top-2 of ff 64 without
             renormalization, and a shared expert of ff 96 weighted by sigmoid(shared_expert_gate x)
  mixtral    mixtral (GGUF llama with llama.expert_count): 8 experts top-2 of ff 96, every layer;
             GGUF F32 stacked, GGUF F16 with the older per-expert ffn_{gate,up,down}.E tensors
  llama3     llama with Llama-3 rope scaling (factor 8, low 1, high 4, original context 64,
             rope base 500000: head_dim 32 has high, medium and low frequency pairs)
Deterministic per seed; weights std 1/sqrt(fan_in), embeddings std 1, norms 1 +- 0.1.
"""
import json
import math
import os
import struct
import sys

import numpy as np

SPECS = {
    "llama-gqa": dict(arch="llama", V=320, E=256, L=2, H=8, HKV=2, F=512, tied=False, theta=10000.0, eps=1e-5,
                      gen=dict(bos_token_id=1, eos_token_id=[2, 5], do_sample=True, temperature=0.6, top_p=0.9)),
    "llama-mha": dict(arch="llama", V=288, E=128, L=2, H=4, HKV=4, F=256, tied=True, theta=10000.0, eps=1e-6,
                      rope_scaling=dict(type="linear", factor=2.0), bos=1, eos=2),
    "mistral": dict(arch="mistral", V=300, E=128, L=2, H=4, HKV=1, F=192, tied=False, theta=1e6, eps=1e-5, head_dim=48,
                    sliding_window=None, gen=dict(bos_token_id=1, eos_token_id=2)),
    "qwen2": dict(arch="qwen2", V=352, E=256, L=2, H=4, HKV=2, F=512, tied=True, theta=1e6, eps=1e-6, bias=True,
                  gen=dict(bos_token_id=3, eos_token_id=[7, 8], do_sample=True, temperature=0.7, top_p=0.8, top_k=20,
                           repetition_penalty=1.05)),
    "qwen3": dict(arch="qwen3", V=336, E=128, L=2, H=4, HKV=2, F=256, tied=True, theta=1e6, eps=1e-6, head_dim=48,
                  qk_norm=True, gen=dict(bos_token_id=3, eos_token_id=[7, 9])),
    # Phi-4-mini-like: fused qkv_proj / gate_up_proj, partial rotary 0.75 (24 of 32 dims), LongRoPE
    # with an original context of 16 (prompts of 45 cross it) and max 512 (attention factor 1.5)
    "phi3": dict(arch="phi3", V=352, E=128, L=2, H=4, HKV=2, F=192, tied=False, theta=10000.0, eps=1e-5,
                 partial_rotary_factor=0.75,
                 rope_scaling=dict(type="longrope", short_factor=[1.0 + 0.25 * i for i in range(12)],
                                   long_factor=[1.5 + 1.5 * i for i in range(12)]),
                 original_max_position_embeddings=16, gen=dict(bos_token_id=1, eos_token_id=[2, 7])),
    "gemma3": dict(arch="gemma3", V=320, E=128, L=3, H=4, HKV=2, F=256, tied=True, theta=1e6, eps=1e-6, head_dim=48,
                   qk_norm=True, query_pre_attn_scalar=40, sliding_window=8, layer_types=["sliding_attention",
                   "full_attention", "sliding_attention"], rope_local_base_freq=10000.0,
                   gen=dict(bos_token_id=2, eos_token_id=[1, 106])),
    "llama3": dict(arch="llama", V=256, E=128, L=2, H=4, HKV=2, F=256, tied=False, theta=500000.0, eps=1e-5,
                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=64)),
    "qwen3moe": dict(arch="qwen3moe", V=320, E=128, L=3, H=4, HKV=2, F=192, tied=True, theta=1e6, eps=1e-6, head_dim=32,
                     qk_norm=True, experts=16, top_k=4, F_exp=64, norm_topk=True, mlp_only=[1],
                     gen=dict(bos_token_id=3, eos_token_id=[7, 9])),
    "qwen3moe-nonorm": dict(arch="qwen3moe", V=320, E=128, L=2, H=4, HKV=2, F=192, tied=False, theta=1e6, eps=1e-6,
                            head_dim=32, qk_norm=True, experts=16, top_k=4, F_exp=64, norm_topk=False, mlp_only=[]),
    "qwen2moe": dict(arch="qwen2moe", V=320, E=128, L=2, H=4, HKV=2, F=160, tied=False, theta=1e6, eps=1e-6, bias=True,
                     experts=8, top_k=2, F_exp=64, F_shexp=96, norm_topk=False, mlp_only=[]),
    "mixtral": dict(arch="mixtral", V=300, E=128, L=2, H=4, HKV=2, F=96, tied=False, theta=1e6, eps=1e-5, experts=8,
                    top_k=2, F_exp=96, norm_topk=True, mlp_only=[], gen=dict(bos_token_id=1, eos_token_id=2)),
    # small ones for the loader's error tests (tests/model_hf_malformed.py); not in OUTPUTS
    "tiny-llama": dict(arch="llama", V=64, E=32, L=2, H=4, HKV=2, F=64, tied=False, theta=10000.0, eps=1e-5,
                       gen=dict(bos_token_id=1, eos_token_id=[2, 3], temperature=0.5, top_k=7, min_p=0.05)),
    "tiny-qwen2": dict(arch="qwen2", V=64, E=32, L=1, H=4, HKV=2, F=64, tied=True, theta=1e6, eps=1e-6, bias=True, eos=5),
}

# (spec, kind, options): what generate() writes
OUTPUTS = [
    ("llama-gqa", "hf", dict(dtype="F32")),
    ("llama-gqa", "hf", dict(dtype="BF16", shards=3)),
    ("llama-gqa", "gguf", dict(dtype="F32")),
    ("llama-gqa", "gguf", dict(dtype="BF16")),
    ("llama-gqa", "gguf", dict(mix="q4km")),
    ("llama-gqa", "gguf", dict(mix="q5km")),
    ("llama-gqa", "gguf", dict(mix="q6k")),
    ("llama-mha", "hf", dict(dtype="F16")),
    ("llama-mha", "gguf", dict(dtype="F16")),
    ("mistral", "hf", dict(dtype="F32", shards=2)),
    ("mistral", "gguf", dict(dtype="F32")),
    ("qwen2", "hf", dict(dtype="F32")),
    ("qwen2", "hf", dict(dtype="BF16", shards=2)),
    ("qwen2", "gguf", dict(dtype="F32")),
    ("qwen2", "gguf", dict(dtype="BF16")),
    ("qwen2", "gguf", dict(mix="q4km")),
    ("qwen3", "hf", dict(dtype="F32")),
    ("qwen3", "hf", dict(dtype="BF16", shards=2)),
    ("qwen3", "gguf", dict(dtype="F32")),
    ("qwen3", "gguf", dict(dtype="BF16")),
    ("phi3", "hf", dict(dtype="F32")),
    ("phi3", "hf", dict(dtype="BF16", shards=2)),
    ("phi3", "gguf", dict(dtype="F32")),
    ("phi3", "gguf", dict(dtype="BF16")),
    ("gemma3", "hf", dict(dtype="F32")),
    ("gemma3", "hf", dict(dtype="BF16", shards=2)),
    ("gemma3", "gguf", dict(dtype="F32")),
    ("gemma3", "gguf", dict(dtype="F16")),
    ("qwen3moe", "hf", dict(dtype="F32")),
    ("qwen3moe", "hf", dict(dtype="BF16", shards=2)),
    ("qwen3moe", "gguf", dict(dtype="F32")),
    ("qwen3moe", "gguf", dict(dtype="BF16")),
    ("qwen3moe-nonorm", "hf", dict(dtype="F32")),
    ("qwen3moe-nonorm", "gguf", dict(dtype="F32")),
    ("qwen2moe", "hf", dict(dtype="F32")),
    ("qwen2moe", "gguf", dict(dtype="F32")),
    ("qwen2moe", "gguf", dict(dtype="BF16")),
    ("mixtral", "hf", dict(dtype="F32")),
    ("mixtral", "gguf", dict(dtype="F32")),
    ("mixtral", "gguf", dict(dtype="F16", per_expert=True)),
    # transformers 5's fused experts (fuse_experts below), each beside its per-expert twin
    ("qwen3moe", "hf", dict(dtype="F32", fused=True)),
    ("qwen3moe", "hf", dict(dtype="BF16", shards=2, fused=True)),
    ("qwen2moe", "hf", dict(dtype="F32", fused=True)),
    ("mixtral", "hf", dict(dtype="F32", fused=True)),
    ("mixtral", "hf", dict(dtype="F16")),
    ("mixtral", "hf", dict(dtype="F16", shards=3, fused=True)),
    ("qwen3moe", "gguf", dict(dtype="Q8_0")),
    ("llama3", "hf", dict(dtype="F32")),
    ("llama3", "gguf", dict(dtype="F32")),
]


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet), for the tokenizers
    tests write beside random-weight models (tests/cli_genconfig.py, tests/cudacli_e2e.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def head_dim(s):
    return s.get("head_dim") or s["E"] // s["H"]


def rope_dim(s):
    return int(head_dim(s) * s.get("partial_rotary_factor", 1.0))


def longrope_attn_factor(s):
    """transformers' default LongRoPE attention factor for max_position_embeddings 512."""
    orig = s["original_max_position_embeddings"]
    f = 512 / orig
    return 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))


def make_weights(spec, seed):
    """float32 weights in Hugging Face names and layout."""
    s = SPECS[spec]
    rng = np.random.default_rng(seed)
    E, F, V, H, HKV, hd = s["E"], s["F"], s["V"], s["H"], s["HKV"], head_dim(s)

    def mat(rows, cols, std):
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def vec(n, mean, std):
        return (mean + std * rng.standard_normal(n)).astype(np.float32)
    w = {"model.embed_tokens.weight": mat(V, E, 1.0), "model.norm.weight": vec(E, 1.0, 0.1)}
    if not s["tied"]:
        w["lm_head.weight"] = mat(V, E, 1 / math.sqrt(E))
    for l in range(s["L"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = vec(E, 1.0, 0.1)
        w[p + "self_attn.q_proj.weight"] = mat(H * hd, E, 1 / math.sqrt(E))
        w[p + "self_attn.k_proj.weight"] = mat(HKV * hd, E, 1 / math.sqrt(E))
        w[p + "self_attn.v_proj.weight"] = mat(HKV * hd, E, 1 / math.sqrt(E))
        if s.get("bias"):
            w[p + "self_attn.q_proj.bias"] = vec(H * hd, 0.0, 0.3)
            w[p + "self_attn.k_proj.bias"] = vec(HKV * hd, 0.0, 0.3)
            w[p + "self_attn.v_proj.bias"] = vec(HKV * hd, 0.0, 0.3)
        if s.get("qk_norm"):
            w[p + "self_attn.q_norm.weight"] = vec(hd, 1.0, 0.3)
            w[p + "self_attn.k_norm.weight"] = vec(hd, 1.0, 0.3)
        w[p + "self_attn.o_proj.weight"] = mat(E, H * hd, 1 / math.sqrt(H * hd))
        if s["arch"] == "gemma3":  # Gemma3RMSNorm's w of (1 + w), around 0; two more norms
            w[p + "input_layernorm.weight"] = vec(E, 0.0, 0.1)
            w[p + "post_attention_layernorm.weight"] = vec(E, 0.0, 0.1)
            w[p + "pre_feedforward_layernorm.weight"] = vec(E, 0.0, 0.1)
            w[p + "post_feedforward_layernorm.weight"] = vec(E, 0.0, 0.1)
            w[p + "self_attn.q_norm.weight"] = vec(hd, 0.0, 0.3)
            w[p + "self_attn.k_norm.weight"] = vec(hd, 0.0, 0.3)
        else:
            w[p + "post_attention_layernorm.weight"] = vec(E, 1.0, 0.1)
        if s.get("experts") and l not in s["mlp_only"]:  # Qwen3-MoE names (Mixtral's: below)
            NE, FE = s["experts"], s["F_exp"]
            w[p + "mlp.gate.weight"] = mat(NE, E, 2 / math.sqrt(E))  # router: well separated logits
            for e in range(NE):
                w[p + f"mlp.experts.{e}.gate_proj.weight"] = mat(FE, E, 1 / math.sqrt(E))
                w[p + f"mlp.experts.{e}.up_proj.weight"] = mat(FE, E, 1 / math.sqrt(E))
                w[p + f"mlp.experts.{e}.down_proj.weight"] = mat(E, FE, 1 / math.sqrt(FE))
            if s.get("F_shexp"):  # Qwen2-MoE's shared expert and its gate
                FS = s["F_shexp"]
                w[p + "mlp.shared_expert.gate_proj.weight"] = mat(FS, E, 1 / math.sqrt(E))
                w[p + "mlp.shared_expert.up_proj.weight"] = mat(FS, E, 1 / math.sqrt(E))
                w[p + "mlp.shared_expert.down_proj.weight"] = mat(E, FS, 1 / math.sqrt(FS))
                w[p + "mlp.shared_expert_gate.weight"] = mat(1, E, 1 / math.sqrt(E))
            if s["arch"] == "mixtral":
                for n in list(w):
                    if n.startswith(p + "mlp."):
                        m = n.replace("mlp.", "block_sparse_moe.").replace("gate_proj", "w1").replace(
                            "up_proj", "w3").replace("down_proj", "w2")
                        w[m] = w.pop(n)
        else:
            w[p + "mlp.gate_proj.weight"] = mat(F, E, 1 / math.sqrt(E))
            w[p + "mlp.up_proj.weight"] = mat(F, E, 1 / math.sqrt(E))
            w[p + "mlp.down_proj.weight"] = mat(E, F, 1 / math.sqrt(F))
        if s["arch"] == "phi3":  # Phi-3's fused layout: q, k, v rows; gate, up rows
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + "self_attn." + n + "_proj.weight") for n in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    if s["arch"] == "gemma3":
        w["model.norm.weight"] = vec(E, 0.0, 0.1)
    return w


def fuse_experts(w):
    """The weights w (per-expert names) as transformers 5 saves a MoE model (its
    conversion_mapping.py, read backwards: MergeModulelist(dim=0) stacks the experts,
    Concatenate(dim=1) joins the gate stack and the up stack): per MoE layer
      mlp.experts.gate_up_proj  [n_expert, 2 * ff, hidden]  expert e: gate rows, then up rows
      mlp.experts.down_proj     [n_expert, hidden, ff]
      mlp.gate.weight           the router (Mixtral's block_sparse_moe.gate renamed)
    The shared expert of Qwen2-MoE keeps its names. Insertion order otherwise kept."""
    out = {}
    for n, x in w.items():
        for blk, names in (("mlp.", ("gate_proj", "up_proj", "down_proj")), ("block_sparse_moe.", ("w1", "w3", "w2"))):
            key = "." + blk + "experts."
            if key not in n:
                continue
            p = n[:n.index(key) + 1]
            if p + "mlp.experts.down_proj" not in out:
                ne = 1 + max(int(k[len(p + blk + "experts."):].split(".")[0]) for k in w if k.startswith(p + blk + "experts."))
                st = [np.stack([w[f"{p}{blk}experts.{e}.{k}.weight"] for e in range(ne)]) for k in names]
                out[p + "mlp.experts.gate_up_proj"] = np.concatenate([st[0], st[1]], axis=1)
                out[p + "mlp.experts.down_proj"] = st[2]
            break
        else:
            out[n.replace(".block_sparse_moe.gate.", ".mlp.gate.")] = x
    return out


# -- float formats ------------------------------------------------------------------------------

def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def round_to(x, dtype):
    """The float32 values x takes once stored as dtype."""
    if dtype == "F32":
        return x.astype(np.float32)
    if dtype == "F16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    raise ValueError(dtype)


def encode(x, dtype):
    """Little-endian bytes of x stored as dtype."""
    if dtype == "F32":
        return x.astype("<f4").tobytes()
    if dtype == "F16":
        return x.astype("<f2").tobytes()
    if dtype == "BF16":
        return bf16_bits(x).astype("<u2").tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors, metadata=None, align=8):
    """tensors: list of (name, dtype name, shape, bytes). Header padded with spaces to align."""
    hdr, off = {}, 0
    if metadata is not None:
        hdr["__metadata__"] = metadata
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % align)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def hf_config(spec):
    s = SPECS[spec]
    if s["arch"] == "gemma3":  # Gemma3TextConfig's fields (hidden_activation, not hidden_act)
        return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": s["E"],
                "intermediate_size": s["F"], "num_hidden_layers": s["L"], "num_attention_heads": s["H"],
                "num_key_value_heads": s["HKV"], "head_dim": s["head_dim"], "vocab_size": s["V"],
                "rms_norm_eps": s["eps"], "rope_theta": s["theta"], "rope_local_base_freq": s["rope_local_base_freq"],
                "max_position_embeddings": 512, "query_pre_attn_scalar": s["query_pre_attn_scalar"],
                "sliding_window": s["sliding_window"], "layer_types": s["layer_types"],
                "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
                "attn_logit_softcapping": None, "rope_scaling": None, "attention_bias": False,
                "tie_word_embeddings": True, "torch_dtype": "float32"}
    c = {"architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                                   "qwen3": "Qwen3ForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM",
                                   "qwen2moe": "Qwen2MoeForCausalLM",
                                   "mixtral": "MixtralForCausalLM",
                                   "phi3": "Phi3ForCausalLM"}[s["arch"]]],
         "model_type": {"qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe"}.get(s["arch"], s["arch"]), "hidden_size": s["E"], "intermediate_size": s["F"], "num_hidden_layers": s["L"],
         "num_attention_heads": s["H"], "num_key_value_heads": s["HKV"], "vocab_size": s["V"], "rms_norm_eps": s["eps"],
         "rope_theta": s["theta"], "max_position_embeddings": 512, "tie_word_embeddings": s["tied"], "hidden_act": "silu",
         "torch_dtype": "float32", "rope_scaling": s.get("rope_scaling")}
    if "head_dim" in s:
        c["head_dim"] = s["head_dim"]
    if "sliding_window" in s:
        c["sliding_window"] = s["sliding_window"]
    if s["arch"] in ("qwen2", "qwen3", "qwen3moe", "qwen2moe"):
        c.update(use_sliding_window=False, sliding_window=4096, max_window_layers=2)
    if s["arch"] in ("qwen3", "qwen3moe"):
        c["attention_bias"] = False
    if s["arch"] == "qwen2moe":  # Qwen2MoeConfig's fields
        c.update(num_experts=s["experts"], num_experts_per_tok=s["top_k"], moe_intermediate_size=s["F_exp"],
                 shared_expert_intermediate_size=s["F_shexp"], norm_topk_prob=s["norm_topk"], decoder_sparse_step=1,
                 mlp_only_layers=s["mlp_only"], qkv_bias=True)
    if s["arch"] == "qwen3moe":  # Qwen3MoeConfig's fields
        c.update(num_experts=s["experts"], num_experts_per_tok=s["top_k"], moe_intermediate_size=s["F_exp"],
                 norm_topk_prob=s["norm_topk"], decoder_sparse_step=1, mlp_only_layers=s["mlp_only"],
                 output_router_logits=False, router_aux_loss_coef=0.001)
    if s["arch"] == "mixtral":  # MixtralConfig's (intermediate_size is the experts')
        c.update(num_local_experts=s["experts"], num_experts_per_tok=s["top_k"], sliding_window=None,
                 router_jitter_noise=0.0)
    for k in ("partial_rotary_factor", "original_max_position_embeddings"):
        if k in s:
            c[k] = s[k]
    if "bos" in s:
        c["bos_token_id"] = s["bos"]
    if "eos" in s:
        c["eos_token_id"] = s["eos"]
    return c


def write_hf(outdir, spec, w, dtype="F32", shards=1):
    """A Hugging Face directory of weights w stored as dtype, in `shards` files."""
    os.makedirs(outdir, exist_ok=True)
    s = SPECS[spec]
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(hf_config(spec), f, indent=2)
    if s.get("gen"):
        with open(os.path.join(outdir, "generation_config.json"), "w") as f:
            json.dump(dict(s["gen"], transformers_version="4.45.0"), f, indent=2)
    names = list(w)
    items = [(n, dtype, w[n].shape, encode(w[n], dtype)) for n in names]
    meta = {"format": "pt"}
    if shards == 1:
        write_safetensors(os.path.join(outdir, "model.safetensors"), items, meta)
        files = ["model.safetensors"]
    else:
        per = math.ceil(len(items) / shards)
        wmap, files = {}, []
        for i in range(shards):
            fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = items[i * per:(i + 1) * per]
            write_safetensors(os.path.join(outdir, fn), part, meta)
            files.append(fn)
            wmap.update({n: fn for n, _, _, _ in part})
        with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(len(d) for _, _, _, d in items)}, "weight_map": wmap}, f, indent=2)
    if dtype != "BF16":  # read back with the safetensors package
        from safetensors.numpy import load_file
        got = {}
        for fn in files:
            got.update(load_file(os.path.join(outdir, fn)))
        for n in names:
            assert np.array_equal(got[n].astype(np.float32), round_to(w[n], dtype)), n
    return outdir


# -- K-quant packing (numpy; layouts as GGML defines them) ----------------------------------------

def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def pack_q45_k(x, bits):
    """Q4_K (bits 4) or Q5_K (bits 5) blocks of x [rows][cols], cols % 256 == 0 -> uint8 [rows][bytes]."""
    rows, cols = x.shape
    b = x.reshape(-1, 8, 32).astype(np.float64)           # [blocks][sub][32]
    nmax = (1 << bits) - 1
    lo = np.minimum(b.min(axis=2), 0.0)
    hi = b.max(axis=2)
    scale = (hi - lo) / nmax                               # [blocks][8]
    mins = -lo
    d = _f16(scale.max(axis=1) / 63)                       # [blocks]
    dmin = _f16(mins.max(axis=1) / 63)
    df, dmf = d.astype(np.float64)[:, None], dmin.astype(np.float64)[:, None]
    sc = np.clip(np.rint(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), 0, 63).astype(np.uint8)
    mn = np.clip(np.rint(np.divide(mins, dmf, out=np.zeros_like(mins), where=dmf > 0)), 0, 63).astype(np.uint8)
    # effective scale / min in float32, as the dequantizer computes them
    deff = (d.astype(np.float32)[:, None] * sc.astype(np.float32)).astype(np.float64)
    meff = (dmin.astype(np.float32)[:, None] * mn.astype(np.float32)).astype(np.float64)
    q = np.rint(np.divide(b + meff[..., None], deff[..., None], out=np.zeros_like(b), where=deff[..., None] > 0))
    q = np.clip(q, 0, nmax).astype(np.uint8).reshape(-1, 256)
    scales = np.zeros((len(d), 12), dtype=np.uint8)
    for j in range(4):
        scales[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = (mn[:, j] & 63) | ((mn[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 15) | ((mn[:, j + 4] & 15) << 4)
    qs = np.zeros((len(d), 128), dtype=np.uint8)
    qh = np.zeros((len(d), 32), dtype=np.uint8)
    for c in range(4):
        lo_q, hi_q = q[:, 64 * c:64 * c + 32], q[:, 64 * c + 32:64 * c + 64]
        qs[:, 32 * c:32 * c + 32] = (lo_q & 15) | ((hi_q & 15) << 4)
        qh |= (((lo_q >> 4) & 1) << (2 * c)) | (((hi_q >> 4) & 1) << (2 * c + 1))
    parts = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales]
    if bits == 5:
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(rows, -1)


def pack_q6_k(x):
    """Q6_K blocks of x [rows][cols] -> uint8 [rows][bytes]."""
    rows, cols = x.shape
    b = x.reshape(-1, 16, 16).astype(np.float64)
    amax = np.abs(b).max(axis=2)
    s = amax / 31
    d = _f16(s.max(axis=1) / 127)
    df = d.astype(np.float64)[:, None]
    sc = np.clip(np.rint(np.divide(s, df, out=np.zeros_like(s), where=df > 0)), -128, 127).astype(np.int8)
    deff = (d.astype(np.float32)[:, None] * sc.astype(np.float32)).astype(np.float64)
    q = np.rint(np.divide(b, deff[..., None], out=np.zeros_like(b), where=deff[..., None] != 0))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 256)
    nb = len(d)
    ql = np.zeros((nb, 128), dtype=np.uint8)
    qh = np.zeros((nb, 64), dtype=np.uint8)
    for h in range(2):
        e = q[:, 128 * h:128 * h + 128]
        q0, q1, q2, q3 = e[:, 0:32], e[:, 32:64], e[:, 64:96], e[:, 96:128]
        ql[:, 64 * h:64 * h + 32] = (q0 & 15) | ((q2 & 15) << 4)
        ql[:, 64 * h + 32:64 * h + 64] = (q1 & 15) | ((q3 & 15) << 4)
        qh[:, 32 * h:32 * h + 32] = (q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(-1, 2)], axis=1).reshape(rows, -1)


def kquant(x, tname):
    """Pack x as tname (Q4_K, Q5_K, Q6_K) and check it against gguf's dequantizer."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize
    packed = {"Q4_K": lambda: pack_q45_k(x, 4), "Q5_K": lambda: pack_q45_k(x, 5), "Q6_K": lambda: pack_q6_k(x)}[tname]()
    back = dequantize(packed, Q[tname]).reshape(x.shape)
    nmax = {"Q4_K": 15, "Q5_K": 31, "Q6_K": 63}[tname]
    # every sub-block's step is at most (range / nmax) plus the 6/8-bit scale rounding: allow a
    # generous bound per tensor (a packing bug gives errors of the order of the values)
    err = np.abs(back - x).max()
    bound = 2.5 * (x.max() - x.min()) / nmax
    assert err <= bound, f"{tname} packing error {err} > {bound}"
    return packed


# -- GGUF -----------------------------------------------------------------------------------------

def permute_qk(wt, n_head):
    """llama.cpp's convert_hf_to_gguf permutation of HF Q/K rows (per head: halves -> pairs)."""
    rows = wt.shape[0]
    return wt.reshape(n_head, 2, rows // n_head // 2, *wt.shape[1:]).swapaxes(1, 2).reshape(wt.shape)


MIXES = {  # GGUF tensor name suffix -> type; default for the rest
    "q4km": dict(default="Q4_K", special="Q6_K"),
    "q5km": dict(default="Q5_K", special="Q6_K"),
    "q6k": dict(default="Q6_K", special="Q6_K"),
}


def write_gguf(path, spec, w, dtype="F32", mix=None, extra_kv=None, per_expert=False):
    """extra_kv: more metadata, {key: int (uint32) or float (float32)}."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    s = SPECS[spec]
    arch, hd = s["arch"], head_dim(s)
    if arch == "mixtral":  # llama.cpp writes Mixtral as llama with experts
        arch = "llama"
    g = gguf.GGUFWriter(path, arch)
    g.add_name(f"pllm-test-{spec}-{mix or dtype}")
    g.add_context_length(512)
    g.add_embedding_length(s["E"])
    g.add_block_count(s["L"])
    g.add_feed_forward_length(s["F"])
    g.add_head_count(s["H"])
    g.add_head_count_kv(s["HKV"])
    if "head_dim" in s:
        g.add_key_length(hd)
        g.add_value_length(hd)
    g.add_rope_dimension_count(rope_dim(s))
    g.add_layer_norm_rms_eps(s["eps"])
    g.add_rope_freq_base(s["theta"])
    g.add_vocab_size(s["V"])
    rs = s.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        g.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        g.add_rope_scaling_factor(rs["factor"])
    for k, v in (extra_kv or {}).items():
        (g.add_uint32 if isinstance(v, int) else g.add_float32)(k, v)
    if kind == "longrope":  # as llama.cpp's Phi3MiniModel converter writes it
        g.add_uint32(f"{arch}.rope.scaling.original_context_length", s["original_max_position_embeddings"])
        g.add_float32(f"{arch}.rope.scaling.attn_factor", longrope_attn_factor(s))
        g.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        g.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
    permute = arch in ("llama", "mistral")
    if s.get("experts"):  # llama.cpp's MoE keys (Mixtral: feed_forward_length is the experts')
        g.add_expert_count(s["experts"])
        g.add_expert_used_count(s["top_k"])
        if arch in ("qwen3moe", "qwen2moe"):
            g.add_expert_feed_forward_length(s["F_exp"])
        if s.get("F_shexp"):
            g.add_expert_shared_feed_forward_length(s["F_shexp"])
        if not s["norm_topk"] and arch != "qwen2moe":  # (llama.cpp: qwen2moe never renormalizes)
            g.add_bool(f"{arch}.expert_weights_norm", False)

    def put_mat(name, x, special=False):
        if mix:
            t = MIXES[mix]["special" if special else "default"]
            g.add_tensor(name, kquant(x, t), raw_dtype=Q[t])
        elif dtype == "F32":
            g.add_tensor(name, x.astype(np.float32))
        elif dtype == "F16":
            g.add_tensor(name, x.astype(np.float16))
        elif dtype == "BF16":
            g.add_tensor(name, bf16_bits(x).reshape(x.shape[0], -1).view(np.uint8), raw_dtype=Q.BF16)
        elif dtype == "Q8_0":  # the int8 path's type (norms stay F32)
            from gguf.quants import quantize
            g.add_tensor(name, quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            raise ValueError(dtype)

    def put_vec(name, x):
        if arch == "gemma3" and name.endswith("norm.weight"):  # llama.cpp's converter: 1 + w
            x = round_to(x, dtype if not mix else "F32") + np.float32(1)
        g.add_tensor(name, round_to(x, dtype if not mix and dtype != "Q8_0" else "F32"))

    if arch == "gemma3":  # llama.cpp's gemma3 keys (the pattern as one bool per layer: true = sliding)
        g.add_sliding_window(s["sliding_window"])
        g.add_sliding_window_pattern([t == "sliding_attention" for t in s["layer_types"]])
        g.add_attention_scale(s["query_pre_attn_scalar"] ** -0.5)

    if kind == "llama3":
        import ref_forward_hf as R  # the reference's factor formula (transformers' definition)
        ff = R.llama3_factors(s["theta"], hd, rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"],
                              rs["original_max_position_embeddings"])
        g.add_tensor("rope_freqs.weight", ff.astype(np.float32))
    put_mat("token_embd.weight", w["model.embed_tokens.weight"])
    put_vec("output_norm.weight", w["model.norm.weight"])
    if not s["tied"]:
        put_mat("output.weight", w["lm_head.weight"], special=True)
    for l in range(s["L"]):
        p, h = f"blk.{l}.", f"model.layers.{l}."
        if arch == "phi3":  # llama.cpp keeps the fused tensors: attn_qkv, ffn_up of 2 n_ff rows
            put_vec(p + "attn_norm.weight", w[h + "input_layernorm.weight"])
            put_mat(p + "attn_qkv.weight", w[h + "self_attn.qkv_proj.weight"])
            put_mat(p + "attn_output.weight", w[h + "self_attn.o_proj.weight"])
            put_vec(p + "ffn_norm.weight", w[h + "post_attention_layernorm.weight"])
            put_mat(p + "ffn_up.weight", w[h + "mlp.gate_up_proj.weight"])
            put_mat(p + "ffn_down.weight", w[h + "mlp.down_proj.weight"], special=True)
            continue
        wq, wk = w[h + "self_attn.q_proj.weight"], w[h + "self_attn.k_proj.weight"]
        if permute:
            wq, wk = permute_qk(wq, s["H"]), permute_qk(wk, s["HKV"])
        put_vec(p + "attn_norm.weight", w[h + "input_layernorm.weight"])
        put_mat(p + "attn_q.weight", wq)
        put_mat(p + "attn_k.weight", wk)
        put_mat(p + "attn_v.weight", w[h + "self_attn.v_proj.weight"], special=True)
        if s.get("qk_norm"):
            put_vec(p + "attn_q_norm.weight", w[h + "self_attn.q_norm.weight"])
            put_vec(p + "attn_k_norm.weight", w[h + "self_attn.k_norm.weight"])
        if s.get("bias"):
            put_vec(p + "attn_q.bias", w[h + "self_attn.q_proj.bias"])
            put_vec(p + "attn_k.bias", w[h + "self_attn.k_proj.bias"])
            put_vec(p + "attn_v.bias", w[h + "self_attn.v_proj.bias"])
        put_mat(p + "attn_output.weight", w[h + "self_attn.o_proj.weight"])
        if arch == "gemma3":
            put_vec(p + "post_attention_norm.weight", w[h + "post_attention_layernorm.weight"])
            put_vec(p + "ffn_norm.weight", w[h + "pre_feedforward_layernorm.weight"])
            put_vec(p + "post_ffw_norm.weight", w[h + "post_feedforward_layernorm.weight"])
        else:
            put_vec(p + "ffn_norm.weight", w[h + "post_attention_layernorm.weight"])
        mo = h + ("block_sparse_moe." if s["arch"] == "mixtral" else "mlp.")
        if mo + "gate.weight" in w:  # experts: the router, then stacked [n_expert, rows, cols] (or per expert)
            put_mat(p + "ffn_gate_inp.weight", w[mo + "gate.weight"])
            if mo + "shared_expert_gate.weight" in w:  # llama.cpp: the gate as a vector [n_embd]
                put_vec(p + "ffn_gate_inp_shexp.weight", w[mo + "shared_expert_gate.weight"].reshape(-1))
                put_mat(p + "ffn_gate_shexp.weight", w[mo + "shared_expert.gate_proj.weight"])
                put_mat(p + "ffn_up_shexp.weight", w[mo + "shared_expert.up_proj.weight"])
                put_mat(p + "ffn_down_shexp.weight", w[mo + "shared_expert.down_proj.weight"])
            names = ("w1", "w3", "w2") if s["arch"] == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            for kind, hn in zip(("gate", "up", "down"), names):
                mats = [w[mo + f"experts.{e}.{hn}.weight"] for e in range(s["experts"])]
                if per_expert:
                    for e, m in enumerate(mats):
                        put_mat(p + f"ffn_{kind}.{e}.weight", m)
                elif dtype == "Q8_0":
                    from gguf.quants import quantize
                    st = np.stack(mats)
                    g.add_tensor(p + f"ffn_{kind}_exps.weight", quantize(st.reshape(-1, st.shape[-1]), Q.Q8_0).reshape(
                        st.shape[0], st.shape[1], -1), raw_dtype=Q.Q8_0)
                elif dtype == "BF16":
                    g.add_tensor(p + f"ffn_{kind}_exps.weight", bf16_bits(np.stack(mats)).view(np.uint8).reshape(
                        len(mats), mats[0].shape[0], -1), raw_dtype=Q.BF16)
                else:
                    g.add_tensor(p + f"ffn_{kind}_exps.weight", np.stack(mats).astype(
                        {"F32": np.float32, "F16": np.float16}[dtype]))
            continue
        put_mat(p + "ffn_gate.weight", w[h + "mlp.gate_proj.weight"])
        put_mat(p + "ffn_up.weight", w[h + "mlp.up_proj.weight"])
        put_mat(p + "ffn_down.weight", w[h + "mlp.down_proj.weight"], special=True)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    return path


def output_name(spec, kind, opt):
    if kind == "hf":
        return (f"{spec}-hf-{opt['dtype'].lower()}" + ("-sharded" if opt.get("shards", 1) > 1 else "")
                + ("-fused" if opt.get("fused") else ""))
    return f"{spec}-{opt.get('mix') or opt['dtype'].lower()}{'-perexpert' if opt.get('per_expert') else ''}.gguf"


def generate(outdir, only=None):
    """Write every output (or those whose spec is in only); returns the manifest list."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyref"))
    os.makedirs(outdir, exist_ok=True)
    manifest, weights = [], {}
    for si, spec in enumerate(SPECS):
        if only and spec not in only:
            continue
        weights[spec] = make_weights(spec, seed=4242 + si)
    for spec, kind, opt in OUTPUTS:
        if spec not in weights:
            continue
        path = os.path.join(outdir, output_name(spec, kind, opt))
        if kind == "hf":
            w = fuse_experts(weights[spec]) if opt.get("fused") else weights[spec]
            write_hf(path, spec, w, opt["dtype"], opt.get("shards", 1))
        else:
            write_gguf(path, spec, weights[spec], opt.get("dtype", "F32"), opt.get("mix"), per_expert=opt.get("per_expert", False))
        manifest.append(dict(spec=spec, kind=kind, path=path, dtype=opt.get("dtype"), mix=opt.get("mix"),
                             shards=opt.get("shards", 1), fused=bool(opt.get("fused")),
                             per_expert=bool(opt.get("per_expert")), **{k: v for k, v in SPECS[spec].items()}))
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_hf_models.py OUTDIR")
    for m in generate(sys.argv[1]):
        print(m["path"])
