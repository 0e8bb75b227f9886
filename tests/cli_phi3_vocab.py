#!/usr/bin/env python3
"""cli_phi3_vocab: a Phi-3 model whose vocabulary is padded past its tokenizer (label unit: a
random-weight model, seconds).

Phi-3 checkpoints have 32064 embedding/output rows and a tokenizer of 32011 tokens; the rows
past the tokenizer are padding that must never be generated. Here: the random-weight phi3 spec
of tests/gen_hf_models.py (fused qkv_proj / gate_up_proj, partial rotary, LongRoPE; 352 rows) as
an F32 Hugging Face directory, with a byte-level BPE tokenizer of 320 tokens, and lm_head rows
320..351 scaled up so that a padding id is the argmax of every position (checked on the numpy
reference: the test fails if the padding is not excluded). `pllm generate` greedy (temperature
0) must then produce exactly the reference's argmax over ids < 320 at every step (teacher
forced on pllm's own tokens, 8 tokens for each of 3 prompts, prompts past the original context
of 16 so the long factors are used too), and sampled runs (temperature 1.5) only ids < 320.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "pyref"))
import gen_hf_models as G  # noqa: E402
from cli_util import Test, records  # noqa: E402
from ref_forward_hf import Ref  # noqa: E402

t = Test("cli_phi3_vocab")
SPEC = "phi3"
V = G.SPECS[SPEC]["V"]
N_TOK = 320
N_GEN = 8


def write_tokenizer(d):
    """A byte-level BPE of N_TOK ids (< V: the model's vocabulary is padded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    b2u = G.bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    specials = ["<|endoftext|>", "<|user|>", "<|end|>"]
    merges = []
    letters = "etaoinsrhl"
    for a in letters:
        for b in letters:
            if len(vocab) + len(specials) >= N_TOK:
                break
            merges.append((a, b))
            vocab[a + b] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(specials)
    assert tk.get_vocab_size() == N_TOK, tk.get_vocab_size()
    tk.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False}, f)
    return tk


d = t.path("model")
w = G.make_weights(SPEC, seed=13)
w["lm_head.weight"][N_TOK:] *= 40.0  # the padding rows win every argmax unless excluded
G.write_hf(d, SPEC, w, "F32")
os.remove(os.path.join(d, "generation_config.json"))  # no sampling defaults, no EOS ids
tk = write_tokenizer(d)
PROMPTS = ["the rain in spain stays mainly in the plain, said the hero to the listener", "abc", "hello there"]
inp = t.write("prompts.jsonl", [{"id": i, "prompt": p} for i, p in enumerate(PROMPTS)])
BASE = ["--model", d, "--threads", "2", "--token-ids", "--order", "input", "--num-blocks", "64",
        "--max-tokens", str(N_GEN), "--ignore-eos", "--cpu-math", "f32", "--kv-cache-dtype", "fp32"]

rc, out, err = t.run(["generate", inp, *BASE, "--temperature", "0"])
recs = {r["id"]: r for r in records(out)} if rc == 0 else {}
t.check(rc == 0 and len(recs) == len(PROMPTS), f"greedy generate: exit {rc} {err[-400:]}")
ref = Ref(d)
n_pad_wins = 0
for i, p in enumerate(PROMPTS):
    ids = tk.encode(p, add_special_tokens=False).ids
    gen = recs.get(i, {}).get("token_ids", [])
    t.check(len(gen) == N_GEN, f"prompt {i}: {N_GEN} tokens: {gen}")
    if len(gen) != N_GEN:
        continue
    logits = ref.forward(ids + gen[:-1])[len(ids) - 1:]
    want = [int(np.argmax(row[:N_TOK])) for row in logits]
    n_pad_wins += sum(int(np.argmax(row)) >= N_TOK for row in logits)
    t.check(gen == want, f"prompt {i} ({len(ids)} tokens): pllm {gen}, reference argmax below {N_TOK} {want}")
t.check(n_pad_wins == N_GEN * len(PROMPTS), f"the padding is the full-row argmax at {n_pad_wins} of "
                                            f"{N_GEN * len(PROMPTS)} steps (the test needs all)")
t.check(len(tk.encode(PROMPTS[0], add_special_tokens=False).ids) > 16, "the first prompt passes the original context")
print(f"greedy: {len(PROMPTS)} prompts x {N_GEN} tokens equal the reference's argmax over the tokenizer's {N_TOK} ids "
      f"(the padding is the full argmax at all {n_pad_wins} steps)")

rc, out, err = t.run(["generate", inp, *BASE, "--temperature", "1.5", "--seed", "5"])
recs = records(out) if rc == 0 else []
ids = [x for r in recs for x in r.get("token_ids", [])]
t.check(rc == 0 and len(ids) == N_GEN * len(PROMPTS) and max(ids) < N_TOK,
        f"sampled ids all below {N_TOK}: exit {rc} {sorted(set(ids))[-5:]} {err[-300:]}")
print(f"sampled: {len(ids)} tokens, max id {max(ids) if ids else None}")
t.finish()
