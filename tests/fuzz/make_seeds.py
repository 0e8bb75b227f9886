#!/usr/bin/env python3
"""Seed corpora for the fuzz harnesses (tests/fuzz/fuzz_<target>.c).

    make_seeds.py OUTDIR              OUTDIR/<target>/... from synthetic files, slices of the real
                                      data ($PLLM_SHARED_DATA) and the default model's tokenizer
                                      metadata ($PLLM_HOME); built at run time, never committed
    make_seeds.py --committed OUTDIR  only the tiny synthetic seeds (what tests/fuzz/seeds/ holds)

Every seed is a valid (or nearly valid) input of its format, small (a few KB), so that the
fuzzer starts from the interesting paths: a GGUF seed loads as a model with a tokenizer, a
safetensors directory loads as a Hugging Face model, a record parses, a template renders.
Deterministic: the same inputs give the same seeds.
"""
import json
import os
import struct
import sys

import numpy as np

SEP = b"\n#pllm-file#\n"  # fuzz_hf_dir.c's file separator

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

HAND_TEMPLATES = [
    CHATML,
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content | trim }} [/INST]"
    "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% else %}{{ raise_exception('bad role') }}"
    "{% endif %}{% endfor %}",
    "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}"
    "{{ loop.index0 }}:{{ m['role'] | upper }}={{ m.content | tojson }}{% if not loop.last %}, {% endif %}"
    "{%- endfor -%}{{ ns.n }}{% if add_generation_prompt %}|gen{% endif %}",
    "{% macro r(x, d) %}{% if d > 0 %}({{ r(x, d - 1) }}){% else %}{{ x }}{% endif %}{% endmacro %}"
    "{{ r(messages | length, 3) }}{% for k, v in {'a': 1, 'b': [1, 2]} | dictsort %}{{ k }}{{ v }}{% endfor %}"
    "{{ 'x' * 3 }}{{ range(3) | list }}{{ messages[-1].content[1:4] }}{{ 7 // 2 }}{{ 2 ** 5 }}",
]

MESSAGES = [
    [("system", "Be brief."), ("user", "Hi there"), ("assistant", "Hello!"), ("user", "2+2?")],
    [("user", "Tell me a joke \u00e9\u4e2d\U0001F600")],
    [("user", "a"), ("assistant", "b"), ("user", "c")],
]


