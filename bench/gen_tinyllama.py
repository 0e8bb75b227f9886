#!/usr/bin/env python3
"""A random-weight TinyLlama-1.1B-shaped GGUF for CPU benchmarks (memory-bound decode).

    gen_tinyllama.py OUT.gguf [--dtype Q4_0|Q8_0] [--seed N]

Shape (TinyLlama-1.1B-Chat v1.0): llama, n_embd 2048, n_ff 5632, 22 layers, 32 heads, 4 KV heads
(head_dim 64), vocab 32000, untied output, rope base 10000, eps 1e-5, context 2048. Written by
the test models' generator (tests/gen_models.py write_model: matrices random normal with std
1/sqrt(fan_in), embeddings std 1, quantized with the PyPI gguf package; norms F32 near 1). No
tokenizer: the benchmarks feed token ids. Written to OUT.gguf.tmp then renamed, so an
interrupted run never leaves a truncated model. Deterministic per seed. Takes a minute or two
and a few GB of memory.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import gen_models  # noqa: E402

SHAPE = dict(name="tinyllama-1.1b-random", arch="llama", n_vocab=32000, n_embd=2048, n_layer=22, n_head=32,
             n_head_kv=4, n_ff=5632, n_ctx=2048, tied=False, rope_theta=10000.0, eps=1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="Q4_0", choices=["Q4_0", "Q8_0"])
    ap.add_argument("--seed", type=int, default=1100)
    args = ap.parse_args()
    tmp = args.out + ".tmp"
    gen_models.write_model(tmp, SHAPE, args.dtype, args.seed)
    os.replace(tmp, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
