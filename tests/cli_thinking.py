#!/usr/bin/env python3
"""cli_thinking: Qwen3's thinking switch from the command line (label unit: a random-weight
model, seconds).

A random-weight Qwen3 Hugging Face directory (tests/gen_hf_models.py spec qwen3, F32: q/k head
norms) gets a byte-level BPE tokenizer.json of its ids (the `tokenizers` package) and a
tokenizer_config.json whose chat_template has the shape of Qwen3's (tests/chat_parity.py
EXTRA["thinking-switch"]: an empty <think></think> block on the generation prompt when
enable_thinking is false). Checks:
  1. `pllm tokenize --thinking auto|on|off` on message records gives the token ids of the
     `tokenizers` package on the text jinja2 renders with enable_thinking undefined / True /
     False (as transformers' apply_chat_template(..., enable_thinking=...) passes it); off
     differs from auto, and auto equals on (the template tests only `is false`).
  2. `pllm generate --thinking off --echo` runs the model (greedy) and echoes the prompt ending
     in the empty think block; without the flag the prompt ends at the assistant header.
  3. a bad --thinking value is a usage error (exit 2) naming the accepted values.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chat_parity as CP  # noqa: E402
import gen_hf_models as G  # noqa: E402
from cli_util import Test, records  # noqa: E402

t = Test("cli_thinking")
SPEC = "qwen3"
V = G.SPECS[SPEC]["V"]
TEMPLATE = CP.EXTRA["thinking-switch"]


def write_tokenizer(d):
    """A byte-level BPE of exactly V ids: 256 bytes, letter-pair merges, 3 specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    b2u = G.bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = []
    letters = "etaoinsrhldu"
    for a in letters:
        for b in letters:
            if len(vocab) + len(specials) >= V:
                break
            merges.append((a, b))
            vocab[a + b] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(specials)
    assert tk.get_vocab_size() == V, tk.get_vocab_size()
    tk.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False,
                   "chat_template": TEMPLATE}, f)
    return tk


d = t.path("model")
G.write_hf(d, SPEC, G.make_weights(SPEC, seed=11), "F32")
tk = write_tokenizer(d)
CONVS = [
    [{"role": "user", "content": "what is the capital of france"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"}, {"role": "user", "content": "and 3+3?"}],
]
inp = t.write("messages.jsonl", [{"id": i, "messages": c} for i, c in enumerate(CONVS)])

# ---------------------------------------------------------------- 1. tokenize vs jinja2 + tokenizers
texts = {}
for mode, et in (("auto", None), ("on", True), ("off", False)):
    rc, out, err = t.run(["tokenize", inp, "--model", d, "--thinking", mode, "--no-total", "--quiet"])
    t.check(rc == 0, f"tokenize --thinking {mode}: exit {rc} {err[-300:]}")
    got = {r["id"]: r["token_ids"] for r in records(out)} if rc == 0 else {}
    for i, conv in enumerate(CONVS):
        kind, text = CP.py_render(TEMPLATE, conv, True, None, "<|im_end|>", et)
        t.check(kind == "ok", f"jinja2 renders conversation {i} ({mode}): {kind} {text[:200]}")
        want = tk.encode(text, add_special_tokens=False).ids
        texts[(mode, i)] = text
        t.check(got.get(i) == want, f"--thinking {mode}, conversation {i}: pllm {got.get(i)} vs tokenizers {want} "
                                    f"(text {text!r})")
for i in range(len(CONVS)):
    t.check(texts[("off", i)].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            f"off closes an empty think block: {texts[('off', i)][-60:]!r}")
    t.check(texts[("auto", i)] == texts[("on", i)] and texts[("auto", i)].endswith("<|im_start|>assistant\n"),
            f"auto and on leave the block to the model: {texts[('auto', i)][-60:]!r}")
print(f"tokenize: auto/on/off match jinja2 + tokenizers on {len(CONVS)} conversations")

# ---------------------------------------------------------------- 2. generate through the model
BASE = ["--model", d, "--threads", "2", "--echo", "--token-ids", "--order", "input", "--num-blocks", "64",
        "--max-tokens", "6", "--temperature", "0", "--ignore-eos"]
for mode in ("off", None):
    rc, out, err = t.run(["generate", inp, *BASE] + (["--thinking", mode] if mode else []))
    recs = {r["id"]: r for r in records(out)} if rc == 0 else {}
    t.check(rc == 0 and len(recs) == len(CONVS), f"generate --thinking {mode}: exit {rc} {err[-400:]}")
    for i in recs:
        want = texts[("off" if mode else "auto", i)]
        t.check(recs[i].get("prompt") == want, f"generate --thinking {mode}: echoed prompt {recs[i].get('prompt')!r}, "
                                                f"want {want!r}")
        t.check(len(recs[i].get("token_ids", [])) == 6, f"generate --thinking {mode}: 6 tokens: {recs[i]}")
print("generate: the echoed prompts carry the switch; the qwen3 model generates")

# ---------------------------------------------------------------- 3. a bad value
rc, out, err = t.run(["tokenize", inp, "--model", d, "--thinking", "maybe"])
t.check(rc == 2 and "--thinking 'maybe'" in err and "auto, on, off" in err, f"bad --thinking: {rc} {err[-300:]}")
rc, out, err = t.run(["generate", inp, *BASE, "--thinking", "yes"])
t.check(rc == 2 and "--thinking 'yes'" in err, f"generate bad --thinking: {rc} {err[-300:]}")
t.finish()