def put(outdir, target, name, data):
    d = os.path.join(outdir, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- GGUF

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tiny_vocab():
    """A byte-level BPE vocabulary: specials, the 256 byte symbols, a few merges."""
    b2u = bytes_to_unicode()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    byte_toks = [b2u[b] for b in range(256)]
    G = b2u[ord(" ")]
    merges = [(G, "t"), ("h", "e"), (G + "t", "he"), ("i", "n"), (G, "a"), ("e", "r"), ("o", "n"), ("1", "2")]
    merged = [a + b for a, b in merges]
    tokens = specials + byte_toks + merged
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    return tokens, types, [f"{a} {b}" for a, b in merges]


def write_gguf(path, arch="llama", tokens=None, types=None, merges=None, pre="smollm", template=CHATML,
               n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=32, qtype="Q8_0", bias=False, seed=0, extra=None):
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    n_vocab = len(tokens) if tokens else 64
    w.add_name("pllm-fuzz-seed")
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    if tokens:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(0)
        w.add_eos_token_id(2)
        w.add_add_bos_token(False)
    if template:
        w.add_chat_template(template)
    for k, v in (extra or {}).items():
        w.add_key_value(k, v[1], v[0])

    def mat(name, rows, cols):
        x = rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols)
        if qtype == "F32":
            w.add_tensor(name, x)
        elif qtype == "F16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, quantize(x, Q[qtype]), raw_dtype=Q[qtype])

    def vec(name, n):
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    hd = n_embd // n_head
    mat("token_embd.weight", n_vocab, n_embd)
    vec("output_norm.weight", n_embd)
    for i in range(n_layer):
        vec(f"blk.{i}.attn_norm.weight", n_embd)
        mat(f"blk.{i}.attn_q.weight", n_head * hd, n_embd)
        mat(f"blk.{i}.attn_k.weight", n_head_kv * hd, n_embd)
        mat(f"blk.{i}.attn_v.weight", n_head_kv * hd, n_embd)
        mat(f"blk.{i}.attn_output.weight", n_embd, n_head * hd)
        if bias:
            vec(f"blk.{i}.attn_q.bias", n_head * hd)
            vec(f"blk.{i}.attn_k.bias", n_head_kv * hd)
            vec(f"blk.{i}.attn_v.bias", n_head_kv * hd)
        vec(f"blk.{i}.ffn_norm.weight", n_embd)
        mat(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        mat(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        mat(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def metadata_only_gguf(version=3):
    """Every metadata value type, nested arrays, no tensors (hand-packed)."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    kvs = [
        (s("t.u8") + struct.pack("<IB", 0, 200)),
        (s("t.i8") + struct.pack("<Ib", 1, -5)),
        (s("t.u16") + struct.pack("<IH", 2, 65000)),
        (s("t.i16") + struct.pack("<Ih", 3, -300)),
        (s("t.u32") + struct.pack("<II", 4, 4000000000)),
        (s("t.i32") + struct.pack("<Ii", 5, -7)),
        (s("t.f32") + struct.pack("<If", 6, 1.5)),
        (s("t.bool") + struct.pack("<IB", 7, 1)),
        (s("t.str") + struct.pack("<I", 8) + s("h\u00e9llo")),
        (s("t.arr.str") + struct.pack("<IIQ", 9, 8, 3) + s("a") + s("") + s("ccc")),
        (s("t.arr.f32") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0.5, -2)),
        (s("t.arr.arr") + struct.pack("<IIQ", 9, 9, 2) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 9)
         + struct.pack("<IQ", 8, 1) + s("z")),
        (s("t.u64") + struct.pack("<IQ", 10, 2**63)),
        (s("t.i64") + struct.pack("<Iq", 11, -2**40)),
        (s("t.f64") + struct.pack("<Id", 12, 1e300)),
        (s("general.alignment") + struct.pack("<II", 4, 64)),
    ]
    return b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs)) + b"".join(kvs)


def gguf_seeds(outdir, tmp, committed):
    tokens, types, merges = tiny_vocab()
    p = os.path.join(tmp, "s.gguf")
    variants = [
        ("llama_q8_0", dict(tokens=tokens, types=types, merges=merges)),
        ("llama_f16_notok", dict(qtype="F16", template=None)),
        ("qwen2_bias", dict(arch="qwen2", tokens=tokens, types=types, merges=merges, pre="qwen2", bias=True, qtype="Q4_0")),
        ("llama_2layers_gqa", dict(tokens=tokens, types=types, merges=merges, pre="llama-bpe", n_layer=2, n_head=4,
                                   n_head_kv=2, qtype="Q4_1")),
    ]
    for name, kw in variants:
        if committed and name not in ("llama_q8_0", "qwen2_bias"):
            continue
        write_gguf(p, **kw)
        put(outdir, "gguf", name + ".gguf", open(p, "rb").read())
    put(outdir, "gguf", "metadata_v3.gguf", metadata_only_gguf(3))
    put(outdir, "gguf", "metadata_v2.gguf", metadata_only_gguf(2))
    if committed:
        return
    # the default model's real tokenizer metadata, the vocabulary cut to its first 600 tokens
    # (and the merges among them), with a tiny model around it
    model = os.path.join(os.environ.get("PLLM_HOME", os.path.expanduser("~/.cache/pllm")), "models",
                         "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(model):
        import gguf
        r = gguf.GGUFReader(model)
        f = r.fields["tokenizer.ggml.tokens"]
        toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data[:600]]
        f = r.fields["tokenizer.ggml.token_type"]
        tt = [int(f.parts[i][0]) for i in f.data[:600]]
        have = set(toks)
        f = r.fields["tokenizer.ggml.merges"]
        mg = []
        for i in f.data:
            m = bytes(f.parts[i]).decode("utf-8")
            a, _, b = m.partition(" ")
            if a in have and b in have and a + b in have:
                mg.append(m)
        f = r.fields["tokenizer.chat_template"]
        tmpl = bytes(f.parts[f.data[0]]).decode("utf-8")
        write_gguf(p, tokens=toks, types=tt, merges=mg, template=tmpl)
        put(outdir, "gguf", "smollm2_vocab600.gguf", open(p, "rb").read())


# ---------------------------------------------------------------- safetensors and HF directories

def st_bytes(tensors, metadata=None):
    """safetensors bytes (written by hand: an independent writer, aligned offsets)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dt, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def hf_model(arch="llama", n_vocab=64, n_embd=16, n_layer=1, n_head=2, n_head_kv=1, n_ff=24, tied=True, seed=0,
             dtype="F32"):
    rng = np.random.default_rng(seed)
    npdt = {"F32": np.float32, "F16": np.float16}[dtype]
    hd = n_embd // n_head
    cfg = {"architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"], "model_type": arch,
           "hidden_size": n_embd, "num_hidden_layers": n_layer, "num_attention_heads": n_head,
           "num_key_value_heads": n_head_kv, "intermediate_size": n_ff, "vocab_size": n_vocab,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": tied, "bos_token_id": 0, "eos_token_id": [1, 2], "hidden_act": "silu",
           "torch_dtype": "float32"}
    t = {}

    def m(name, r, c):
        t[name] = (dtype, (rng.standard_normal((r, c)) / np.sqrt(c)).astype(npdt))

    def v(name, n):
        t[name] = (dtype, (1 + 0.1 * rng.standard_normal(n)).astype(npdt))

    m("model.embed_tokens.weight", n_vocab, n_embd)
    v("model.norm.weight", n_embd)
    if not tied:
        m("lm_head.weight", n_vocab, n_embd)
    for i in range(n_layer):
        pre = f"model.layers.{i}."
        v(pre + "input_layernorm.weight", n_embd)
        v(pre + "post_attention_layernorm.weight", n_embd)
        m(pre + "self_attn.q_proj.weight", n_head * hd, n_embd)
        m(pre + "self_attn.k_proj.weight", n_head_kv * hd, n_embd)
        m(pre + "self_attn.v_proj.weight", n_head_kv * hd, n_embd)
        m(pre + "self_attn.o_proj.weight", n_embd, n_head * hd)
        if arch == "qwen2":
            v(pre + "self_attn.q_proj.bias", n_head * hd)
            v(pre + "self_attn.k_proj.bias", n_head_kv * hd)
            v(pre + "self_attn.v_proj.bias", n_head_kv * hd)
        m(pre + "mlp.gate_proj.weight", n_ff, n_embd)
        m(pre + "mlp.up_proj.weight", n_ff, n_embd)
        m(pre + "mlp.down_proj.weight", n_embd, n_ff)
    return cfg, t


def hf_seeds(outdir, committed):
    gen = {"bos_token_id": 0, "eos_token_id": [1, 2], "do_sample": True, "temperature": 0.7, "top_p": 0.9,
           "top_k": 20, "repetition_penalty": 1.1, "max_new_tokens": 64}
    # single file
    cfg, t = hf_model()
    st = st_bytes(t, {"format": "pt"})
    put(outdir, "hf_dir", "llama_single", SEP.join([json.dumps(cfg).encode(), json.dumps(gen).encode(), b"", st]))
    put(outdir, "safetensors", "llama_tiny.safetensors", st)
    # qwen2, untied, F16, no generation_config
    cfg, t = hf_model(arch="qwen2", tied=False, dtype="F16", n_head=4, n_head_kv=2, seed=1)
    st = st_bytes(t)
    if not committed:
        put(outdir, "hf_dir", "qwen2_f16_nogen", SEP.join([json.dumps(cfg).encode(), b"", b"", st]))
        put(outdir, "safetensors", "qwen2_f16.safetensors", st)
    # sharded: two shards and an index
    cfg, t = hf_model(n_layer=1 if committed else 2, seed=2)
    names = sorted(t)
    half = len(names) // 2
    shards = [{n: t[n] for n in names[:half]}, {n: t[n] for n in names[half:]}]
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = {"metadata": {"total_size": 0}, "weight_map": {n: files[0 if n in shards[0] else 1] for n in names}}
    put(outdir, "hf_dir", "llama_sharded",
        SEP.join([json.dumps(cfg).encode(), json.dumps(gen).encode(), json.dumps(index).encode(), b"",
                  st_bytes(shards[0]), st_bytes(shards[1])]))
    # assorted safetensors corner cases
    put(outdir, "safetensors", "empty_header.safetensors", struct.pack("<Q", 2) + b"{}")
    put(outdir, "safetensors", "kinds.safetensors",
        st_bytes({"i64": ("I64", np.arange(3, dtype=np.int64)), "u8": ("U8", np.zeros((2, 3), np.uint8)),
                  "scalar": ("F32", np.array(1.0, np.float32)), "empty": ("F16", np.zeros((0, 4), np.float16)),
                  "bf16": ("BF16", np.zeros(4, np.uint16))}))
    # config.json variants
    cfgs = {
        "llama": hf_model()[0],
        "mistral_sliding": dict(hf_model()[0], model_type="mistral", sliding_window=128),
        "qwen2": dict(hf_model(arch="qwen2")[0], use_sliding_window=False, sliding_window=4096),
        "llama3_rope": dict(hf_model()[0], rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                           "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 8192}),
        "linear_rope": dict(hf_model()[0], rope_scaling={"type": "linear", "factor": 2.0}, head_dim=8),
        "generation": gen,
        "qwen3": dict(hf_model()[0], model_type="qwen3", head_dim=8, attention_bias=False, use_sliding_window=False),
        "phi3_longrope": dict(hf_model()[0], model_type="phi3", partial_rotary_factor=0.5,
                              original_max_position_embeddings=32,
                              rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [2.0, 8.0]}),
        "gemma3": dict(hf_model()[0], model_type="gemma3_text", head_dim=8, query_pre_attn_scalar=8, sliding_window=4,
                       sliding_window_pattern=2, rope_local_base_freq=10000.0, hidden_activation="gelu_pytorch_tanh"),
        "gemma3_mm": {"model_type": "gemma3", "text_config": dict(hf_model()[0], model_type="gemma3_text", head_dim=8,
                                                                  layer_types=["sliding_attention"])},
    }
    for name, c in cfgs.items():
        put(outdir, "hf_config", name + ".json", json.dumps(c, indent=1))


# ---------------------------------------------------------------- records, tokenizer text, templates, io

def record_lines(prompts, convs):
    out = []
    for i, p in enumerate(prompts):
        out.append((0, json.dumps({"id": f"p{i}", "prompt": p, "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
                                   "stop": ["\n\n"], "seed": i, "logprobs": 2})))
        out.append((0, json.dumps({"id": i, "messages": [{"role": "system", "content": "Be brief."},
                                                         {"role": "user", "content": p}], "n": 2,
                                   "stop_token_ids": [2], "ignore_eos": False, "min_tokens": 1, "top_k": 5,
                                   "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.1,
                                   "frequency_penalty": 0.1})))
        out.append((1, json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                   "body": {"model": "m", "messages": [{"role": "user", "content": p}],
                                            "max_tokens": 8, "logprobs": True, "top_logprobs": 2, "stop": "x"}})))
        out.append((1, json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
                                   "body": {"model": "m", "prompt": p, "max_completion_tokens": 8, "logprobs": 3,
                                            "seed": 1, "n": 1}})))
        out.append((1, json.dumps({"custom_id": f"parts{i}", "method": "POST", "url": "/v1/chat/completions",
                                   "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": p}]}]}})))
    for i, c in enumerate(convs):
        out.append((2, json.dumps({"id": f"s{i}", "conversations": c})))
    out.append((0, '{"id": "bad", "prompt": "x", "temprature": 1}'))
    out.append((0, '{"prompt": ""}'))
    out.append((3, '{"custom_id": null, "body": {}}'))
    out.append((3, '[1, 2'))
    return out


