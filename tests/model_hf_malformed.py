#!/usr/bin/env python3
"""The Hugging Face directory loader (and the GGUF loader's rope/architecture checks): valid
directories load with the right description, and every malformed or inconsistent file gets an
error naming the file and the field or tensor (and, for safetensors, a byte offset).

    model_hf_malformed.py            (run by ctest with model_tool; label unit)

Each case copies a valid tiny directory (tests/gen_hf_models.py specs tiny-llama / tiny-qwen2),
breaks one thing, runs `model_tool load DIR` and checks the error's status and the substrings
it must contain. The cases and the count are printed.
"""
import copy
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "pyref"))
import gen_hf_models as G  # noqa: E402

TOOL = None
RESULTS = []


def load(path):
    p = subprocess.run([TOOL, "load", path], capture_output=True, text=True)
    return p.returncode, p.stdout.strip()


def check(name, path, status, *needles):
    rc, out = load(path)
    ok = rc == 1 and out.startswith(f"ERROR {status}:") and all(n in out for n in needles)
    RESULTS.append((name, ok, out))
    print(f"{'ok  ' if ok else 'FAIL'} {name}\n       {out[:400]}")
    if not ok:
        print(f"       expected status '{status}' and {needles}")


def fresh(base, name):
    d = os.path.join(WORK, name.replace(" ", "_").replace("/", "_"))
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    return d


def edit_json(path, fn):
    with open(path) as f:
        j = json.load(f)
    fn(j)  # edits in place (its return value is ignored)
    with open(path, "w") as f:
        json.dump(j, f)


def read_st(path):
    """(header dict, data bytes) of a safetensors file."""
    buf = open(path, "rb").read()
    n = struct.unpack_from("<Q", buf)[0]
    return json.loads(buf[8:8 + n]), buf[8 + n:]


def write_st_raw(path, header, data, pad=8):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    h += b" " * ((-len(h)) % pad)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def mutate_st(d, fn, fname="model.safetensors"):
    p = os.path.join(d, fname)
    hdr, data = read_st(p)
    r = fn(hdr, data)  # edits hdr in place, or returns a new (header, data) tuple
    if isinstance(r, tuple):
        hdr, data = r
    write_st_raw(p, hdr, data)
    return d


