#!/usr/bin/env python3
"""An independent numpy forward pass of llama / mistral / qwen2 / qwen3 models from either a Hugging
Face directory or a GGUF file, for checking pllm's loaders and backends.

Written from the models' math and the two formats' conventions, not from pllm's C code:
  - Hugging Face: config.json (transformers' LlamaConfig / MistralConfig / Qwen2Config field
    names and defaults), safetensors read by this file's own small reader (8-byte header
    length, JSON header, raw little-endian data; BF16 widened by a 16-bit shift) from
    model.safetensors or the shards of model.safetensors.index.json. Q/K are used as stored,
    rotated NEOX style: pairs (x[i], x[i + d/2]) ("rotate_half" in transformers).
  - GGUF: read and dequantized by the PyPI gguf package (gguf.quants.dequantize). llama and
    mistral files hold Q/K rows permuted by llama.cpp's converter, so they are rotated in
    adjacent pairs (x[2i], x[2i+1]); qwen2 and qwen3 files are NEOX. rope_freqs.weight, when present,
    divides each pair's frequency (Llama-3 scaling as llama.cpp applies it).
  - The graph: x = embed[ids]; per layer h = RMSNorm(x) * attn_norm; q, k, v = h W^T (+ b for
    qwen2); qwen3: each q head q_h <- RMSNorm(q_h) * q_norm and each k head likewise with
    k_norm (transformers' Qwen3Attention: the norm over head_dim, before RoPE); RoPE on the first rope_dim dims of each q/k head with theta_i = pos * base^(-2i/d)
    / ff_i (ff_i: Llama-3 factors, or the linear factor); causal attention, query head j on
    KV head j // (H / HKV), scale 1/sqrt(head_dim); x += att W_o^T; h = RMSNorm(x) * ffn_norm;
    x += (silu(h W_gate^T) * h W_up^T) W_down^T; logits = RMSNorm(x) * norm W_out^T.
  - experts (qwen3_moe, qwen2_moe, mixtral): per expert (mlp.experts.E.{gate,up,down}_proj /
    block_sparse_moe.experts.E.{w1,w3,w2}, router mlp.gate / block_sparse_moe.gate), or fused as
    transformers 5 saves them (its MixtralExperts / Qwen2MoeExperts parameters): mlp.experts.
    gate_up_proj [n_expert, 2 ff, hidden] whose expert-e product chunk(2) gives gate then up,
    mlp.experts.down_proj [n_expert, hidden, ff], router mlp.gate.weight.
  - phi3: fused qkv_proj / attn_qkv rows (q, then k, then v) and gate_up_proj / ffn_up rows
    (gate, then up); partial_rotary_factor (rope_dim = int(head_dim * factor)); LongRoPE
    (transformers' _compute_longrope_parameters): theta_i / short_factor[i], or long_factor[i]
    for positions >= original_max_position_embeddings (per position, pllm's and vLLM's rule;
    transformers switches a whole sequence once it is longer), cos and sin times the attention
    factor (given, else sqrt(1 + ln(max_pos / orig) / ln(orig)) when that ratio is > 1). GGUF:
    rope_factors_short/long.weight, phi3.rope.scaling.attn_factor and .original_context_length.
  - Llama-3 factors from config.json's rope_scaling, as transformers'
    _compute_llama3_parameters defines them: wavelength 2 pi / freq_i; below
    original_max_position_embeddings / high_freq_factor: 1; above .../low_freq_factor: factor;
    between: 1 / ((1 - s) / factor + s), s = (orig / wavelength - low) / (high - low).

  - gemma3 (transformers' Gemma3ForCausalLM / Gemma3TextModel; GGUF gemma3 as llama.cpp's converter
    and llama-model.cpp define it): x = embed[ids] * sqrt(E) (the scale rounded to the embedding's
    dtype in HF; float32 in GGUF); every RMSNorm multiplies by (1 + w) (HF; GGUF stores 1 + w);
    h = RMSNorm(x) * in_norm; q/k head norms; RoPE base rope_local_base_freq on sliding layers,
    rope_theta on global ones; scores q.k * query_pre_attn_scalar^-0.5 (GGUF attention.scale, else
    1/sqrt(head_dim)); a sliding layer's query at p sees keys k with p - W < k <= p; x += RMSNorm(att
    W_o^T) * post_attention_norm; h = RMSNorm(x) * pre_feedforward_norm; x += RMSNorm((gelu_tanh(h
    W_gate^T) * h W_up^T) W_down^T) * post_feedforward_norm. Layer types from layer_types or
    sliding_window_pattern (HF; default 6) / sliding_window_pattern (GGUF: bools or a period; 6).

    m = Ref(path); logits = m.forward(ids)       # [len(ids)][n_vocab], float64
"""
import json
import math
import os
import struct

