#!/usr/bin/env python3
"""The default real model as a Hugging Face directory (label "model"): the same weights must
give the same logits whether pllm reads the GGUF file or an HF directory.

$PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup.sh fetches it) is converted
here, at test time, the way a Hugging Face checkpoint holds it: every tensor dequantized by the
gguf package to float32 (exact: Q4_1 values are representable), Q and K rows un-permuted
(inverse of llama.cpp's convert_hf_to_gguf permutation: adjacent pairs back to halves), HF
tensor names, config.json from the GGUF metadata, two safetensors shards with an index. pllm
then reads that directory (NEOX rotation on unpermuted rows) and the GGUF (adjacent pairs on
permuted rows).

Checks, on 8 ShareGPT first turns (tokenized by tests/pyref/hf_tok.py, at most 40 tokens), every
prompt position plus 8 greedy tokens each, through tests/cpu_logits_tool.c:
  - rows of logits from the two formats agree: relative error < 1e-5 (identical weights and
    float32 math; only the order of head dims in q.k differs, so float32 rounding: ~1e-7);
  - greedy tokens identical;
  - the descriptions agree on every hyperparameter; rope mode norm (GGUF) vs neox (HF).
End to end: the directory also gets the files a Hugging Face checkpoint has beside the weights:
tokenizer.json (the `tokenizers` reference of tests/pyref/hf_tok.py, saved), tokenizer_config.json
(the GGUF's chat template, BOS/EOS tokens, add_bos_token) and generation_config.json (bos/eos);
`pllm generate` ($PLLM_BIN) on 8 ShareGPT first turns as chat messages, greedy, 24 tokens, must
give the same prompt token counts and the same text from the GGUF and from the directory.
The converted directory (540 MB) is deleted afterwards.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "pyref"))
import gen_hf_models as G  # noqa: E402
import hf_tok  # noqa: E402

TOL = 1e-5
N_PROMPTS, MAX_TOKENS, N_GEN = 8, 40, 8
GEN_TOKENS = 24  # pllm generate's --max-tokens
STEP_TOKENS = 96  # cpu_logits_tool's token budget per step (prompts are chunked across steps)
# Under the ASan+UBSan build (PLLM_SANITIZE, scripts/ci-extra.sh; pllm is several times slower
# there, and the sanitizers, not the numerics, are what that run checks): 3 prompts of at most
# 24 tokens + 4 greedy tokens through cpu_logits_tool (a step budget of 32 tokens, so prompts
# are still chunked across steps and mixed with decodes), and 3 chats x 8 tokens through pllm
# generate; the same conversion, files and checks.
if os.environ.get("PLLM_SANITIZE"):
    N_PROMPTS, MAX_TOKENS, N_GEN, GEN_TOKENS, STEP_TOKENS = 3, 24, 4, 8, 32


def unpermute(w, n_head):
    """Inverse of llama.cpp's Q/K permutation: per head, row 2i+j back to row j*d/2 + i."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(gguf_path, outdir):
    import gguf
    from gguf.quants import dequantize
    r = gguf.GGUFReader(gguf_path)

    def field(key, default=None):
        f = r.fields.get(key)
        if f is None or not f.data:
            return default
        return f.parts[f.data[0]][0].item()
    a = "llama"
    H, HKV = field(f"{a}.attention.head_count"), field(f"{a}.attention.head_count_kv")
    w = {}
    for t in r.tensors:
        x = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w[t.name] = x.reshape([int(n) for n in reversed(t.shape)]) if len(t.shape) > 1 else x.reshape(-1)
    assert "output.weight" not in w  # SmolLM2 ties its output to the embeddings
    n_layer = field(f"{a}.block_count")
    hf = {"model.embed_tokens.weight": w["token_embd.weight"], "model.norm.weight": w["output_norm.weight"]}
    for l in range(n_layer):
        g, h = f"blk.{l}.", f"model.layers.{l}."
        hf[h + "input_layernorm.weight"] = w[g + "attn_norm.weight"]
        hf[h + "self_attn.q_proj.weight"] = unpermute(w[g + "attn_q.weight"], H)
        hf[h + "self_attn.k_proj.weight"] = unpermute(w[g + "attn_k.weight"], HKV)
        hf[h + "self_attn.v_proj.weight"] = w[g + "attn_v.weight"]
        hf[h + "self_attn.o_proj.weight"] = w[g + "attn_output.weight"]
        hf[h + "post_attention_layernorm.weight"] = w[g + "ffn_norm.weight"]
        hf[h + "mlp.gate_proj.weight"] = w[g + "ffn_gate.weight"]
        hf[h + "mlp.up_proj.weight"] = w[g + "ffn_up.weight"]
        hf[h + "mlp.down_proj.weight"] = w[g + "ffn_down.weight"]
    os.makedirs(outdir, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": field(f"{a}.embedding_length"),
           "intermediate_size": field(f"{a}.feed_forward_length"), "num_hidden_layers": n_layer, "num_attention_heads": H,
           "num_key_value_heads": HKV, "vocab_size": int(w["token_embd.weight"].shape[0]),
           "rms_norm_eps": field(f"{a}.attention.layer_norm_rms_epsilon"), "rope_theta": field(f"{a}.rope.freq_base"),
           "max_position_embeddings": field(f"{a}.context_length"), "tie_word_embeddings": True, "hidden_act": "silu",
           "torch_dtype": "float32", "bos_token_id": field("tokenizer.ggml.bos_token_id"),
           "eos_token_id": field("tokenizer.ggml.eos_token_id")}
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(hf)
    half = len(names) // 2
    wmap = {}
    for i, part in enumerate([names[:half], names[half:]]):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        G.write_safetensors(os.path.join(outdir, fn), [(n, "F32", hf[n].shape, G.encode(hf[n], "F32")) for n in part], {"format": "pt"})
        wmap.update({n: fn for n in part})
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.nbytes for v in hf.values())}, "weight_map": wmap}, f)