def main():
    global TOOL, WORK
    build = os.environ.get("PLLM_BUILD")
    if not build:
        sys.exit("PLLM_BUILD is not set (run through ctest)")
    TOOL = os.path.join(build, "tests", "model_tool")
    WORK = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "model_hf_malformed")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    wl = G.make_weights("tiny-llama", seed=1)
    wq = G.make_weights("tiny-qwen2", seed=2)
    base = G.write_hf(os.path.join(WORK, "base-llama"), "tiny-llama", wl, "F32")
    baseq = G.write_hf(os.path.join(WORK, "base-qwen2"), "tiny-qwen2", wq, "BF16")
    based = G.write_hf(os.path.join(WORK, "base-sharded"), "tiny-llama", wl, "F16", shards=3)
    failures = []

    # -- valid directories: the description matches config.json and generation_config.json --
    for d, spec in [(base, "tiny-llama"), (baseq, "tiny-qwen2"), (based, "tiny-llama")]:
        rc, out = load(d)
        if rc != 0:
            failures.append(f"valid {d}: {out}")
            continue
        desc, samp = [json.loads(x) for x in out.splitlines()]
        s = G.SPECS[spec]
        want = dict(format="hf", arch="llama" if s["arch"] != "qwen2" else "qwen2", n_vocab=s["V"], n_embd=s["E"], n_layer=s["L"],
                    n_head=s["H"], n_head_kv=s["HKV"], head_dim=s["E"] // s["H"], n_ff=s["F"], tied_embeddings=s["tied"],
                    qkv_bias=bool(s.get("bias")))
        bad = {k: (desc[k], v) for k, v in want.items() if desc[k] != v}
        if desc["rope"]["mode"] != "neox" or abs(desc["norm_eps"] - s["eps"]) > 1e-12 or desc["rope"]["theta"] != s["theta"]:
            bad["rope/eps"] = (desc["rope"], desc["norm_eps"])
        gen = s.get("gen") or {}
        g = desc["generation_defaults"]
        want_eos = gen.get("eos_token_id", s.get("eos"))
        want_eos = [want_eos] if isinstance(want_eos, int) else want_eos
        if g.get("eos_token_id") != want_eos:
            bad["eos"] = (g.get("eos_token_id"), want_eos)
        for k in ("temperature", "top_k", "min_p"):
            if k in gen and (abs(g.get(k, -1) - gen[k]) > 1e-6 or abs(samp[k] - gen[k]) > 1e-6):
                bad[k] = (g.get(k), samp[k], gen[k])
        if samp["n_set"] != sum(k in gen for k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")):
            bad["n_set"] = samp["n_set"]
        n_files = len(desc["files"])
        print(f"{'ok  ' if not bad else 'FAIL'} valid {os.path.basename(d)}: {desc['arch']} {desc['matrix_dtypes']} "
              f"{n_files} file(s), eos {g.get('eos_token_id')}, sampling {samp}")
        if bad:
            failures.append(f"valid {d}: {bad}")

    cfgp = lambda d: os.path.join(d, "config.json")  # noqa: E731
    genp = lambda d: os.path.join(d, "generation_config.json")  # noqa: E731

    # -- valid variants: each loads, and the description shows the rule applied --
    def variant(name, base_dir, edit, expect):
        d = fresh(base_dir, "variant " + name)
        edit(d)
        rc, out = load(d)
        got = json.loads(out.splitlines()[0]) if rc == 0 else None
        ok = got is not None and all(fn(got) for fn in expect.values())
        RESULTS.append((f"valid variant: {name}", ok, out[:300]))
        print(f"{'ok  ' if ok else 'FAIL'} valid variant: {name}" + ("" if ok else f"\n       {out[:600]}"))
    variant("mistral sliding_window 256 caps the context", base,
            lambda d: edit_json(cfgp(d), lambda j: j.update(model_type="mistral", sliding_window=256)),
            {"ctx": lambda g: g["n_ctx_train"] == 256, "arch": lambda g: g["source_arch"] == "mistral"})
    variant("mistral sliding_window null", base,
            lambda d: edit_json(cfgp(d), lambda j: j.update(model_type="mistral", sliding_window=None)),
            {"ctx": lambda g: g["n_ctx_train"] == 512})
    variant("qwen2 use_sliding_window false ignores sliding_window", baseq,
            lambda d: edit_json(cfgp(d), lambda j: j.update(sliding_window=128, use_sliding_window=False)),
            {"ctx": lambda g: g["n_ctx_train"] == 512})
    variant("qwen2 use_sliding_window true", baseq,
            lambda d: edit_json(cfgp(d), lambda j: j.update(sliding_window=128, use_sliding_window=True)),
            {"ctx": lambda g: g["n_ctx_train"] == 128})
    variant("head_dim null (hidden_size / heads)", base,
            lambda d: edit_json(cfgp(d), lambda j: j.update(head_dim=None)),
            {"hd": lambda g: g["head_dim"] == 8})
    variant("rope_parameters (transformers 5) with llama3", base,
            lambda d: edit_json(cfgp(d), lambda j: (j.pop("rope_theta"), j.update(rope_parameters={
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}))),
            {"theta": lambda g: g["rope"]["theta"] == 500000.0, "scaling": lambda g: g["rope"]["scaling"] == "llama3",
             "ff": lambda g: len(g["rope"]["freq_factors"]) == 4 and g["rope"]["freq_factors"][0] == 1.0})
    variant("rope_scaling type default", base,
            lambda d: edit_json(cfgp(d), lambda j: j.update(rope_scaling={"rope_type": "default"})),
            {"scaling": lambda g: g["rope"]["scaling"] == "none"})
    variant("no generation_config.json: config.json's eos list", base,
            lambda d: (os.remove(genp(d)), edit_json(cfgp(d), lambda j: j.update(eos_token_id=[2, 9], bos_token_id=1))),
            {"eos": lambda g: g["generation_defaults"] == {"eos_token_id": [2, 9], "bos_token_id": 1}})
    variant("quantization_config null", base,
            lambda d: edit_json(cfgp(d), lambda j: j.update(quantization_config=None)),
            {"arch": lambda g: g["arch"] == "llama"})
    variant("tied with an lm_head.weight present (transformers ties it)", base,
            lambda d: edit_json(cfgp(d), lambda j: j.update(tie_word_embeddings=True)),
            {"tied": lambda g: g["tied_embeddings"] is True})

    # -- config.json --
    d = fresh(base, "config bad json")
    open(cfgp(d), "w").write('{"model_type": "llama", "hidden_size": 32,')
    check("config.json: truncated JSON", d, "format error", "config.json", "invalid JSON", "line 1")
    d = fresh(base, "config dup key")
    open(cfgp(d), "w").write(open(cfgp(base)).read().replace('"model_type": "llama"', '"model_type": "llama", "model_type": "qwen2"'))
    check("config.json: duplicate key", d, "format error", "config.json", "duplicate", "model_type")
    d = fresh(base, "config array")
    open(cfgp(d), "w").write("[1, 2]")
    check("config.json: not an object", d, "format error", "config.json", "object")
    d = fresh(base, "config missing")
    os.remove(cfgp(d))
    check("config.json: missing", d, "not found", "config.json", "not a Hugging Face model directory")
    d = fresh(base, "config no model_type")
    edit_json(cfgp(d), lambda j: j.pop("model_type"))
    check("config.json: no model_type", d, "format error", "config.json", "missing field 'model_type'")
    d = fresh(base, "config gpt2")
    edit_json(cfgp(d), lambda j: j.update(model_type="gpt2"))
    check("config.json: unsupported architecture", d, "unsupported", "config.json", "'gpt2'", "supported: llama, mistral, mixtral, qwen2")
    d = fresh(base, "config hidden string")
    edit_json(cfgp(d), lambda j: j.update(hidden_size="32"))
    check("config.json: hidden_size a string", d, "format error", "config.json", "'hidden_size' must be an integer, not a string")
    d = fresh(base, "config hidden real")
    edit_json(cfgp(d), lambda j: j.update(hidden_size=32.0))
    check("config.json: hidden_size a real", d, "format error", "config.json", "'hidden_size' must be an integer, not a real number")
    d = fresh(base, "config no layers")
    edit_json(cfgp(d), lambda j: j.pop("num_hidden_layers"))
    check("config.json: no num_hidden_layers", d, "format error", "config.json", "missing field 'num_hidden_layers'")
    d = fresh(base, "config null vocab")
    edit_json(cfgp(d), lambda j: j.update(vocab_size=None))
    check("config.json: vocab_size null", d, "format error", "config.json", "missing field 'vocab_size'")
    d = fresh(base, "config negative hidden")
    edit_json(cfgp(d), lambda j: j.update(hidden_size=-32))
    check("config.json: hidden_size negative", d, "format error", "config.json", "'hidden_size' = -32 is out of range")
    d = fresh(base, "config kv heads")
    edit_json(cfgp(d), lambda j: j.update(num_key_value_heads=3))
    check("config.json: num_key_value_heads does not divide", d, "format error", "config.json", "num_key_value_heads", "3")
    d = fresh(base, "config kv heads big")
    edit_json(cfgp(d), lambda j: j.update(num_key_value_heads=8))
    check("config.json: num_key_value_heads > heads", d, "format error", "config.json", "'num_key_value_heads' = 8 is out of range")
    d = fresh(base, "config heads")
    edit_json(cfgp(d), lambda j: j.update(num_attention_heads=5, num_key_value_heads=5))
    check("config.json: heads do not divide hidden_size", d, "format error", "config.json", "num_attention_heads", "hidden_size")
    d = fresh(base, "config odd head_dim")
    edit_json(cfgp(d), lambda j: j.update(head_dim=7))
    check("config.json: odd head_dim", d, "format error", "config.json", "head_dim", "even")
    d = fresh(base, "config eps")
    edit_json(cfgp(d), lambda j: j.update(rms_norm_eps=0))
    check("config.json: rms_norm_eps 0", d, "format error", "config.json", "'rms_norm_eps' = 0 is out of range")
    d = fresh(base, "config theta")
    edit_json(cfgp(d), lambda j: j.update(rope_theta="big"))
    check("config.json: rope_theta a string", d, "format error", "config.json", "'rope_theta' must be a number")
    d = fresh(base, "config tie")
    edit_json(cfgp(d), lambda j: j.update(tie_word_embeddings="yes"))
    check("config.json: tie_word_embeddings a string", d, "format error", "config.json", "'tie_word_embeddings' must be a boolean")
    d = fresh(base, "config act")
    edit_json(cfgp(d), lambda j: j.update(hidden_act="gelu"))
    check("config.json: hidden_act gelu", d, "unsupported", "config.json", "hidden_act", "gelu")
    d = fresh(base, "config quant")
    edit_json(cfgp(d), lambda j: j.update(quantization_config={"quant_method": "awq"}))
    check("config.json: quantization_config", d, "unsupported", "config.json", "quantization_config")
    d = fresh(base, "config attn bias")
    edit_json(cfgp(d), lambda j: j.update(attention_bias=True))
    check("config.json: llama attention_bias", d, "unsupported", "config.json", "attention_bias")
    # Qwen3: no biases (attention_bias true is refused), q_norm/k_norm required, head_dim 128
    # when config.json omits it (Qwen3Config's default), so these 48-wide heads no longer fit
    w3 = G.make_weights("qwen3", seed=3)
    base3 = G.write_hf(os.path.join(WORK, "base-qwen3"), "qwen3", w3, "F32")
    rc, out = load(base3)
    ok = rc == 0 and json.loads(out.splitlines()[0])["qk_norm"] is True
    RESULTS.append(("qwen3: a valid directory loads with qk_norm", ok, out[:300]))
    print(f"{'ok  ' if ok else 'FAIL'} qwen3: a valid directory loads with qk_norm")
    d = fresh(base3, "qwen3 attn bias")
    edit_json(cfgp(d), lambda j: j.update(attention_bias=True))
    check("config.json: qwen3 attention_bias", d, "unsupported", "config.json", "attention_bias", "qwen3")
    d = fresh(base3, "qwen3 no head_dim")
    edit_json(cfgp(d), lambda j: j.pop("head_dim"))
    check("config.json: qwen3 without head_dim (128)", d, "format error", "self_attn.q_proj.weight", "[512, 128]")
    d = fresh(base3, "qwen3 no k_norm")
    mutate_st(d, lambda h, data: (h.pop("model.layers.1.self_attn.k_norm.weight"), (h, data))[1])
    check("qwen3: missing k_norm", d, "not found", "model.layers.1.self_attn.k_norm.weight")
    # Gemma 3: loads (text model, and the multimodal layout with text_config under either
    # transformers prefix, described the same); soft-capping, another activation, a layer_types
    # list of the wrong length and a missing post-norm are refused, naming what
    w5 = G.make_weights("gemma3", seed=5)
    base5 = G.write_hf(os.path.join(WORK, "base-gemma3"), "gemma3", w5, "F32")
    rc, out = load(base5)
    d5 = json.loads(out.splitlines()[0]) if rc == 0 else {}
    ok = rc == 0 and d5.get("layer_types") == ["sliding", "global", "sliding"] and d5.get("sliding_window") == 8
    RESULTS.append(("gemma3: a valid directory loads with its layer types", ok, out[:300]))
    print(f"{'ok  ' if ok else 'FAIL'} gemma3: a valid directory loads with its layer types")
    for pre in ("model.language_model.", "language_model.model."):
        wm = {(pre + n[len("model."):]) if n.startswith("model.") else n: v for n, v in w5.items()}
        dm = G.write_hf(os.path.join(WORK, "gemma3-mm-" + pre.split(".")[0]), "gemma3", wm, "F32")
        edit_json(cfgp(dm), lambda j: (j.update(text_config=dict(j)), j.update(model_type="gemma3")))
        rc, out = load(dm)
        dd = json.loads(out.splitlines()[0]) if rc == 0 else {}
        keys = ("n_layer", "n_embd", "layer_types", "sliding_window", "attn_scale", "embd_scale", "rope", "weight_bytes")
        ok = rc == 0 and all(dd.get(k) == d5.get(k) for k in keys) and dd.get("source_arch") == "gemma3"
        RESULTS.append((f"gemma3 multimodal ({pre}*): loads as the text model", ok, out[:300]))
        print(f"{'ok  ' if ok else 'FAIL'} gemma3 multimodal ({pre}*): loads as the text model")
    d = fresh(base5, "gemma3 softcap")
    edit_json(cfgp(d), lambda j: j.update(final_logit_softcapping=30.0))
    check("config.json: gemma3 final_logit_softcapping", d, "unsupported", "config.json", "final_logit_softcapping")
    d = fresh(base5, "gemma3 act")
    edit_json(cfgp(d), lambda j: j.update(hidden_activation="gelu"))
    check("config.json: gemma3 hidden_activation gelu", d, "unsupported", "hidden_activation", "gelu_pytorch_tanh")
    d = fresh(base5, "gemma3 layer types")
    edit_json(cfgp(d), lambda j: j.update(layer_types=["sliding_attention"]))
    check("config.json: gemma3 layer_types of 1 for 3 layers", d, "format error", "layer_types", "3 layer types")
    d = fresh(base5, "gemma3 no post norm")
    mutate_st(d, lambda h, data: (h.pop("model.layers.2.post_feedforward_layernorm.weight"), (h, data))[1])
    check("gemma3: missing post_feedforward_layernorm", d, "not found", "model.layers.2.post_feedforward_layernorm.weight")
    # Phi-3: fused tensors required, LongRoPE factor lists of rotary dims / 2, partial rotary even
    w4 = G.make_weights("phi3", seed=4)
    base4 = G.write_hf(os.path.join(WORK, "base-phi3"), "phi3", w4, "F32")
    rc, out = load(base4)
    ok = rc == 0 and json.loads(out.splitlines()[0])["rope"]["scaling"] == "longrope"
    RESULTS.append(("phi3: a valid directory loads with LongRoPE", ok, out[:300]))
    print(f"{'ok  ' if ok else 'FAIL'} phi3: a valid directory loads with LongRoPE")
    def variant4(name, edit, expect):
        d = fresh(base4, "variant " + name)
        edit_json(cfgp(d), edit)
        rc, out = load(d)
        got = json.loads(out.splitlines()[0]) if rc == 0 else None
        ok = got is not None and all(fn(got) for fn in expect.values())
        RESULTS.append((f"valid variant: {name}", ok, out[:300]))
        print(f"{'ok  ' if ok else 'FAIL'} valid variant: {name}" + ("" if ok else f"\n       {out[:600]}"))
    # Phi-3-mini-4k: no rope scaling, sliding_window 2047 caps the context; "su" is LongRoPE's old
    # name; an explicit attention_factor wins over the computed one
    variant4("phi3 without rope_scaling, sliding_window 300",
             lambda j: j.update(rope_scaling=None, sliding_window=300, partial_rotary_factor=1.0),
             {"rope": lambda g: g["rope"]["scaling"] == "none" and g["rope"]["dim"] == 32, "ctx": lambda g: g["n_ctx_train"] == 300})
    variant4("phi3 in transformers 5's rope_parameters (partial_rotary_factor inside)",
             lambda j: j.update(rope_parameters=dict(j.pop("rope_scaling"), rope_type="longrope", rope_theta=10000.0,
                                                     partial_rotary_factor=j.pop("partial_rotary_factor"))),
             {"rope": lambda g: g["rope"]["scaling"] == "longrope" and g["rope"]["dim"] == 24})
    variant4("phi3 rope_scaling type su", lambda j: j["rope_scaling"].update(type="su"),
             {"rope": lambda g: g["rope"]["scaling"] == "longrope" and abs(g["rope"]["attn_factor"] - 1.5) < 1e-6})
    variant4("phi3 attention_factor given", lambda j: j["rope_scaling"].update(attention_factor=1.25),
             {"rope": lambda g: g["rope"]["attn_factor"] == 1.25 and g["rope"]["original_max_position_embeddings"] == 16})
    d = fresh(base4, "phi3 short factors")
    edit_json(cfgp(d), lambda j: j["rope_scaling"].update(short_factor=[1.0] * 16))
    check("config.json: phi3 short_factor of the wrong length", d, "format error", "config.json",
          "rope_scaling.short_factor", "list of 12 numbers")
    d = fresh(base4, "phi3 long factor zero")
    edit_json(cfgp(d), lambda j: j["rope_scaling"]["long_factor"].__setitem__(3, 0))
    check("config.json: phi3 long_factor with a zero", d, "format error", "rope_scaling.long_factor[3]", "positive")
    d = fresh(base4, "phi3 odd rotary")
    edit_json(cfgp(d), lambda j: j.update(partial_rotary_factor=0.55))
    check("config.json: phi3 partial_rotary_factor giving odd dims", d, "format error", "partial_rotary_factor",
          "17 rotary dims")
    d = fresh(base4, "phi3 no fused qkv")
    mutate_st(d, lambda h, data: (h.pop("model.layers.0.self_attn.qkv_proj.weight"), (h, data))[1])
    check("phi3: missing qkv_proj", d, "not found", "model.layers.0.self_attn.qkv_proj.weight")
    d = fresh(base, "llama longrope")
    edit_json(cfgp(d), lambda j: j.update(rope_scaling={"type": "longrope", "short_factor": [1.0] * 4,
                                                          "long_factor": [1.0] * 4}))
    check("config.json: longrope outside phi3", d, "unsupported", "rope_type", "longrope", "phi3")
    d = fresh(base, "config partial rotary")
    edit_json(cfgp(d), lambda j: j.update(partial_rotary_factor=0.5))
    check("config.json: partial_rotary_factor", d, "unsupported", "config.json", "partial_rotary_factor")
    d = fresh(base, "config yarn")
    edit_json(cfgp(d), lambda j: j.update(rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    check("config.json: rope_scaling yarn", d, "unsupported", "config.json", "rope_scaling.rope_type", "yarn", "linear, llama3")
    d = fresh(base, "config llama3 missing")
    edit_json(cfgp(d), lambda j: j.update(rope_scaling={"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 8192}))
    check("config.json: llama3 without low_freq_factor", d, "format error", "config.json", "missing field 'rope_scaling.low_freq_factor'")
    d = fresh(base, "config llama3 order")
    edit_json(cfgp(d), lambda j: j.update(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                                         "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}))
    check("config.json: llama3 high <= low", d, "format error", "config.json", "rope_scaling.high_freq_factor")
    d = fresh(base, "config linear factor")
    edit_json(cfgp(d), lambda j: j.update(rope_scaling={"type": "linear", "factor": "2"}))
    check("config.json: linear factor a string", d, "format error", "config.json", "'rope_scaling.factor' must be a number")
    d = fresh(base, "config rope_scaling list")
    edit_json(cfgp(d), lambda j: j.update(rope_scaling=[1]))
    check("config.json: rope_scaling an array", d, "format error", "config.json", "'rope_scaling' must be an object")
    d = fresh(base, "config eos bad")
    os.remove(genp(d))
    edit_json(cfgp(d), lambda j: j.update(eos_token_id=[2, "x"]))
    check("config.json: eos_token_id list with a string", d, "format error", "config.json", "eos_token_id[1]")
    d = fresh(base, "config huge")
    edit_json(cfgp(d), lambda j: j.update(hidden_size=65536, num_hidden_layers=1024, num_attention_heads=1024,
                                          num_key_value_heads=1024))
    check("config.json: dimensions far beyond the files (no allocation)", d, "format error", "norm/bias elements",
          "weight files hold only")
    d = fresh(base, "config vocab mismatch")
    edit_json(cfgp(d), lambda j: j.update(vocab_size=65))
    check("config.json vocab_size vs the embeddings", d, "format error", "model.safetensors", "model.embed_tokens.weight",
          "[64, 32]", "[65, 32]", "byte offset")
    d = fresh(base, "config ff mismatch")
    edit_json(cfgp(d), lambda j: j.update(intermediate_size=96))
    check("config.json intermediate_size vs gate_proj", d, "format error", "model.safetensors", "model.layers.0.mlp.gate_proj.weight",
          "[96, 32]", "byte offset")

    # -- generation_config.json --
    d = fresh(base, "gen bad json")
    open(genp(d), "w").write('{"eos_token_id": [2,}')
    check("generation_config.json: bad JSON", d, "format error", "generation_config.json", "invalid JSON")
    d = fresh(base, "gen eos string")
    edit_json(genp(d), lambda j: j.update(eos_token_id="</s>"))
    check("generation_config.json: eos a string", d, "format error", "generation_config.json", "eos_token_id",
          "a token id or a list of token ids")
    d = fresh(base, "gen eos range")
    edit_json(genp(d), lambda j: j.update(eos_token_id=[2, 64]))
    check("generation_config.json: eos outside the vocabulary", d, "format error", "generation_config.json", "eos_token_id 64",
          "vocab_size 64")
    d = fresh(base, "gen temperature")
    edit_json(genp(d), lambda j: j.update(temperature=-1))
    check("generation_config.json: temperature < 0", d, "format error", "generation_config.json", "'temperature' = -1 is out of range")
    d = fresh(base, "gen top_p")
    edit_json(genp(d), lambda j: j.update(top_p=1.5))
    check("generation_config.json: top_p > 1", d, "format error", "generation_config.json", "'top_p' = 1.5 is out of range")
    d = fresh(base, "gen top_k")
    edit_json(genp(d), lambda j: j.update(top_k=2.5))
    check("generation_config.json: top_k a real", d, "format error", "generation_config.json", "'top_k' must be an integer")
    d = fresh(base, "gen do_sample")
    edit_json(genp(d), lambda j: j.update(do_sample="true"))
    check("generation_config.json: do_sample a string", d, "format error", "generation_config.json", "'do_sample' must be a boolean")

    # -- model.safetensors --
    st = lambda d: os.path.join(d, "model.safetensors")  # noqa: E731
    d = fresh(base, "st short")
    open(st(d), "wb").write(b"\x10\x00\x00")
    check("safetensors: 3-byte file", d, "format error", "model.safetensors", "truncated", "8-byte header length")
    d = fresh(base, "st header past eof")
    raw = bytearray(open(st(d), "rb").read())
    raw[0:8] = struct.pack("<Q", len(raw))
    open(st(d), "wb").write(raw)
    check("safetensors: header length past EOF", d, "format error", "model.safetensors", "header length", "byte offset 0",
          "past the end of the file")
    d = fresh(base, "st header huge")
    raw = bytearray(open(st(d), "rb").read())
    raw[0:8] = struct.pack("<Q", 1 << 62)
    open(st(d), "wb").write(raw)
    check("safetensors: header length 2^62", d, "format error", "model.safetensors", "header length 4611686018427387904", "byte offset 0")
    d = fresh(base, "st bad json")
    hdr, data = read_st(st(d))
    write_st_raw(st(d), json.dumps(hdr).encode()[:-5], data)
    check("safetensors: header JSON cut", d, "format error", "model.safetensors", "invalid JSON header", "byte offset")
    d = fresh(base, "st not object")
    write_st_raw(st(d), b"[1, 2, 3]", b"")
    check("safetensors: header an array", d, "format error", "model.safetensors", "byte offset 8", "JSON object")
    d = fresh(base, "st dup")
    hdr, data = read_st(st(d))
    text = json.dumps(hdr)
    k = '"model.norm.weight": '
    i = text.index(k)
    j = text.index("}", i) + 1
    write_st_raw(st(d), (text[:j] + ", " + text[i:j] + text[j:]).encode(), data)
    check("safetensors: duplicate tensor name", d, "format error", "model.safetensors", "duplicate", "model.norm.weight")
    name = "model.layers.1.mlp.up_proj.weight"
    d = mutate_st(fresh(base, "st no dtype"), lambda h, _: h[name].pop("dtype"))
    check("safetensors: entry without dtype", d, "format error", "model.safetensors", name, "missing field 'dtype'", "byte offset")
    d = mutate_st(fresh(base, "st unknown dtype"), lambda h, _: h[name].update(dtype="F7"))
    check("safetensors: unknown dtype", d, "format error", "model.safetensors", name, "unknown dtype 'F7'", "byte offset")
    d = mutate_st(fresh(base, "st int dtype"), lambda h, _: h[name].update(dtype="I32"))
    check("safetensors: I32 weight", d, "unsupported", "model.safetensors", name, "dtype I32 is not supported", "byte offset")
    d = mutate_st(fresh(base, "st dtype number"), lambda h, _: h[name].update(dtype=4))
    check("safetensors: dtype a number", d, "format error", "model.safetensors", name, "'dtype' must be a string")
    d = mutate_st(fresh(base, "st shape str"), lambda h, _: h[name].update(shape="64x32"))
    check("safetensors: shape a string", d, "format error", "model.safetensors", name, "'shape' must be an array")
    d = mutate_st(fresh(base, "st shape neg"), lambda h, _: h[name].update(shape=[-64, -32]))
    check("safetensors: negative shape", d, "format error", "model.safetensors", name, "shape[0] must be a non-negative integer")
    d = mutate_st(fresh(base, "st shape span"), lambda h, _: h[name].update(shape=[32, 32]))
    check("safetensors: shape vs data_offsets", d, "format error", "model.safetensors", name, "1024 elements of F32 (4096 bytes)",
          "span 8192 bytes")

    def past_end(h, data):
        b, e = h[name]["data_offsets"]
        h[name]["data_offsets"] = [len(data) - (e - b) + 4, len(data) + 4]
    d = mutate_st(fresh(base, "st past end"), past_end)
    check("safetensors: data_offsets past EOF", d, "format error", "model.safetensors", name, "run past the end of the file",
          "file bytes", "byte offset")
    d = mutate_st(fresh(base, "st begin end"), lambda h, _: h[name].update(data_offsets=[100, 50]))
    check("safetensors: begin > end", d, "format error", "model.safetensors", name, "begin > end")
    d = mutate_st(fresh(base, "st offsets 3"), lambda h, _: h[name].update(data_offsets=[0, 8, 16]))
    check("safetensors: data_offsets of 3 numbers", d, "format error", "model.safetensors", name, "'data_offsets' must be [begin, end]")

    def overlap(h, _):
        other = "model.layers.1.mlp.gate_proj.weight"
        b, e = h[other]["data_offsets"]
        h[name]["data_offsets"] = [b + 128, b + 128 + (e - b)]
    d = mutate_st(fresh(base, "st overlap"), overlap)
    check("safetensors: overlapping tensors", d, "format error", "model.safetensors", "overlap", "model.layers.1.mlp.gate_proj.weight",
          name, "byte offset")

    def misalign(h, data):
        for k, v in h.items():
            if k != "__metadata__":
                v["data_offsets"] = [v["data_offsets"][0] + 2, v["data_offsets"][1] + 2]
        return h, b"\0\0" + data
    d = mutate_st(fresh(base, "st misaligned"), misalign)
    check("safetensors: misaligned F32 data", d, "unsupported", "model.safetensors", "not aligned", "byte offset")
    d = mutate_st(fresh(base, "st metadata"), lambda h, _: h.update(__metadata__=[1]))
    check("safetensors: __metadata__ an array", d, "format error", "model.safetensors", "__metadata__", "must be an object")
    d = mutate_st(fresh(base, "st missing tensor"), lambda h, _: h.pop(name))
    check("safetensors: a tensor missing", d, "not found", "model.safetensors", f"missing tensor '{name}'")
    d = mutate_st(fresh(base, "st no lm_head"), lambda h, _: h.pop("lm_head.weight"))
    check("safetensors: lm_head missing, untied", d, "not found", "lm_head.weight", "tie_word_embeddings false")
    d = mutate_st(fresh(base, "st 3d"), lambda h, _: h[name].update(shape=[64, 2, 16]))
    check("safetensors: a 3-D matrix", d, "format error", "model.safetensors", name, "[64, 2, 16]", "[64, 32]")
    d = mutate_st(fresh(base, "st norm shape"), lambda h, _: h["model.norm.weight"].update(shape=[4, 8]))
    check("safetensors: 2-D norm vector", d, "format error", "model.safetensors", "model.norm.weight", "[4, 8]", "needs [32]")
    d = mutate_st(fresh(baseq, "st qwen2 bias"), lambda h, _: h.pop("model.layers.0.self_attn.k_proj.bias"))
    check("safetensors: qwen2 without k_proj.bias", d, "not found", "missing tensor 'model.layers.0.self_attn.k_proj.bias'")
    d = fresh(base, "st none")
    os.remove(st(d))
    check("no weights file", d, "not found", "no weights", "model.safetensors.index.json")

    # -- sharded: model.safetensors.index.json --
    ix = lambda d: os.path.join(d, "model.safetensors.index.json")  # noqa: E731
    shard2 = "model-00002-of-00003.safetensors"
    d = fresh(based, "idx missing shard")
    os.remove(os.path.join(d, shard2))
    check("index: a shard missing", d, "not found", "model.safetensors.index.json", shard2, "missing")
    d = fresh(based, "idx bad json")
    open(ix(d), "w").write('{"weight_map": {"a": ')
    check("index: bad JSON", d, "format error", "model.safetensors.index.json", "invalid JSON")
    d = fresh(based, "idx no map")
    edit_json(ix(d), lambda j: j.pop("weight_map"))
    check("index: no weight_map", d, "format error", "model.safetensors.index.json", "missing field 'weight_map'")
    d = fresh(based, "idx map value")
    edit_json(ix(d), lambda j: j["weight_map"].update({"model.norm.weight": 3}))
    check("index: weight_map value a number", d, "format error", "model.safetensors.index.json", "weight_map.model.norm.weight",
          "file name")
    d = fresh(based, "idx escape")
    edit_json(ix(d), lambda j: j["weight_map"].update({"model.norm.weight": "../base-llama/model.safetensors"}))
    check("index: a shard outside the directory", d, "format error", "model.safetensors.index.json", "plain file name")
    d = fresh(based, "idx wrong shard")
    wm = json.load(open(ix(d)))["weight_map"]
    other = next(f for f in sorted(set(wm.values())) if f != wm["model.norm.weight"])
    edit_json(ix(d), lambda j: j["weight_map"].update({"model.norm.weight": other}))
    check("index: tensor not in the shard it names", d, "not found", other, "model.norm.weight", "is not in this shard",
          "model.safetensors.index.json")
    d = fresh(based, "idx tensor missing")
    edit_json(ix(d), lambda j: j["weight_map"].pop("model.layers.0.self_attn.o_proj.weight"))
    check("index: tensor not in weight_map", d, "not found", "model.safetensors.index.json",
          "missing tensor 'model.layers.0.self_attn.o_proj.weight' (not in weight_map)")
    d = fresh(based, "idx broken shard")
    hdr, data = read_st(os.path.join(d, shard2))
    k = next(k for k in hdr if k != "__metadata__")
    hdr[k]["data_offsets"][1] += 1 << 20
    write_st_raw(os.path.join(d, shard2), hdr, data)
    check("index: a shard with a bad tensor", d, "format error", shard2, k, "byte offset")

    # -- GGUF: rope_freqs.weight and the architecture list --
    import gguf
    def gguf_file(name, arch="llama", rope_freqs=None):
        p = os.path.join(WORK, name + ".gguf")
        s = G.SPECS["tiny-llama"]
        g = gguf.GGUFWriter(p, arch)
        g.add_embedding_length(s["E"]); g.add_block_count(1); g.add_feed_forward_length(s["F"])
        g.add_head_count(s["H"]); g.add_head_count_kv(s["HKV"]); g.add_vocab_size(s["V"])
        rng = np.random.default_rng(5)
        if rope_freqs is not None:
            g.add_tensor("rope_freqs.weight", np.asarray(rope_freqs, dtype=np.float32))
        hd = s["E"] // s["H"]
        for n, shape in [("token_embd.weight", (s["V"], s["E"])), ("output_norm.weight", (s["E"],)),
                         ("blk.0.attn_norm.weight", (s["E"],)), ("blk.0.attn_q.weight", (s["E"], s["E"])),
                         ("blk.0.attn_k.weight", (s["HKV"] * hd, s["E"])), ("blk.0.attn_v.weight", (s["HKV"] * hd, s["E"])),
                         ("blk.0.attn_output.weight", (s["E"], s["E"])), ("blk.0.ffn_norm.weight", (s["E"],)),
                         ("blk.0.ffn_gate.weight", (s["F"], s["E"])), ("blk.0.ffn_up.weight", (s["F"], s["E"])),
                         ("blk.0.ffn_down.weight", (s["E"], s["F"]))]:
            g.add_tensor(n, rng.standard_normal(shape).astype(np.float32))
        g.write_header_to_file(); g.write_kv_data_to_file(); g.write_tensors_to_file(); g.close()
        return p
    hd2 = G.SPECS["tiny-llama"]["E"] // G.SPECS["tiny-llama"]["H"] // 2
    p = gguf_file("rope-ok", rope_freqs=[1.0] * (hd2 - 1) + [4.0])
    rc, out = load(p)
    ok = rc == 0 and json.loads(out.splitlines()[0])["rope"].get("freq_factors") == [1.0] * (hd2 - 1) + [4.0]
    RESULTS.append(("gguf: rope_freqs.weight read into freq_factors", ok, out[:300]))
    print(f"{'ok  ' if ok else 'FAIL'} gguf: rope_freqs.weight read into freq_factors")
    check("gguf: rope_freqs.weight of the wrong length", gguf_file("rope-len", rope_freqs=[1.0] * (hd2 + 1)), "format error",
          "rope-len.gguf", "rope_freqs.weight", f"[{hd2}]")
    check("gguf: rope_freqs.weight with a zero", gguf_file("rope-zero", rope_freqs=[1.0] * (hd2 - 1) + [0.0]), "format error",
          "rope-zero.gguf", "rope_freqs.weight", "element 3", "not a positive factor")
    check("gguf: qwen3 without q/k norms", gguf_file("qwen3-no-norm", arch="qwen3"), "format error", "qwen3-no-norm.gguf",
          "missing tensor 'blk.0.attn_q_norm.weight'")
    check("gguf: unsupported architecture", gguf_file("arch-gemma", arch="gemma"), "unsupported", "arch-gemma.gguf", "'gemma'",
          "supported: llama, mistral, qwen2")

    # -- mixtures of experts: what is refused, naming the field or tensor --
    wm = G.make_weights("qwen3moe", seed=6)
    basem = G.write_hf(os.path.join(WORK, "base-qwen3moe"), "qwen3moe", wm, "F32")
    rc, out = load(basem)
    ok = rc == 0 and json.loads(out.splitlines()[0]).get("experts", {}).get("layers") == [0, 2]
    RESULTS.append(("qwen3_moe: a valid directory loads, experts in layers 0 and 2", ok, out[:300]))
    print(f"{'ok  ' if ok else 'FAIL'} qwen3_moe: a valid directory loads, experts in layers 0 and 2")
    for name, edit, status, needles in [
            ("shared experts", dict(shared_expert_intermediate_size=64), "unsupported",
             ("shared_expert_intermediate_size", "shared experts")),
            ("top-k over the experts", dict(num_experts_per_tok=17), "format error",
             ("num_experts_per_tok", "exceeds the 16 experts")),
            ("mlp_only_layers out of range", dict(mlp_only_layers=[1, 5]), "format error", ("mlp_only_layers[1]",)),
            ("no moe_intermediate_size", None, "format error", ("moe_intermediate_size",))]:
        d = fresh(basem, "qwen3moe " + name)
        edit_json(cfgp(d), (lambda j, e=edit: j.update(e)) if edit else (lambda j: j.pop("moe_intermediate_size")))
        check("config.json: qwen3_moe " + name, d, status, "config.json", *needles)
    d = fresh(basem, "qwen3moe missing expert")
    mutate_st(d, lambda h, data: (h.pop("model.layers.2.mlp.experts.3.up_proj.weight"), (h, data))[1])
    check("qwen3_moe: a missing expert tensor", d, "not found", "model.layers.2.mlp.experts.3.up_proj.weight")
    d = fresh(base, "llama with experts")
    edit_json(cfgp(d), lambda j: j.update(num_local_experts=8))
    check("config.json: experts on llama", d, "unsupported", "num_local_experts", "qwen3_moe, qwen2_moe and mixtral only")
    check("gguf: qwen3moe shared experts", G.write_gguf(os.path.join(WORK, "moe-shared.gguf"), "qwen3moe", wm, "F32",
                                                        extra_kv={"qwen3moe.expert_shared_count": 1}),
          "unsupported", "moe-shared.gguf", "expert_shared_count", "shared experts")
    check("gguf: qwen3moe sigmoid gating", G.write_gguf(os.path.join(WORK, "moe-sigmoid.gguf"), "qwen3moe", wm, "F32",
                                                        extra_kv={"qwen3moe.expert_gating_func": 2}),
          "unsupported", "moe-sigmoid.gguf", "expert_gating_func", "softmax")
    G.SPECS["tmp-qwen3moe-dense"] = dict(G.SPECS["qwen3moe"], experts=0)
    check("gguf: qwen3moe without expert_count",
          G.write_gguf(os.path.join(WORK, "moe-noexp.gguf"), "tmp-qwen3moe-dense", G.make_weights("tmp-qwen3moe-dense", seed=7)),
          "format error", "moe-noexp.gguf", "qwen3moe.expert_count")

    # -- transformers 5's fused experts (gen_hf_models.fuse_experts): a valid directory loads and
    # says so; a malformed fused tensor fails naming the file and the tensor --
    wf = G.fuse_experts(wm)
    gu0, dn0 = "model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"
    basef = G.write_hf(os.path.join(WORK, "base-qwen3moe-fused"), "qwen3moe", wf, "F32")
    rc, out = load(basef)
    ex = json.loads(out.splitlines()[0]).get("experts", {}) if rc == 0 else {}
    ok = ex.get("layers") == [0, 2] and ex.get("layout") == "fused"
    RESULTS.append(("qwen3_moe fused: a valid directory loads, layout fused", ok, out[:300]))
    print(f"{'ok  ' if ok else 'FAIL'} qwen3_moe fused: a valid directory loads, layout fused")

    def fused_case(name, edit, status, *needles, spec="qwen3moe", weights=None, shards=1):
        w = dict(weights if weights is not None else wf)
        edit(w)
        d = os.path.join(WORK, "fused " + name.replace(" ", "_").replace("/", "_"))
        shutil.rmtree(d, ignore_errors=True)
        G.write_hf(d, spec, w, "F32", shards)
        check(f"{spec} fused experts: " + name, d, status, *needles)
    ST = "model.safetensors"
    fused_case("15 experts of 16", lambda w: w.update({gu0: w[gu0][:15]}), "format error", ST, gu0, "[15, 128, 128]",
               "15 experts", "num_experts = 16")
    fused_case("down_proj of 17 experts", lambda w: w.update({dn0: np.concatenate([w[dn0], w[dn0][:1]])}), "format error",
               ST, dn0, "17 experts")
    fused_case("gate half only", lambda w: w.update({gu0: w[gu0][:, :64]}), "format error", ST, gu0, "[16, 64, 128]",
               "one half only", "[16, 128, 128]")
    fused_case("down_proj transposed", lambda w: w.update({dn0: np.ascontiguousarray(w[dn0].transpose(0, 2, 1))}),
               "format error", ST, dn0, "[16, 64, 128]", "transposed", "[16, 128, 64]")
    fused_case("gate_up_proj 2-D", lambda w: w.update({gu0: w[gu0].reshape(16 * 128, 128)}), "format error", ST, gu0,
               "[2048, 128]", "3-D")
    fused_case("wrong hidden size", lambda w: w.update({gu0: w[gu0][:, :, :96]}), "format error", ST, gu0,
               "[16, 128, 96]", "needs [num_experts, 2 * ff, hidden]")
    fused_case("down_proj missing", lambda w: w.pop(dn0), "not found", ST, dn0, gu0)
    fused_case("gate_up_proj missing", lambda w: w.pop(gu0), "not found", ST, gu0, dn0)
    fused_case("fused and per-expert in one layer",
               lambda w: w.update({"model.layers.0.mlp.experts.5.up_proj.weight": wm["model.layers.0.mlp.experts.5.up_proj.weight"]}),
               "format error", ST, "model.layers.0.mlp.experts.5.up_proj.weight", gu0, "one layout")
    fused_case("neither layout", lambda w: (w.pop(gu0), w.pop(dn0)), "not found", ST,
               "model.layers.0.mlp.experts.0.gate_proj.weight", gu0)
    # sharded: the shard holding the bad tensor is named (2 shards: layer 2's experts in the second)
    gu2 = "model.layers.2.mlp.experts.gate_up_proj"
    fused_case("sharded, 15 experts in the second shard", lambda w: w.update({gu2: w[gu2][:15]}), "format error",
               "model-00002-of-00002.safetensors", gu2, "15 experts", shards=2)
    # Mixtral: transformers 5 renames block_sparse_moe.gate to mlp.gate; a fused directory that
    # kept the old router name is missing the new one
    wx = G.fuse_experts(G.make_weights("mixtral", seed=8))
    fused_case("mixtral router under the old name",
               lambda w: w.update({"model.layers.1.block_sparse_moe.gate.weight": w.pop("model.layers.1.mlp.gate.weight")}),
               "not found", ST, "model.layers.1.mlp.gate.weight", "block_sparse_moe.gate", spec="mixtral", weights=wx)
    fused_case("mixtral 7 experts of 8",
               lambda w: w.update({"model.layers.1.mlp.experts.down_proj": w["model.layers.1.mlp.experts.down_proj"][:7]}),
               "format error", ST, "model.layers.1.mlp.experts.down_proj", "7 experts", "num_local_experts = 8",
               spec="mixtral", weights=wx)

    # -- files changed on disk after loading: pllm_model_check_files names the file --
    def recheck(name, path, change, *needles):
        p = subprocess.Popen([TOOL, "recheck", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = p.stdout.readline().strip()
        change()
        out, _ = p.communicate("go\n")
        out = out.strip()
        ok = first == "loaded" and p.returncode == 1 and out.startswith("ERROR") and all(n in out for n in needles)
        RESULTS.append((name, ok, out))
        print(f"{'ok  ' if ok else 'FAIL'} {name}\n       {out[:300]}")

    def truncate(path):
        return lambda: os.truncate(path, os.path.getsize(path) // 2)

    def rewrite(path):  # same size, new bytes and modification time
        def f():
            data = bytearray(open(path, "rb").read())
            data[-1] ^= 0xFF
            st = os.stat(path)
            with open(path, "r+b") as fh:
                fh.write(data)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        return f
    d = fresh(based, "changed shard")
    recheck("loaded HF shard truncated", d, truncate(os.path.join(d, shard2)), shard2)
    d = fresh(based, "rewritten shard")
    recheck("loaded HF shard rewritten in place", d, rewrite(os.path.join(d, shard2)), shard2)
    p = gguf_file("changed")
    recheck("loaded GGUF truncated", p, truncate(p), "changed.gguf")
    pr = subprocess.Popen([TOOL, "recheck", base], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out, _ = pr.communicate("go\n")
    ok = out.split() == ["loaded", "OK"] and pr.returncode == 0
    RESULTS.append(("unchanged files check OK", ok, out))
    print(f"{'ok  ' if ok else 'FAIL'} unchanged files check OK")

    n_ok = sum(ok for _, ok, _ in RESULTS)
    failures += [f"{n}: {o}" for n, ok, o in RESULTS if not ok]
    print(f"{n_ok} of {len(RESULTS)} cases as expected (errors, valid variants, changed files)")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    print("model_hf_malformed: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