import numpy as np

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bf16"}


ST_DTYPE_OF = {}  # tensor name -> its safetensors dtype string, of the files read


def read_safetensors(path):
    """{name: float32/float16 array} of one safetensors file (BF16 widened to float32)."""
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack_from("<Q", buf, 0)[0]
    hdr = json.loads(buf[8:8 + n])
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = buf[8 + n + b: 8 + n + end]
        dt = ST_DTYPES[e["dtype"]]
        ST_DTYPE_OF[name] = e["dtype"]
        if dt == "bf16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<"))
        out[name] = a.reshape(e["shape"])
    return out


def llama3_factors(base, dim, factor, low, high, orig):
    ff = []
    for i in range(dim // 2):
        freq = base ** (-2.0 * i / dim)
        wl = 2 * math.pi / freq
        if wl < orig / high:
            ff.append(1.0)
        elif wl > orig / low:
            ff.append(factor)
        else:
            s = (orig / wl - low) / (high - low)
            ff.append(1.0 / ((1 - s) / factor + s))
    return np.array(ff)


class Ref:
    def __init__(self, path, dtype=np.float64):
        self.dtype = dtype
        if os.path.isdir(path):
            self._load_hf(path)
        else:
            self._load_gguf(path)

    # -- Hugging Face directory ---------------------------------------------------------------
    def _load_hf(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        self.arch = cfg["model_type"]
        # mixture of experts: Qwen3-MoE is qwen3 with experts (norm_topk_prob default false),
        # Mixtral is mistral with experts (always renormalized)
        self.moe_norm = {"qwen3_moe": cfg.get("norm_topk_prob", False), "qwen2_moe": cfg.get("norm_topk_prob", False),
                         "mixtral": True}.get(self.arch)
        self.moe_k = cfg.get("num_experts_per_tok", 2)
        self.moe_block = "block_sparse_moe." if self.arch == "mixtral" else "mlp."
        self.moe_names = ("w1", "w3", "w2") if self.arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        self.arch = {"qwen3_moe": "qwen3", "qwen2_moe": "qwen2", "mixtral": "mistral"}.get(self.arch, self.arch)
        pre = "model."
        if self.arch == "gemma3":
            cfg, pre = cfg["text_config"], None
        if self.arch in ("gemma3", "gemma3_text"):
            self.arch = "gemma3"
            cfg.setdefault("head_dim", 256)
            cfg.setdefault("rope_theta", 1e6)
            cfg.setdefault("tie_word_embeddings", True)
        E, H = cfg["hidden_size"], cfg["num_attention_heads"]
        self.n_layer = cfg["num_hidden_layers"]
        self.n_head = H
        self.n_head_kv = cfg.get("num_key_value_heads") or H
        self.head_dim = cfg.get("head_dim") or (128 if self.arch == "qwen3" else E // H)  # Qwen3Config: 128
        self.rope_dim = int(self.head_dim * cfg.get("partial_rotary_factor", 1.0))
        self.long_ff, self.long_from, self.mscale = None, None, 1.0
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.base = cfg.get("rope_theta", 10000.0)
        self.neox = True
        self.ff = np.ones(self.rope_dim // 2)
        rs = cfg.get("rope_scaling") or {}
        kind = rs.get("rope_type", rs.get("type", "default"))
        if kind == "linear":
            self.ff[:] = rs["factor"]
        elif kind == "llama3":
            # held in float32, as transformers (inv_freq) and llama.cpp (rope_freqs.weight) hold them
            self.ff = llama3_factors(self.base, self.rope_dim, rs["factor"], rs["low_freq_factor"],
                                     rs["high_freq_factor"], rs["original_max_position_embeddings"]).astype(np.float32).astype(np.float64)
        elif kind in ("longrope", "su") and self.arch == "phi3":
            orig = rs.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings", 4096)
            factor = rs.get("factor") or cfg["max_position_embeddings"] / orig
            af = rs.get("attention_factor")
            if af is None:
                af = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
            # transformers holds the factors in float32 (torch.tensor(..., dtype=float32))
            self.ff = np.array(rs["short_factor"], dtype=np.float32).astype(np.float64)
            self.long_ff = np.array(rs["long_factor"], dtype=np.float32).astype(np.float64)
            self.long_from, self.mscale = orig, float(np.float32(af))
        elif kind != "default":
            raise ValueError(f"rope scaling {kind} not handled by the reference")
        idx = os.path.join(d, "model.safetensors.index.json")
        t = {}
        if os.path.exists(idx):
            for shard in sorted(set(json.load(open(idx))["weight_map"].values())):
                t.update(read_safetensors(os.path.join(d, shard)))
        else:
            t = read_safetensors(os.path.join(d, "model.safetensors"))
        if pre is None:  # gemma3 multimodal: the text model's prefix
            pre = "model.language_model." if "model.language_model.embed_tokens.weight" in t else "language_model.model."
        gemma = self.arch == "gemma3"
        t = {(("model." + n[len(pre):]) if n.startswith(pre) else n): v for n, v in t.items()}
        ST_DTYPE_OF.update({"model." + n[len(pre):]: v for n, v in ST_DTYPE_OF.items() if n.startswith(pre)})

        def g(n):
            if gemma and n.endswith("norm.weight"):  # Gemma3RMSNorm: (1.0 + w.float()), in float32
                return np.asarray(np.asarray(t[n], np.float32) + np.float32(1), dtype=self.dtype)
            return np.asarray(t[n], dtype=self.dtype)
        self.embed = g("model.embed_tokens.weight")
        self.norm = g("model.norm.weight")
        self.gemma_setup(gemma, cfg)
        if gemma:
            E = cfg["hidden_size"]
            sc = np.float32(math.sqrt(E))  # transformers: the scale cast to the embedding's dtype
            edt = ST_DTYPE_OF.get("model.embed_tokens.weight")
            if edt == "BF16":
                b = int(np.array([sc], dtype=np.float32).view(np.uint32)[0])  # round to nearest even
                b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
                sc = np.array([b], dtype=np.uint32).view(np.float32)[0]
            elif edt == "F16":
                sc = np.float32(np.float16(sc))
            self.embd_scale = float(sc)
            # a Python float times a float32 tensor: applied in float32 by torch
            self.attn_scale = float(np.float32(float(cfg.get("query_pre_attn_scalar", 256)) ** -0.5))
            self.base_local = cfg.get("rope_local_base_freq", 10000.0)
            self.window = cfg.get("sliding_window", 4096)
            lt = cfg.get("layer_types")
            pat = cfg.get("sliding_window_pattern", 6)
            self.sliding = [x == "sliding_attention" for x in lt] if lt else [(i + 1) % pat != 0 for i in range(self.n_layer)]
        self.out = self.embed if cfg.get("tie_word_embeddings", False) else g("lm_head.weight")
        self.layers = []
        for i in range(self.n_layer):
            p = f"model.layers.{i}."
            if self.arch == "phi3":
                qd, kvd = H * self.head_dim, self.n_head_kv * self.head_dim
                qkv, gu = g(p + "self_attn.qkv_proj.weight"), g(p + "mlp.gate_up_proj.weight")
                F = gu.shape[0] // 2
                L = dict(wq=qkv[:qd], wk=qkv[qd:qd + kvd], wv=qkv[qd + kvd:], wg=gu[:F], wu=gu[F:])
            else:
                L = dict(wq=g(p + "self_attn.q_proj.weight"), wk=g(p + "self_attn.k_proj.weight"),
                         wv=g(p + "self_attn.v_proj.weight"))
                if p + "mlp.gate_proj.weight" in t:
                    L.update(wg=g(p + "mlp.gate_proj.weight"), wu=g(p + "mlp.up_proj.weight"))
            mb = p + self.moe_block
            fused = p + "mlp.experts.gate_up_proj" in t
            if fused:  # transformers 5: every expert in one tensor, the router as mlp.gate
                mb = p + "mlp."
            if mb + "gate.weight" in t:  # experts
                L = {k: v for k, v in L.items() if k not in ("wg", "wu")}
                ne = g(mb + "gate.weight").shape[0]
                L.update(router=g(mb + "gate.weight"))
                if fused:  # [n_expert, 2F, hidden]: linear(x, gate_up[e]).chunk(2) -> gate, up
                    gu, dn = g(mb + "experts.gate_up_proj"), g(mb + "experts.down_proj")
                    assert gu.shape[0] == dn.shape[0] == ne and gu.shape[1] == 2 * dn.shape[2], (gu.shape, dn.shape)
                    F = gu.shape[1] // 2
                    L.update(experts=[(gu[e, :F], gu[e, F:], dn[e]) for e in range(ne)])
                else:
                    L.update(experts=[tuple(g(mb + f"experts.{e}.{n}.weight") for n in self.moe_names) for e in range(ne)])
                if mb + "shared_expert_gate.weight" in t:  # Qwen2-MoE's shared expert
                    L.update(shexp=tuple(g(mb + f"shared_expert.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj")),
                             shexp_gate=g(mb + "shared_expert_gate.weight").reshape(-1))
                L.update(attn_norm=g(p + "input_layernorm.weight"), wo=g(p + "self_attn.o_proj.weight"),
                         ffn_norm=g(p + "post_attention_layernorm.weight"))
            else:
                L.update(attn_norm=g(p + "input_layernorm.weight"), wo=g(p + "self_attn.o_proj.weight"),
                         ffn_norm=g(p + "post_attention_layernorm.weight"), wd=g(p + "mlp.down_proj.weight"))
            if gemma:
                L.update(post_attn_norm=L["ffn_norm"], ffn_norm=g(p + "pre_feedforward_layernorm.weight"),
                         post_ffn_norm=g(p + "post_feedforward_layernorm.weight"))
            if self.arch == "qwen2":
                L.update(bq=g(p + "self_attn.q_proj.bias"), bk=g(p + "self_attn.k_proj.bias"), bv=g(p + "self_attn.v_proj.bias"))
            if self.arch in ("qwen3", "gemma3"):
                L.update(q_norm=g(p + "self_attn.q_norm.weight"), k_norm=g(p + "self_attn.k_norm.weight"))
            self.layers.append(L)
        self.n_vocab = self.embed.shape[0]

    # -- GGUF ------------------------------------------------------------------------------------
    def _load_gguf(self, path):
        import gguf
        from gguf.quants import dequantize
        r = gguf.GGUFReader(path)

        def field(key, default=None):
            f = r.fields.get(key)
            if f is None or not f.data:
                return default
            part = f.parts[f.data[0]]
            if f.types and f.types[0] == gguf.GGUFValueType.STRING:
                return bytes(part).decode("utf-8")
            return part[0].item()
        a = field("general.architecture")
        self.arch = a
        # experts: llama.cpp renormalizes the top-k weights unless expert_weights_norm is false
        self.moe_k = field(f"{a}.expert_used_count")
        self.moe_norm = bool(field(f"{a}.expert_weights_norm", a != "qwen2moe"))
        E = field(f"{a}.embedding_length")
        self.n_layer = field(f"{a}.block_count")
        self.n_head = H = field(f"{a}.attention.head_count")
        self.n_head_kv = field(f"{a}.attention.head_count_kv", H)
        self.head_dim = field(f"{a}.attention.key_length", E // H)
        self.rope_dim = field(f"{a}.rope.dimension_count", self.head_dim)
        self.eps = field(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
        self.base = field(f"{a}.rope.freq_base", 10000.0)
        self.neox = a in ("qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "gemma3")
        self.gemma_setup(a == "gemma3", {})
        if a == "gemma3":  # llama-model.cpp's gemma3 defaults where a key is absent
            self.embd_scale = float(np.float32(math.sqrt(E)))
            self.attn_scale = field(f"{a}.attention.scale", 1.0 / math.sqrt(self.head_dim))
            self.base_local = field(f"{a}.rope.freq_base_swa", 10000.0)
            self.window = field(f"{a}.attention.sliding_window")
            f = r.fields.get(f"{a}.attention.sliding_window_pattern")
            if f is not None and len(f.data) == self.n_layer and f.types[0] == gguf.GGUFValueType.ARRAY:
                self.sliding = [bool(f.parts[i][0]) for i in f.data]
            else:
                pat = field(f"{a}.attention.sliding_window_pattern", 6)
                self.sliding = [(i + 1) % pat != 0 for i in range(self.n_layer)]
        self.ff = np.ones(self.rope_dim // 2)
        self.long_ff, self.long_from, self.mscale = None, None, 1.0
        if field(f"{a}.rope.scaling.type", "none") == "linear":
            self.ff[:] = field(f"{a}.rope.scaling.factor")
        w = {}
        untied = any(t.name == "output.weight" for t in r.tensors)
        for t in r.tensors:
            if t.name == "token_embd.weight" and untied:
                # only the rows of the tokens used are dequantized (forward_many): a real
                # model's embedding is large (Qwen2.5-0.5B: 136M values, 6 s and 0.5 GB)
                self._embd_tensor = t
                continue
            x = np.asarray(dequantize(t.data, t.tensor_type), dtype=self.dtype)
            w[t.name] = x.reshape([int(n) for n in reversed(t.shape)]) if len(t.shape) > 1 else x.reshape(-1)
        if "rope_freqs.weight" in w:
            self.ff = w["rope_freqs.weight"].astype(np.float64)
        if "rope_factors_long.weight" in w:
            self.ff = w["rope_factors_short.weight"].astype(np.float64)
            self.long_ff = w["rope_factors_long.weight"].astype(np.float64)
            self.long_from = field(f"{a}.rope.scaling.original_context_length")
            self.mscale = field(f"{a}.rope.scaling.attn_factor", 1.0)
        self.embed = w.get("token_embd.weight")
        self.norm = w["output_norm.weight"]
        self.out = w.get("output.weight", self.embed)
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            if p + "attn_qkv.weight" in w:  # phi3: fused rows
                qd, kvd = H * self.head_dim, self.n_head_kv * self.head_dim
                qkv = w[p + "attn_qkv.weight"]
                L = dict(wq=qkv[:qd], wk=qkv[qd:qd + kvd], wv=qkv[qd + kvd:])
            else:
                L = dict(wq=w[p + "attn_q.weight"], wk=w[p + "attn_k.weight"], wv=w[p + "attn_v.weight"])
            if p + "ffn_gate_inp.weight" in w:  # experts: stacked [n_expert, rows, cols] or per expert
                ne = w[p + "ffn_gate_inp.weight"].shape[0]
                st = [w.get(p + f"ffn_{k}_exps.weight") for k in ("gate", "up", "down")]
                L.update(router=w[p + "ffn_gate_inp.weight"], experts=[
                    tuple(st[i][e] if st[i] is not None else w[p + f"ffn_{k}.{e}.weight"]
                          for i, k in enumerate(("gate", "up", "down"))) for e in range(ne)])
                if p + "ffn_gate_inp_shexp.weight" in w:
                    L.update(shexp=tuple(w[p + f"ffn_{k}_shexp.weight"] for k in ("gate", "up", "down")),
                             shexp_gate=w[p + "ffn_gate_inp_shexp.weight"])
            elif p + "ffn_gate.weight" in w:
                L.update(wg=w[p + "ffn_gate.weight"], wu=w[p + "ffn_up.weight"])
            else:  # phi3: ffn_up holds gate rows, then up rows
                gu = w[p + "ffn_up.weight"]
                L.update(wg=gu[:gu.shape[0] // 2], wu=gu[gu.shape[0] // 2:])
            L.update(attn_norm=w[p + "attn_norm.weight"], wo=w[p + "attn_output.weight"], ffn_norm=w[p + "ffn_norm.weight"])
            if "experts" not in L:
                L["wd"] = w[p + "ffn_down.weight"]
            if p + "attn_q.bias" in w:
                L.update(bq=w[p + "attn_q.bias"], bk=w[p + "attn_k.bias"], bv=w[p + "attn_v.bias"])
            if a in ("qwen3", "qwen3moe", "gemma3"):
                L.update(q_norm=w[p + "attn_q_norm.weight"], k_norm=w[p + "attn_k_norm.weight"])
            if a == "gemma3":
                L.update(post_attn_norm=w[p + "post_attention_norm.weight"], post_ffn_norm=w[p + "post_ffw_norm.weight"])
            self.layers.append(L)
        self.n_vocab = self.out.shape[0]

    def _embed(self, ids):
        """Rows ids of the token embedding [len(ids)][n_embd]."""
        if self.embed is not None:
            return self.embed[ids].copy()
        from gguf.quants import dequantize
        t = self._embd_tensor
        uniq, inv = np.unique(ids, return_inverse=True)
        rows = np.asarray(dequantize(t.data[uniq], t.tensor_type), dtype=self.dtype)
        return rows.reshape(len(uniq), -1)[inv]

    # -- forward -------------------------------------------------------------------------------
    def _rms(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def gemma_setup(self, gemma, cfg):
        """Defaults for the non-Gemma families (no scale, no window)."""
        self.embd_scale, self.attn_scale, self.window, self.sliding = None, None, None, None
        self.base_local = None
        self.no_window = False  # tests: disable the sliding window (to show it matters)

    def _rope(self, x, pos, local=False):
        """x: [n][heads][head_dim]; rotates the first rope_dim dims of each head."""
        rd, half = self.rope_dim, self.rope_dim // 2
        base = (self.base_local if local else self.base) ** (-2.0 * np.arange(half) / rd)
        theta = np.broadcast_to(base / (1.0 if local else self.ff), (len(pos), half))
        if self.long_ff is not None:  # LongRoPE: long factors from the original context on
            theta = np.where((pos >= self.long_from)[:, None], base / self.long_ff, theta)
        rot = (np.exp(1j * pos[:, None].astype(np.float64) * theta) * self.mscale)[:, None, :]
        y = x.copy()
        if self.neox:
            z = (x[..., :half] + 1j * x[..., half:rd]) * rot
            y[..., :half], y[..., half:rd] = z.real, z.imag
        else:
            z = (x[..., 0:rd:2] + 1j * x[..., 1:rd:2]) * rot
            y[..., 0:rd:2], y[..., 1:rd:2] = z.real, z.imag
        return y

    def _moe(self, h, L):
        """Mixture of experts (transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock): softmax
        over the router logits, the top k, renormalized when moe_norm, the weighted sum of the
        chosen experts' SwiGLU MLPs."""
        lg = h @ L["router"].T
        p = np.exp(lg - lg.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out = np.zeros_like(h)
        for i in range(h.shape[0]):
            sel = np.argsort(-p[i], kind="stable")[:self.moe_k]
            w = p[i, sel] / (p[i, sel].sum() if self.moe_norm else 1.0)
            for e, we in zip(sel, w):
                wg, wu, wd = L["experts"][e]
                gate, up = h[i] @ wg.T, h[i] @ wu.T
                out[i] += we * ((gate / (1.0 + np.exp(-gate)) * up) @ wd.T)
        if "shexp" in L:  # Qwen2MoeSparseMoeBlock: + sigmoid(shared_expert_gate(h)) * shared_expert(h)
            wg, wu, wd = L["shexp"]
            gate, up = h @ wg.T, h @ wu.T
            sg = 1.0 / (1.0 + np.exp(-(h @ L["shexp_gate"])))
            out = out + sg[:, None] * ((gate / (1.0 + np.exp(-gate)) * up) @ wd.T)
        return out

    def forward(self, ids):
        return self.forward_many([ids])[0]

    def forward_many(self, seqs, at=None):
        """Logits [len(s)][n_vocab] of every position of each independent sequence (or, with
        at = [positions of seq 0, positions of seq 1, ...], [len(at[i])][n_vocab] of those)."""
        H, HKV, hd = self.n_head, self.n_head_kv, self.head_dim
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs])
        seq_of = np.concatenate([np.full(len(s), i) for i, s in enumerate(seqs)])
        pos = np.concatenate([np.arange(len(s)) for s in seqs])
        n = len(ids)
        allowed = (seq_of[:, None] == seq_of[None, :]) & (pos[None, :] <= pos[:, None])
        x = self._embed(ids)
        if self.embd_scale is not None:
            x = x * self.embd_scale
        scale = self.attn_scale if self.attn_scale is not None else 1.0 / np.sqrt(hd)
        for li, L in enumerate(self.layers):
            local = bool(self.sliding and self.sliding[li])
            mask = allowed
            if local and not self.no_window:
                mask = allowed & (pos[None, :] > pos[:, None] - self.window)
            h = self._rms(x, L["attn_norm"])
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if "bq" in L:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q, k = q.reshape(n, H, hd), k.reshape(n, HKV, hd)
            if "q_norm" in L:
                q, k = self._rms(q, L["q_norm"]), self._rms(k, L["k_norm"])
            q = self._rope(q, pos, local)
            k = self._rope(k, pos, local)
            v = v.reshape(n, HKV, hd)
            att = np.empty((n, H, hd), dtype=x.dtype)
            for j in range(H):
                g = j // (H // HKV)
                s = (q[:, j, :] @ k[:, g, :].T) * scale
                s = np.where(mask, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, j, :] = s @ v[:, g, :]
            a = att.reshape(n, H * hd) @ L["wo"].T
            x = x + (self._rms(a, L["post_attn_norm"]) if "post_attn_norm" in L else a)
            h = self._rms(x, L["ffn_norm"])
            if "experts" in L:
                x = x + self._moe(h, L)
                continue
            gate, up = h @ L["wg"].T, h @ L["wu"].T
            if "post_ffn_norm" in L:  # GeGLU: PyTorch's gelu(approximate="tanh")
                act = 0.5 * gate * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate ** 3)))
                x = x + self._rms((act * up) @ L["wd"].T, L["post_ffn_norm"])
            else:
                x = x + (gate / (1.0 + np.exp(-gate)) * up) @ L["wd"].T
        h = self._rms(x, self.norm)
        hs = [h[seq_of == i] for i in range(len(seqs))]
        if at is not None:
            hs = [hi[np.asarray(a, dtype=np.int64)] for hi, a in zip(hs, at)]
        return [hi @ self.out.T for hi in hs]


if __name__ == "__main__":
    import sys
    m = Ref(sys.argv[1])
    ids = [int(t) for t in sys.argv[2:]] or [1, 2, 3]
    print("argmax per position:", m.forward(ids).argmax(axis=1).tolist())