def text_slices(data_dir, limit):
    prompts, convs = [], []
    sg = os.path.join(data_dir, "sharegpt", "ShareGPT_V3_filtered_1000.json")
    if os.path.exists(sg):
        for e in json.load(open(sg))[:limit]:
            c = e.get("conversations", [])
            if c:
                prompts.append(c[0]["value"][:400])
                convs.append([{"from": t["from"], "value": t["value"][:300]} for t in c[:3]])
    mt = os.path.join(data_dir, "mtbench", "mt_bench_question.jsonl")
    if os.path.exists(mt):
        for line in open(mt).read().splitlines()[:limit]:
            q = json.loads(line)
            prompts.append(q["turns"][0][:400])
            convs.append([{"from": "human", "value": q["turns"][0][:300]}, {"from": "gpt", "value": "ok"},
                          {"from": "human", "value": q["turns"][1][:300]}])
    return prompts, convs


def templates(data_dir):
    out = list(HAND_TEMPLATES)
    root = os.path.join(data_dir, "tokenizers")
    for dp, _, fns in sorted(os.walk(root)):
        for fn in sorted(fns):
            p = os.path.join(dp, fn)
            if fn.endswith(".jinja"):
                out.append(open(p, encoding="utf-8").read())
            elif fn.endswith(".json") and "chat-templates" in dp or fn == "tokenizer_config.json":
                try:
                    j = json.load(open(p, encoding="utf-8"))
                except Exception:
                    continue
                t = j.get("chat_template") if isinstance(j, dict) else None
                if isinstance(t, str):
                    out.append(t)
                elif isinstance(t, list):
                    out.extend(x.get("template", "") for x in t if isinstance(x, dict))
    return [t for t in out if t and len(t.encode()) <= 8192]