def add_tokenizer_files(gguf_path, outdir):
    """tokenizer.json, tokenizer_config.json and generation_config.json as a checkpoint has them."""
    import gguf
    ref = hf_tok.load(gguf_path)
    ref.tokenizer.save(os.path.join(outdir, "tokenizer.json"))
    r = gguf.GGUFReader(gguf_path)
    f = r.fields["tokenizer.chat_template"]
    toks, bos, eos = ref.meta["tokens"], ref.meta["bos_token_id"], ref.meta["eos_token_id"]
    cfg = {"add_bos_token": bool(ref.meta.get("add_bos_token")), "add_eos_token": False, "bos_token": toks[bos],
           "eos_token": toks[eos], "chat_template": bytes(f.parts[f.data[0]]).decode(), "model_max_length": 8192,
           "tokenizer_class": "GPT2Tokenizer", "clean_up_tokenization_spaces": False}
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    with open(os.path.join(outdir, "generation_config.json"), "w") as fh:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, fh)


def generate(tmp, name, model, records):
    inp, out = os.path.join(tmp, "chat.jsonl"), os.path.join(tmp, name + ".out.jsonl")
    with open(inp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    p = subprocess.run([os.environ["PLLM_BIN"], "generate", "-q", "-t", "2", "--max-tokens", str(GEN_TOKENS), "--order", "input", "-m", model,
                        "-o", out, inp], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"pllm generate -m {model}: exit {p.returncode}: {p.stderr[-2000:]}")
    return [json.loads(line) for line in open(out)]


def run(build, tmp, name, model, prompts):
    spec = dict(model=model, threads=2, block_size=16, max_step_tokens=STEP_TOKENS, max_step_seqs=4, shuffle_seed=3,
                out=os.path.join(tmp, name + ".npy"),
                seqs=[dict(tokens=p, logits_at=list(range(len(p))), generate=N_GEN) for p in prompts])
    sp = os.path.join(tmp, name + ".json")
    with open(sp, "w") as f:
        json.dump(spec, f)
    p = subprocess.run([os.path.join(build, "tests", "cpu_logits_tool"), sp], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"cpu_logits_tool on {model}: {p.stderr}")
    return json.loads(p.stdout), np.load(spec["out"])


def main():
    home = os.environ.get("PLLM_HOME") or os.path.expanduser("~/.cache/pllm")
    path = os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        print(f"FAIL: the default model is missing: {path}\n(run scripts/setup.sh, or set PLLM_HOME)")
        return 1
    build = os.environ.get("PLLM_BUILD")
    if not build:
        sys.exit("PLLM_BUILD is not set (run through ctest)")
    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "model_hf_real")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    hfdir = os.path.join(tmp, "SmolLM2-135M-Instruct-hf")
    convert(path, hfdir)
    failures = []

    tool = os.path.join(build, "tests", "model_tool")
    da = json.loads(subprocess.run([tool, "load", path], capture_output=True, text=True, check=True).stdout.splitlines()[0])
    db = json.loads(subprocess.run([tool, "load", hfdir], capture_output=True, text=True, check=True).stdout.splitlines()[0])
    keys = ["arch", "n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "n_ctx_train", "norm_eps",
            "tied_embeddings", "qkv_bias"]
    diff = {k: (da[k], db[k]) for k in keys if da[k] != db[k]}
    if da["rope"]["mode"] != "norm" or db["rope"]["mode"] != "neox" or da["rope"]["theta"] != db["rope"]["theta"]:
        diff["rope"] = (da["rope"], db["rope"])
    print(f"descriptions: GGUF {da['matrix_dtypes']} rope {da['rope']['mode']}; HF {db['matrix_dtypes']} rope {db['rope']['mode']}, "
          f"{len(db['files'])} shards; {'same hyperparameters' if not diff else 'DIFFER ' + str(diff)}")
    if diff:
        failures.append(f"descriptions differ: {diff}")

    data = os.path.join(os.environ.get("PLLM_SHARED_DATA", os.path.join(HERE, "..", "..", "shared", "data")),
                        "sharegpt", "ShareGPT_V3_filtered_1000.json")
    tok = hf_tok.load(path)
    prompts, chats = [], []
    for c in json.load(open(data)):
        turns = [t["value"] for t in c["conversations"] if t["from"] == "human"]
        if turns:
            ids = tok.encode(turns[0], add_special=False, parse_special=False)[:MAX_TOKENS]
            if len(ids) >= 2:
                prompts.append(ids)
                chats.append({"id": f"c{len(chats)}", "messages": [{"role": "user", "content": turns[0][:1000]}]})
        if len(prompts) == N_PROMPTS:
            break
    ia, ra = run(build, tmp, "gguf", path, prompts)
    ib, rb = run(build, tmp, "hf", hfdir, prompts)

    add_tokenizer_files(path, hfdir)
    ga, gb = generate(tmp, "gguf", path, chats), generate(tmp, "hf", hfdir, chats)
    shutil.rmtree(hfdir)
    same = sum(a["text"] == b["text"] and a["prompt_tokens"] == b["prompt_tokens"] for a, b in zip(ga, gb))
    print(f"pllm generate (chat template, tokenizer, model; greedy {GEN_TOKENS} tokens): GGUF vs HF directory identical "
          f"{same}/{len(ga)}; e.g. {gb[0]['text']!r}")
    if same != len(ga) or len(ga) != len(chats):
        failures.append(f"pllm generate: {same}/{len(ga)} outputs identical between the GGUF and the HF directory")
    same_tokens = [s["generated"] for s in ia["seqs"]] == [s["generated"] for s in ib["seqs"]]
    errs = [float(np.linalg.norm(ra[i].astype(np.float64) - rb[i]) / np.linalg.norm(ra[i].astype(np.float64)))
            for i in range(ra.shape[0])]
    mx = max(errs)
    print(f"{len(errs)} rows ({len(prompts)} prompts, every position + {N_GEN} greedy tokens): GGUF vs HF rel err max {mx:.2e} "
          f"mean {np.mean(errs):.2e} (tol {TOL:.0e}); greedy tokens {'identical' if same_tokens else 'DIFFER'}")
    print("greedy:", [tok.decode(s["generated"]) for s in ib["seqs"]][:3])
    if mx >= TOL:
        failures.append(f"rel err {mx:.2e} >= {TOL:.0e}")
    if not same_tokens:
        failures.append("greedy tokens differ")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    print("model_hf_real: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
