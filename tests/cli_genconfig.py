#!/usr/bin/env python3
"""cli_genconfig: a model's generation defaults in `pllm generate` (label unit: a random-weight
model, seconds).

A random-weight Hugging Face directory (tests/gen_hf_models.py, spec llama-gqa, F32) gets a
byte-level BPE tokenizer.json of its 320 ids written here with the `tokenizers` package, and a
generation_config.json written per case. The precedence under test, per field:
    a record's field > the command-line option > generation_config.json > built-in default
and every eos_token_id of generation_config.json ends generation.

1. The reference: greedy output with --generation-config none --ignore-eos (the built-in
   defaults: temperature 0), 24 tokens per prompt.
2. EOS list: generation_config.json {"eos_token_id": [X, Y], "temperature": 1.5} where Y is a
   token the greedy output reaches and X one it never produces (neither is a tokenizer stop
   id). With --temperature 0 (the option overrides the file's temperature) every prompt whose
   greedy output holds Y stops right after its first Y: finish_reason "stop", token ids = the
   greedy prefix up to and including Y. Without --temperature the file's 1.5 applies: the
   output differs from greedy (sampled), and stderr says so.
3. Per-field overlay: {"temperature": 1.5, "top_k": 1} is greedy again (top_k 1 from the file);
   --top-k 0 on the command line restores sampling; a record's own "top_k": 0 does too, and a
   record's "temperature": 0 beats the file.
4. max_new_tokens: {"max_new_tokens": 5} gives 5 tokens; --max-tokens 7 overrides it.
5. --generation-config none drops the file's sampling (greedy) but not its EOS ids; a bad mode
   is a usage error; --help shows the option and the precedence.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_hf_models as G  # noqa: E402
from cli_util import Test, records  # noqa: E402

t = Test("cli_genconfig")
SPEC = "llama-gqa"
V = G.SPECS[SPEC]["V"]
N_GEN = 24
PROMPTS = ["hello world", "the quick brown fox", "abc abc abc", "tests of eos", "zebra", "0123 4567"]


def write_tokenizer(d):
    """A byte-level BPE of exactly V ids: 256 bytes, merges of common letter pairs, 3 specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    b2u = G.bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = []
    letters = "etaoinsrhl"
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
        json.dump({"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False}, f)
    return [V - 3, V - 1]  # the tokenizer's own stop ids: <|endoftext|>, <|im_end|>


def set_gen(d, gen):
    p = os.path.join(d, "generation_config.json")
    if gen is None:
        if os.path.exists(p):
            os.remove(p)
        return
    with open(p, "w") as f:
        json.dump(gen, f)


d = t.path("model")
G.write_hf(d, SPEC, G.make_weights(SPEC, seed=7), "F32")
tok_stops = write_tokenizer(d)
inp = t.write("prompts.jsonl", [{"id": i, "prompt": p} for i, p in enumerate(PROMPTS)])
BASE = ["--model", d, "--threads", "2", "--token-ids", "--order", "input", "--num-blocks", "256"]


def gen(args, path=inp):
    rc, out, err = t.run(["generate", path, *BASE, *args])
    recs = records(out) if rc in (0, 1) else []
    return rc, {r["id"]: r for r in recs}, err


# ---------------------------------------------------------------- 1. greedy reference
set_gen(d, {"bos_token_id": 1, "eos_token_id": [2, 5], "temperature": 1.5})  # as the spec's, then replaced
rc, ref, err = gen(["--generation-config", "none", "--ignore-eos", "--max-tokens", str(N_GEN)])
t.check(rc == 0 and len(ref) == len(PROMPTS), f"greedy reference runs: {rc} {err[-400:]}")
t.check("sampling defaults from" not in err, f"--generation-config none applies nothing: {err[-300:]}")
greedy = {i: ref[i]["token_ids"] for i in ref}
t.check(all(len(g) == N_GEN for g in greedy.values()), "the reference has 24 tokens per prompt")
rc, ref2, _ = gen(["--generation-config", "none", "--ignore-eos", "--max-tokens", str(N_GEN)])
t.check({i: r["token_ids"] for i, r in ref2.items()} == greedy, "greedy output repeats")

# Y: a token that appears (not first) in the greedy output of most prompts; X: one never produced
produced = set(x for g in greedy.values() for x in g)
counts = {}
for g in greedy.values():
    for x in set(g[1:]):
        if x not in tok_stops:
            counts[x] = counts.get(x, 0) + 1
Y = max(counts, key=lambda x: (counts[x], -x)) if counts else None
X = next(x for x in range(3, V) if x not in produced and x not in tok_stops)
t.check(Y is not None, f"a token for the EOS list: greedy outputs {greedy}")
print(f"EOS list [{X}, {Y}]: Y in {counts.get(Y)} of {len(PROMPTS)} greedy outputs")


def want_stop(g):
    """The greedy output cut after its first Y (min_tokens 0: a stop id counts from the first token)."""
    k = g.index(Y) if Y in g else None
    return (g[:k + 1], "stop") if k is not None else (g, "length")


# ---------------------------------------------------------------- 2. the EOS list; --temperature 0 overrides
set_gen(d, {"bos_token_id": 1, "eos_token_id": [X, Y], "temperature": 1.5})
rc, out, err = gen(["--temperature", "0", "--max-tokens", str(N_GEN)])
t.check(rc == 0, f"--temperature 0 with the file: {rc} {err[-400:]}")
n_stopped = 0
for i, g in greedy.items():
    ids, fin = want_stop(g)
    r = out.get(i, {})
    ok = r.get("token_ids") == ids and r.get("finish_reason") == fin
    n_stopped += fin == "stop" and ok
    t.check(ok, f"prompt {i}: greedy output stops at the second EOS id {Y}: want {ids} {fin}, got "
                f"{r.get('token_ids')} {r.get('finish_reason')}")
t.check(n_stopped >= 1, f"at least one prompt stopped at the second EOS id: {n_stopped}")
t.check("sampling defaults from" not in err, f"the option's temperature is not reported as the model's: {err[-300:]}")

rc, out, err = gen(["--ignore-eos", "--max-tokens", str(N_GEN)])
t.check(rc == 0 and "sampling defaults from the model's generation_config.json: temperature 1.5" in err,
        f"the file's temperature applies and is said: {rc} {err[-400:]}")
differ = sum(out.get(i, {}).get("token_ids") != g for i, g in greedy.items())
t.check(differ >= len(PROMPTS) // 2, f"temperature 1.5 samples: {differ} of {len(PROMPTS)} outputs differ from greedy")
rc, out2, _ = gen(["--ignore-eos", "--max-tokens", str(N_GEN)])
t.check({i: r["token_ids"] for i, r in out2.items()} == {i: r["token_ids"] for i, r in out.items()},
        "sampling with the run seed repeats")

# ---------------------------------------------------------------- 3. per-field overlay
set_gen(d, {"eos_token_id": X, "temperature": 1.5, "top_k": 1})
rc, out, err = gen(["--ignore-eos", "--max-tokens", str(N_GEN)])
t.check(rc == 0 and {i: r["token_ids"] for i, r in out.items()} == greedy and "top_k 1" in err,
        f"top_k 1 from the file makes temperature 1.5 greedy: {rc} {err[-300:]}")
rc, out, err = gen(["--ignore-eos", "--max-tokens", str(N_GEN), "--top-k", "0"])
differ = sum(out.get(i, {}).get("token_ids") != g for i, g in greedy.items())
t.check(rc == 0 and differ >= len(PROMPTS) // 2 and "temperature 1.5" in err and "top_k 1" not in err,
        f"--top-k 0 beats the file's top_k 1 (the file's temperature stays): {differ} differ; {err[-300:]}")
recf = t.write("rec.jsonl", [{"id": i, "prompt": p, "top_k": 0} for i, p in enumerate(PROMPTS)] +
               [{"id": 100 + i, "prompt": p, "temperature": 0} for i, p in enumerate(PROMPTS)])
rc, out, err = gen(["--ignore-eos", "--max-tokens", str(N_GEN), "--top-k", "1"], recf)
differ = sum(out.get(i, {}).get("token_ids") != g for i, g in greedy.items())
t.check(rc == 0 and differ >= len(PROMPTS) // 2, f"a record's top_k 0 beats --top-k 1: {differ} differ")
t.check(all(out.get(100 + i, {}).get("token_ids") == g for i, g in greedy.items()),
        "a record's temperature 0 beats the file's 1.5: greedy")

# ---------------------------------------------------------------- 4. max_new_tokens
set_gen(d, {"eos_token_id": X, "max_new_tokens": 5})
rc, out, err = gen(["--ignore-eos"])
t.check(rc == 0 and all(r["completion_tokens"] == 5 for r in out.values()) and "max_tokens 5" in err,
        f"max_new_tokens 5 from the file: {[r.get('completion_tokens') for r in out.values()]} {err[-300:]}")
rc, out, err = gen(["--ignore-eos", "--max-tokens", "7"])
t.check(rc == 0 and all(r["completion_tokens"] == 7 for r in out.values()), "--max-tokens 7 beats max_new_tokens 5")

# ---------------------------------------------------------------- 5. none keeps the EOS ids; usage
set_gen(d, {"eos_token_id": [X, Y], "temperature": 1.5})
rc, out, err = gen(["--generation-config", "none", "--max-tokens", str(N_GEN)])
t.check(rc == 0 and all(out.get(i, {}).get("token_ids") == want_stop(g)[0] for i, g in greedy.items()),
        "--generation-config none: greedy (built-in temperature 0), and the file's EOS ids still stop")
rc, _, err = t.run(["generate", inp, *BASE, "--generation-config", "vllm"])
t.check(rc == 2 and "--generation-config" in err, f"a bad mode is a usage error: {rc} {err[-200:]}")
rc, out, _ = t.run(["generate", "--help"])
t.check(rc == 0 and "--generation-config" in out and "Precedence" in out and "the model's, else 0 (greedy)" in out,
        "generate --help shows the option, the precedence and the defaults")
rc, out, _ = t.run(["info", d, "--json"])
t.check(rc == 0 and str(Y) in out, f"pllm info shows the EOS ids: {out[-400:]}")

shutil.rmtree(d, ignore_errors=True)
t.finish()