def chat_seed(flags, tmpl, msgs):
    body = b"\x1e".join(r.encode() + b"\x1f" + c.encode() for r, c in msgs)
    return bytes([flags]) + tmpl.encode() + b"\x00" + body


def tok_file_seeds(outdir, tmp, texts):
    """Tiny tokenizers trained here: byte-level BPE tokenizer.json (+ tokenizer_config.json), its
    vocab.json + merges.txt, a SentencePiece-style (Metaspace) tokenizer.json, and a
    SentencePiece BPE .model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from tokenizers.implementations import SentencePieceBPETokenizer
    corpus = [t for t in texts if t] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<s>", "</s>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, tr)
    tj = tok.to_str().encode()
    cfg = json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "chat_template": CHATML,
                      "added_tokens_decoder": {"1": {"content": "<s>", "special": True},
                                               "2": {"content": "</s>", "special": True}}}).encode()
    put(outdir, "tok_files", "bytelevel_tokenizer_json", b"\x00" + tj + SEP + cfg)
    put(outdir, "tok_files", "bytelevel_no_config", b"\x00" + tj)
    d = os.path.join(tmp, "vm")
    os.makedirs(d, exist_ok=True)
    tok.model.save(d)
    put(outdir, "tok_files", "vocab_merges", b"\x01" + open(os.path.join(d, "vocab.json"), "rb").read() + SEP
        + open(os.path.join(d, "merges.txt"), "rb").read())
    sp = SentencePieceBPETokenizer()
    sp.train_from_iterator(corpus, vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    put(outdir, "tok_files", "metaspace_tokenizer_json", b"\x00" + sp.to_str().encode())
    try:
        import sentencepiece as spm
        txt = os.path.join(tmp, "spm.txt")
        with open(txt, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus))
        spm.SentencePieceTrainer.train(input=txt, model_prefix=os.path.join(tmp, "spm"), vocab_size=400,
                                       model_type="bpe", byte_fallback=True, character_coverage=0.9995,
                                       add_dummy_prefix=True, remove_extra_whitespaces=False,
                                       normalization_rule_name="identity", minloglevel=2)
        put(outdir, "tok_files", "spm_bpe.model", b"\x02" + open(os.path.join(tmp, "spm.model"), "rb").read())
    except Exception as e:  # noqa: BLE001 (an optional seed)
        print(f"make_seeds: no SentencePiece seed: {e}", file=sys.stderr)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    os.rmdir(d)


def zst(data):
    """zstd-compress with the zstd command line tool (installed by setup.sh)."""
    import subprocess
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, capture_output=True, check=True).stdout


def prefix_entry(tmp, bs, raw, tokens, depth=0, ns=7, key=(1, 2), parent=(3, 4)):
    """A --prefix-cache-dir entry (engine/prefix_store.h) with zeroed checksums: fuzz_prefix_store
    recomputes them in its repair mode (flag bit 0), so no hash library is needed here."""
    import subprocess
    src = os.path.join(tmp, "kv.bin")
    with open(src, "wb") as f:
        f.write(raw)
    # from a file, so the frame header carries the content size (the format requires it)
    comp = subprocess.run(["zstd", "-q", "-c", "-1", src], capture_output=True, check=True).stdout
    hdr = 104 + 4 * bs
    h = bytearray(hdr)
    h[0:8] = b"PLLMKVB\x01"
    struct.pack_into("<IIQQQQQIIQQQQ", h, 8, 1, hdr, ns, key[0], key[1], parent[0], parent[1], depth, bs,
                     len(raw), len(comp), 0, 0)
    struct.pack_into(f"<{bs}i", h, 96, *tokens)
    return bytes(h) + comp


def prefix_store_seeds(outdir, tmp):
    raw = bytes((i * 37) % 251 if i % 5 else 0 for i in range(64))
    put(outdir, "prefix_store", "repair_bs4", b"\x01" + prefix_entry(tmp, 4, raw, [1, 2, 3, 4]))
    put(outdir, "prefix_store", "repair_bs16", b"\x01" + prefix_entry(tmp, 16, bytes(512), list(range(16)), depth=3))
    put(outdir, "prefix_store", "raw_fixed", b"\x00" + prefix_entry(tmp, 4, raw, [1, 2, 3, 4]))
    put(outdir, "prefix_store", "truncated", b"\x01" + prefix_entry(tmp, 4, raw, [1, 2, 3, 4])[:-7])
    put(outdir, "prefix_store", "header_only", b"\x00PLLMKVB\x01\x01\x00\x00\x00")


def main():
    args = sys.argv[1:]
    committed = "--committed" in args
    args = [a for a in args if a != "--committed"]
    if len(args) != 1:
        print(__doc__)
        sys.exit(2)
    outdir = args[0]
    tmp = os.path.join(outdir, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    data_dir = os.environ.get("PLLM_SHARED_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))

    gguf_seeds(outdir, tmp, committed)
    hf_seeds(outdir, committed)
    prefix_store_seeds(outdir, tmp)

    if committed:
        prompts = ["The capital of France is", "Write a haiku about \u00e9t\u00e9 \u4e2d\u6587 \U0001F600",
                   "def f(x):\n    return x**2\n\n# tabs\tand  spaces"]
        convs = [[{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}],
                 [{"from": "system", "value": "sys"}, {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"},
                  {"from": "human", "value": "q2"}]]
        tmpls = HAND_TEMPLATES
    else:
        prompts, convs = text_slices(data_dir, 40)
        tmpls = templates(data_dir)

    for i, (fmt, line) in enumerate(record_lines(prompts[:12], convs[:12])):
        put(outdir, "records", f"r{i:03d}", bytes([fmt | (4 if i % 5 == 4 else 0)]) + line.encode())

    special = "<|im_start|>user\nHello<|im_end|>\n<|endoftext|>"
    tok_texts = prompts + [special, "  leading spaces\n\n\ttabs 12345 3.14159", "\u00e9\u00e8 \u4e2d\u6587 \U0001F600\U0001F680"]
    for i, t in enumerate(tok_texts):
        put(outdir, "tokenizer", f"enc{i:03d}", bytes([0 if i % 3 else 6]) + t.encode())
    put(outdir, "tokenizer", "invalid_utf8", b"\x00abc\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98")
    rng = np.random.default_rng(7)
    for i in range(4):
        put(outdir, "tokenizer", f"dec{i}", bytes([1 | (4 if i & 1 else 0)]) + rng.integers(0, 49152, 64, dtype=np.uint16).tobytes())
    put(outdir, "tokenizer", "dec_wide", bytes([3]) + rng.integers(0, 2**31, 16, dtype=np.uint32).tobytes())

    for i, t in enumerate(tmpls):
        msgs = MESSAGES[i % len(MESSAGES)]
        put(outdir, "chat", f"t{i:03d}", chat_seed(1 if i % 2 == 0 else 0, t, msgs))
    put(outdir, "chat", "default_msgs", b"\x01" + CHATML.encode())

    tok_file_seeds(outdir, tmp, prompts + [t for c in convs for t in (x["value"] for x in c)])

    jsonl = "".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in enumerate(prompts[:6])).encode()
    put(outdir, "io", "plain", b"\x00" + jsonl + b"no newline at the end")
    put(outdir, "io", "zst", b"\x01" + zst(jsonl))
    out_lines = "".join(json.dumps({"id": i, "text": "x", "finish_reason": "length"}) + "\n" for i in range(5))
    put(outdir, "io", "resume_torn", b"\x02" + out_lines.encode() + b'{"id": 5, "te')
    put(outdir, "io", "resume_zst_cut", b"\x05" + zst(out_lines.encode())[:-9])
    put(outdir, "io", "resume_zst_whole", b"\x05" + zst(out_lines.encode()))
    put(outdir, "io", "resume_openai", b"\x02" + (json.dumps({"id": "pllm-1", "custom_id": None, "error": {"line": 3}})
                                                  + "\n").encode())
    sg_list = json.dumps([{"id": f"s{i}", "conversations": c} for i, c in enumerate(convs[:4])], indent=1).encode()
    put(outdir, "io", "source_sharegpt_list", b"\x03" + sg_list)
    put(outdir, "io", "source_jsonl", b"\x03" + jsonl + b"\n\n{bad json\n")
    put(outdir, "io", "source_openai", b"\x03" + "".join(l + "\n" for f, l in record_lines(prompts[:2], [])
                                                         if f == 1).encode())
    put(outdir, "io", "source_forced_list", b"\x04" + json.dumps([{"prompt": "a"}, {"prompt": "b"}, 3]).encode())

    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    n = sum(len(fs) for _, _, fs in os.walk(outdir))
    print(f"make_seeds: {n} seeds in {outdir}")


if __name__ == "__main__":
    main()
