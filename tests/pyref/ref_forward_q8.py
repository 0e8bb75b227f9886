#!/usr/bin/env python3
"""The numpy reference forward (ref_forward.py) with the CPU backend's int8 activations.

pllm's integer matmul path (cpu/gemm.h) quantizes the input of every matmul whose weights are
quantized: per block of 32 values, q = rint(x * 127 / amax), scale amax / 127 (amax = max |x|
of the block; all zero when amax = 0), and multiplies the weights with q * scale. This model
does the same in float64 on the gguf-dequantized weights, so the only differences from pllm are
float32 rounding and the rare value that float32 puts on the other side of a rounding boundary.
Float weights (F32/F16/BF16) keep float inputs, as in pllm.

    m = RefModelQ8(path); logits = m.forward(token_ids)
"""
import gguf
import numpy as np

from ref_forward import RefModel

QUANTIZED = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}


def quantize_rows(h):
    """Per-32 int8 round trip of the rows of h: [n][K] -> [n][K] (q * scale)."""
    n, k = h.shape
    b = h.reshape(n, k // 32, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    inv = np.divide(127.0, amax, out=np.zeros_like(amax), where=amax > 0)
    return (np.rint(b * inv) * (amax / 127.0)).reshape(n, k)


class _QT:
    """W.T whose left product h @ W.T quantizes h first."""

    __array_ufunc__ = None  # numpy defers h @ this to __rmatmul__

    def __init__(self, w):
        self.w = w

    def __rmatmul__(self, h):
        return quantize_rows(np.atleast_2d(h)).reshape(h.shape) @ self.w.T


class _QW:
    def __init__(self, w):
        self.w = w
        self.T = _QT(w)
        self.shape = w.shape

    def __getitem__(self, idx):  # the embedding lookup reads rows unchanged
        return self.w[idx]


class RefModelQ8(RefModel):
    def __init__(self, path, dtype=np.float64):
        super().__init__(path, dtype)
        r = gguf.GGUFReader(path)
        types = {t.name: t.tensor_type.name for t in r.tensors}
        for name, w in list(self.w.items()):
            if w.ndim == 2 and types[name] in QUANTIZED and name != "token_embd.weight":
                self.w[name] = _QW(w)
        emb = "token_embd.weight"
        out = "output.weight" if "output.weight" in types else emb
        self.out_w = _QW(self.out_w) if types[out] in QUANTIZED else self.out_w
