#!/usr/bin/env python3
"""An independent numpy forward pass of GGUF llama/qwen2 models, for checking pllm's backends.

Written from the model's math and the GGUF conventions, not from pllm's C code:
  - weights read and dequantized by the PyPI `gguf` package (gguf.quants.dequantize), then
    held as float64 (or float32 when asked);
  - x = token_embd[ids]; per layer: h = RMSNorm(x) * attn_norm; q, k, v = h W^T (+ bias for
    qwen2); RoPE on q and k; causal attention with grouped KV heads (query head j uses KV head
    j // (n_head / n_head_kv)), scores scaled by 1/sqrt(head_dim); x += attn W_o^T;
    h = RMSNorm(x) * ffn_norm; x += (silu(h W_gate^T) * (h W_up^T)) W_down^T;
    logits = (RMSNorm(x) * output_norm) W_out^T (W_out = token_embd when output.weight is absent);
  - RMSNorm(x) = x / sqrt(mean(x^2) + eps);
  - RoPE: the first rope_dim dims of each head are split into pairs, each pair viewed as the
    complex number a + ib and multiplied by e^(i * p * theta_i), theta_i = base^(-2i/rope_dim)
    (divided by the factor under linear scaling, or by rope_freqs.weight[i] when the file has
    that tensor: llama.cpp's Llama-3 rope scaling). llama GGUF files pair adjacent dims (a, b) =
    (x[2i], x[2i+1]) ("normal" mode: llama.cpp's converter permutes HF's Q/K rows into that
    order); qwen2 pairs the halves (x[i], x[i + rope_dim/2]) ("neox" mode).

    m = RefModel(path); logits = m.forward(token_ids)   # [n_tokens][n_vocab], every position
"""
import numpy as np
import gguf
from gguf.quants import dequantize


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None or not f.data:
        return default
    part = f.parts[f.data[0]]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8")
    return part[0].item()


class RefModel:
    def __init__(self, path, dtype=np.float64):
        r = gguf.GGUFReader(path)
        self.dtype = dtype
        arch = _field(r, "general.architecture")
        if arch not in ("llama", "mistral", "qwen2"):
            raise ValueError(f"{path}: architecture {arch} not handled by the reference")
        self.arch = arch
        a = arch

        def hp(key, default=None):
            return _field(r, f"{a}.{key}", default)

        self.n_embd = hp("embedding_length")
        self.n_layer = hp("block_count")
        self.n_head = hp("attention.head_count")
        self.n_head_kv = hp("attention.head_count_kv", self.n_head)
        self.n_ff = hp("feed_forward_length")
        self.head_dim = hp("attention.key_length", self.n_embd // self.n_head)
        self.rope_dim = hp("rope.dimension_count", self.head_dim)
        self.eps = hp("attention.layer_norm_rms_epsilon", 1e-5)
        self.rope_base = hp("rope.freq_base", 10000.0)
        scaling = hp("rope.scaling.type", "none")
        self.rope_factor = hp("rope.scaling.factor", 1.0) if scaling == "linear" else 1.0
        if scaling not in ("none", "linear"):
            raise ValueError(f"rope scaling {scaling} not handled by the reference")
        self.neox = arch == "qwen2"

        self.w = {}
        for t in r.tensors:
            x = dequantize(t.data, t.tensor_type)
            # gguf gives [ne1][ne0] (rows, cols) for matrices and [ne0] for vectors
            self.w[t.name] = np.asarray(x, dtype=dtype).reshape([int(n) for n in reversed(t.shape)]) \
                if len(t.shape) > 1 else np.asarray(x, dtype=dtype).reshape(-1)
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        self.out_w = self.w.get("output.weight", self.w["token_embd.weight"])

    def _rms(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def _rope(self, x, pos):
        """x: [n][heads][head_dim]; pos: [n]. Rotates the first rope_dim dims of each head."""
        rd = self.rope_dim
        half = rd // 2
        theta = self.rope_base ** (-2.0 * np.arange(half) / rd) / self.rope_factor
        if "rope_freqs.weight" in self.w:
            theta = theta / self.w["rope_freqs.weight"].astype(np.float64)
        ang = pos[:, None].astype(np.float64) * theta[None, :]            # [n][half]
        rot = np.exp(1j * ang)[:, None, :]                                # [n][1][half]
        y = x.copy()
        if self.neox:
            z = (x[..., :half] + 1j * x[..., half:rd]) * rot
            y[..., :half], y[..., half:rd] = z.real, z.imag
        else:
            z = (x[..., 0:rd:2] + 1j * x[..., 1:rd:2]) * rot
            y[..., 0:rd:2], y[..., 1:rd:2] = z.real, z.imag
        return y

    def forward(self, ids):
        """Logits [len(ids)][n_vocab] for every position 0 .. len(ids) - 1 of one sequence."""
        return self.forward_many([ids])[0]

    def forward_many(self, seqs):
        """forward() of several independent sequences at once (one set of big matmuls; each
        sequence attends only to its own earlier positions). Returns a list of logits arrays."""
        H, HKV, hd = self.n_head, self.n_head_kv, self.head_dim
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs])
        seq_of = np.concatenate([np.full(len(s), i) for i, s in enumerate(seqs)])
        pos = np.concatenate([np.arange(len(s)) for s in seqs])
        n = len(ids)
        # token i may attend to token j: same sequence and j at or before i
        allowed = (seq_of[:, None] == seq_of[None, :]) & (pos[None, :] <= pos[:, None])
        x = self.w["token_embd.weight"][ids].copy()
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self._rms(x, self.w[p + "attn_norm.weight"])
            q = h @ self.w[p + "attn_q.weight"].T
            k = h @ self.w[p + "attn_k.weight"].T
            v = h @ self.w[p + "attn_v.weight"].T
            if p + "attn_q.bias" in self.w:
                q = q + self.w[p + "attn_q.bias"]
                k = k + self.w[p + "attn_k.bias"]
                v = v + self.w[p + "attn_v.bias"]
            q = self._rope(q.reshape(n, H, hd), pos)
            k = self._rope(k.reshape(n, HKV, hd), pos)
            v = v.reshape(n, HKV, hd)
            att = np.empty((n, H, hd), dtype=x.dtype)
            for j in range(H):
                g = j // (H // HKV)
                s = (q[:, j, :] @ k[:, g, :].T) / np.sqrt(hd)
                s = np.where(allowed, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, j, :] = s @ v[:, g, :]
            x = x + att.reshape(n, H * hd) @ self.w[p + "attn_output.weight"].T
            h = self._rms(x, self.w[p + "ffn_norm.weight"])
            gate = h @ self.w[p + "ffn_gate.weight"].T
            up = h @ self.w[p + "ffn_up.weight"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ self.w[p + "ffn_down.weight"].T
        h = self._rms(x, self.w["output_norm.weight"])
        return [h[seq_of == i] @ self.out_w.T for i in range(len(seqs))]


if __name__ == "__main__":
    import sys
    m = RefModel(sys.argv[1])
    ids = [int(t) for t in sys.argv[2:]] or [1, 2, 3]
    lg = m.forward(ids)
    print("argmax per position:", lg.argmax(axis=1).tolist())
