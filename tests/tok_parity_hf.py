#!/usr/bin/env python3
"""tok_parity_hf: pllm's tokenizers built from Hugging Face files, SentencePiece models and
GGUF "llama" metadata, against Hugging Face `tokenizers`, byte for byte.

    tok_parity_hf.py TOK_TOOL [all|json|spm]

PART json: the tokenizer.json / vocab+merges families (with the Llama-2 GGUF); spm: the
SentencePiece .model files, the GGUFs made from them, the sentencepiece library and
mistral-common (ctest runs the two parts as two tests, in parallel).
Tokenizers ($PLLM_SHARED_DATA/tokenizers, see its README.md):
  * phi-3-mini/tokenizer.json + tokenizer_config.json (SentencePiece-style BPE, byte fallback,
    legacy Prepend+Replace normalizer, added tokens with rstrip); reference: the file loaded by
    `tokenizers` itself;
  * variants of it written here: the Llama-2/TinyLlama tokenizer.json (same base vocabulary,
    "<s> $A"), a Metaspace pre-tokenizer (prepend_scheme "first", no split: the Mistral v0.3
    / legacy=False form), Metaspace with split and the Metaspace decoder, a normalizer zoo
    (NFKC, Lowercase, Strip, Regex Replace), added tokens with lstrip/single_word/normalized;
  * gpt2/vocab.json + merges.txt (pllm's vocab/merges loader; reference: what transformers'
    GPT2TokenizerFast builds), and the tokenizer.json `tokenizers` serializes from it (merges
    as lists) with byte-level variants: add_prefix_space, Llama-3 Split + ignore_merges,
    Split behaviors (Removed, MergedWithPrevious, MergedWithNext, Contiguous, invert), Digits;
  * mistral-7b-instruct tokenizer.model.v1 and .v3 (pllm's .model reader; reference: the
    tokenizer transformers' LlamaConverter makes from the same pieces, tests/pyref/hf_tok.py);
  * GGUF "llama" files written here: from the Mistral v1 pieces as llama.cpp's converter
    writes them (scores, token types), and from the Llama-2 vocabulary of the phi-3 file with
    scores in merge order; reference: the converted tokenizer of the same pieces.
Corpus: every ShareGPT prompt, every MT-Bench turn, the hard cases of tok_parity.py plus
SentencePiece-specific ones, fresh random strings (seed printed; PLLM_TEST_SEED repeats a run),
and random id sequences for decode. Also the swift-transformers baselines (ids transformers
produced for TinyLlama and gpt2 on a multilingual corpus). 100% is required.
"""

import copy
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "pyref"))
sys.path.insert(0, HERE)
import hf_tok  # noqa: E402
import tok_parity as tp  # noqa: E402

SPM_HARD = [
    "▁", "▁▁", "▁hello", "a▁b", "<0x0A>", "<0x41><0x42>", "<s>", "</s>", "<unk>", "<s><s>", " <s> x </s> ",
    "<|end|>", "<|user|>\nhi<|end|>\n<|assistant|>", "<|end|>   \n\n  next", "x  <|end|>", "<|endoftext|>end",
    "<|system|>You are<|end|><|user|>", "[INST] hi [/INST]", "[INST]", " [INST]x[/INST] ", "<<SYS>>\nsys\n<</SYS>>",
    "Hello world", " Hello", "  Hello", "Hello ", "Hello  ", "\tTab", "\nNewline", "x" * 3000, " " * 200,
    "a" + " " * 17 + "b", "\u3000full\u3000width", "İstanbul ΣΑΣ ΌΣΟΣ ß ǅ ﬁ ① ㌀ Ⅻ", "Café café CAFÉ", "e\u0301",
    "\U0001F600\U0001F601 rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀", "中文字符测试，标点。", "한국어", "ᚠᛇᚻ", "\x00\x01\x7f", "\ufffd\ufffd",
    "hello", "Hello hello HELLO", "singing ing ingest ring", "<mask>", "a <mask> b", "a<mask>b", "  <mask>  ",
]
SPM_POOL = [["▁", "<s>", "</s>", "<unk>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>", "<0x0A>", "[INST]",
             "[/INST]", "<mask>", "ing", "hello", "  ", "\n\n", "İ", "Σ", "ﬁ", "①", "𓀀", "ꙮ"]]


def random_spm_case(rng):
    if rng.random() < 0.3:
        s = "".join(rng.choice(rng.choice(tp.POOLS + SPM_POOL)) for _ in range(rng.randint(1, 40)))
        return s
    return tp.random_case(rng)


def dec_cases(ref, rng, n):
    """Random id sequences: byte tokens ("<0xHH>" or the byte-level alphabet), added/special
    tokens, word pieces with and without the space marker, anything."""
    tk = ref.tokenizer
    size = tk.get_vocab_size(with_added_tokens=True)
    byte_ids = [tk.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    byte_ids += [tk.token_to_id(tp.hf_tok_byte_char(b)) for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    added = list(tk.get_added_tokens_decoder().keys()) or [0]
    space_ids = [i for t, i in tk.get_vocab(with_added_tokens=False).items() if t.startswith(("▁", "Ġ"))][:5000] or [0]
    cases = []
    # long runs of byte tokens spelling valid UTF-8 (longer than the detokenizer's 64-byte hold)
    # between ordinary tokens: decoded whole, as HF does
    if tk.token_to_id("<0x41>") is not None:
        for _ in range(max(1, n // 20)):
            text = "".join(rng.choice("aé中😀\n ") for _ in range(rng.randint(20, 80)))
            run = [tk.token_to_id(f"<0x{b:02X}>") for b in text.encode()]
            cases.append([rng.choice(space_ids)] + run + [rng.choice(space_ids)])
    for _ in range(n):
        ids = []
        for _ in range(rng.randint(1, 40)):
            r = rng.random()
            ids.append(rng.choice(byte_ids) if r < 0.45 else rng.choice(added) if r < 0.6
                       else rng.choice(space_ids) if r < 0.75 else rng.randrange(size))
        cases.append(ids)
    return cases


def run_suite(name, tool, argv, ref, corpus, rng, n_corpus, n_random, n_dec, max_pending):
    """Full runs (n_corpus None: the whole corpus) try every option set on the hard and random
    cases; sampled runs (variants) parse_special off and add_special on once each."""
    hard = [("hard", s) for s in tp.HARD_CASES + SPM_HARD] + [("hard-bytes", b) for b in tp.HARD_BYTES]
    opts = ((False, True), (False, False), (True, True)) if n_corpus is None else ((False, False), (True, True))
    sample = corpus if n_corpus is None else rng.sample(corpus, n_corpus)
    enc = [(g, s, False, True) for g, s in sample]
    enc += [(g, s, a, p) for g, s in hard + [("random", random_spm_case(rng)) for _ in range(n_random)] for a, p in opts]
    suite = tp.Suite(name)
    suite.max_pending = max_pending
    t0 = time.time()
    suite.run(tool, argv, ref, enc, dec_cases(ref, rng, n_dec))
    print(f"  {name}: {len(enc)} texts, {n_dec} id sequences, {time.time() - t0:.1f}s", flush=True)
    return suite


def baseline_suite(name, tool, argv, baseline_path, inputs):
    """The swift-transformers baseline: transformers' ids for each input (default special
    tokens), and its decodes with and without special tokens."""
    base = json.load(open(baseline_path, encoding="utf-8"))
    texts = {e["id"]: e["text"] for e in inputs}
    entries = base["entries"]
    lines = [json.dumps({"text": texts[e["id"]], "add_special": True}) for e in entries]
    import subprocess

    proc = subprocess.run([tool] + argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    outs = [json.loads(x) for x in proc.stdout.splitlines()]
    s = tp.Suite(name)
    if len(outs) != len(entries):
        s.check("encode", False, f"tok_tool exited {proc.returncode}: {proc.stderr[-1000:]}")
        return s
    for e, o in zip(entries, outs):
        s.check("encode", o.get("ids") == e["input_ids"], f"{e['id']}: got {o.get('ids')} want {e['input_ids']}")
        s.check("decode", o.get("decoded") == e["decoded_with_special"],
                f"{e['id']}: got {o.get('decoded')!r} want {e['decoded_with_special']!r}")
        s.check("decode_skip", o.get("decoded_skip") == e["decoded_skip_special"],
                f"{e['id']}: got {o.get('decoded_skip')!r} want {e['decoded_skip_special']!r}")
    return s


def qwen_boundaries(tool, path, base_dir, inputs):
    """Every boundary between pllm's pre-tokenizer pieces is a boundary between the
    baseline's Qwen2.5 tokens (byte offsets; tokens spelled in the GPT-2 byte alphabet)."""
    import subprocess

    base = json.load(open(os.path.join(base_dir, "qwen2_5_multilingual.json"), encoding="utf-8"))
    texts = {e["id"]: e["text"] for e in inputs}
    entries = base["entries"]
    proc = subprocess.run([tool, "--hf", path], input="\n".join(json.dumps({"pretok": texts[e["id"]]})
                                                                   for e in entries) + "\n",
                          capture_output=True, text=True)
    outs = [json.loads(x) for x in proc.stdout.splitlines()]
    s = tp.Suite("Qwen2.5 baseline: pre-tokenizer pieces vs its tokens")
    if len(outs) != len(entries):
        s.check("encode", False, f"tok_tool exited {proc.returncode}: {proc.stderr[-500:]}")
        return s
    to_byte = {tp.hf_tok_byte_char(b): b for b in range(256)}
    for e, o in zip(entries, outs):
        tok_ends, pos = set(), 0
        for t in e["tokens"]:
            pos += len(t) if all(c in to_byte for c in t) else len(t.encode())
            tok_ends.add(pos)
        piece_ends, pos = [], 0
        for p in o.get("pieces", []):
            pos += len(p.encode())
            piece_ends.append(pos)
        ok = pos == max(tok_ends, default=0) and all(p in tok_ends for p in piece_ends)
        s.check("encode", ok, f"{e['id']}: pieces {o.get('pieces')} vs tokens {e['tokens']}")
    return s


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False))  # dumps: the C encoder (dump is Python)


def shallow(j, *keys):
    """A copy of tokenizer.json dict j sharing everything but the top level and the given
    sections (copied one level deep): variants edit only those."""
    out = dict(j)
    for k in keys:
        out[k] = copy.copy(j[k])
    return out


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: tok_parity_hf.py TOK_TOOL [all|json|spm]", file=sys.stderr)
        return 2
    tool = sys.argv[1]
    part = sys.argv[2] if len(sys.argv) > 2 else "all"
    data = os.environ.get("PLLM_SHARED_DATA") or os.path.join(HERE, "..", "..", "shared", "data")
    tokdir = os.path.join(data, "tokenizers")
    tmp = os.environ.get("PLLM_TEST_TMP") or "/tmp"
    seed = int(os.environ.get("PLLM_TEST_SEED") or time.time_ns() % (1 << 32))
    rng = random.Random(seed)
    print(f"tok_parity_hf: seed {seed} (PLLM_TEST_SEED={seed} repeats this run)")
    t0 = time.time()
    corpus = tp.load_corpus(data)
    suites = []

    def tmp_path(name):
        return os.path.join(tmp, f"tok_parity_hf_{os.getpid()}_{name}")

    if part in ("all", "json"):
        # ---- phi-3-mini tokenizer.json and its variants ----
        phi3 = os.path.join(tokdir, "phi-3-mini", "tokenizer.json")
        phi3_cfg = os.path.join(tokdir, "phi-3-mini", "tokenizer_config.json")
        suites.append(run_suite("phi-3-mini tokenizer.json", tool, ["--hf", phi3, phi3_cfg], hf_tok.from_hf_file(phi3),
                                corpus, rng, None, 300, 300, 64))
        pj = json.load(open(phi3, encoding="utf-8"))
        llama2 = hf_tok.llama2_json_from_phi3(pj)
        variants = [("llama-2 (TinyLlama) tokenizer.json", llama2)]
        meta_first = shallow(pj)
        meta_first["normalizer"] = None
        meta_first["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        variants.append(("Metaspace first, no split (Mistral v0.3 form)", meta_first))
        meta_split = shallow(pj)
        meta_split["normalizer"] = None
        meta_split["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
        meta_split["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
        variants.append(("Metaspace always + split, Metaspace decoder", meta_split))
        zoo = shallow(pj)
        zoo["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        variants.append(("normalizer zoo (NFKC, Lowercase, Strip, Regex Replace)", zoo))
        flags = shallow(pj, "added_tokens")
        base_id = max(t["id"] for t in flags["added_tokens"]) + 1
        pv = pj["model"]["vocab"]
        # ids as `tokenizers` gives them: a content already in the vocabulary keeps its id
        flags["added_tokens"] += [
            dict(id=base_id, content="<mask>", single_word=False, lstrip=True, rstrip=False, normalized=False, special=True),
            dict(id=pv["ing"], content="ing", single_word=True, lstrip=False, rstrip=False, normalized=False, special=False),
            dict(id=pv["hello"], content="hello", single_word=False, lstrip=False, rstrip=False, normalized=True,
                 special=False),
            dict(id=base_id + 1, content="NFD", single_word=False, lstrip=True, rstrip=True, normalized=True, special=True),
        ]
        variants.append(("added tokens lstrip/single_word/normalized", flags))
        for bf, fuse, unk in ((False, True, "<unk>"), (False, False, "<unk>"), (False, False, None)):
            v = shallow(pj, "model")
            v["model"].update(byte_fallback=bf, fuse_unk=fuse, unk_token=unk)
            variants.append((f"no byte fallback, fuse_unk={fuse}, unk_token={unk}", v))
        # a vocabulary that defeats the cut at word starts: one token no merge uses becomes "s▁",
        # made by a new last merge
        nosplit = shallow(pj, "model")
        used = set()
        for mg in pj["model"]["merges"]:
            a, b = mg.split(" ")
            used.update((a, b, a + b))
        spare = max((t for t in pj["model"]["vocab"] if t not in used and len(t) == 1), key=pj["model"]["vocab"].get)
        nosplit["model"]["vocab"] = {("s▁" if t == spare else t): i for t, i in pj["model"]["vocab"].items()}
        nosplit["model"]["merges"] = pj["model"]["merges"] + ["s ▁"]
        variants.append(("a token with \"▁\" inside (no cutting at word starts: the heap path)", nosplit))
        for name, j in variants:
            path = tmp_path(f"{len(suites)}.json")
            write_json(path, j)
            ref = hf_tok.from_hf_file(path)
            suites.append(run_suite(name, tool, ["--hf", path], ref, corpus, rng, 120, 100, 100, 64))
            if j is llama2:
                inputs = json.load(open(os.path.join(tokdir, "parity-baselines", "swift-transformers", "inputs.json")))
                suites.append(baseline_suite("swift-transformers TinyLlama baseline (llama-2 tokenizer.json)", tool,
                                             ["--hf", path], os.path.join(tokdir, "parity-baselines", "swift-transformers",
                                                                           "tinyllama_multilingual.json"), inputs))
                gmeta = hf_tok.llama2_gguf_meta(j)
                gpath = tmp_path("llama2.gguf")
                hf_tok.write_spm_gguf(gpath, gmeta)
                suites.append(run_suite("GGUF llama: Llama-2 vocabulary, scores in merge order", tool, [gpath],
                                        hf_tok.spm_from_meta(gmeta), corpus, rng, 300, 200, 200, 64))
                # the same GGUF against the tokenizer.json itself (its own merges list, not one
                # derived from scores): what a user converting TinyLlama to GGUF gets
                suites.append(run_suite("GGUF llama vs the Llama-2 tokenizer.json itself", tool, [gpath], ref, corpus, rng,
                                        300, 200, 100, 64))
                suites.append(baseline_suite("swift-transformers TinyLlama baseline (GGUF llama)", tool, [gpath],
                                             os.path.join(tokdir, "parity-baselines", "swift-transformers",
                                                          "tinyllama_multilingual.json"), inputs))
                os.unlink(gpath)
            os.unlink(path)

        # ---- GPT-2 vocab.json + merges.txt, its tokenizer.json and byte-level variants ----
        vocab, merges = os.path.join(tokdir, "gpt2", "vocab.json"), os.path.join(tokdir, "gpt2", "merges.txt")
        gref = hf_tok.gpt2_from_vocab_merges(vocab, merges)
        suites.append(run_suite("gpt2 vocab.json + merges.txt", tool, ["--vocab-merges", vocab, merges], gref,
                                corpus, rng, None, 300, 300, 3))
        inputs = json.load(open(os.path.join(tokdir, "parity-baselines", "swift-transformers", "inputs.json")))
        suites.append(baseline_suite("swift-transformers gpt2 baseline", tool, ["--vocab-merges", vocab, merges],
                                     os.path.join(tokdir, "parity-baselines", "swift-transformers", "gpt2_multilingual.json"),
                                     inputs))
        gj = json.loads(gref.tokenizer.to_str())
        bl = []
        v = shallow(gj)
        v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        bl.append(("gpt2 tokenizer.json, ByteLevel add_prefix_space", v))
        v = shallow(gj, "model")
        v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": hf_tok.LLAMA3_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        v["model"]["ignore_merges"] = True
        bl.append(("gpt2 vocab, Llama-3 Split + ignore_merges", v))
        for beh, inv in (("Removed", False), ("MergedWithPrevious", True), ("MergedWithNext", False),
                         ("Contiguous", True), ("Removed", True), ("MergedWithNext", True)):
            if True:
                v = shallow(gj)
                v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": "\\s+|[0-9]"}, "behavior": beh, "invert": inv},
                    {"type": "Split", "pattern": {"String": "ab"}, "behavior": "Isolated", "invert": False},
                    {"type": "Digits", "individual_digits": False},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
                bl.append((f"gpt2 vocab, Split {beh} invert={inv} + String Split + Digits", v))
        # the Qwen2 tokenizer.json shape: NFC, the Qwen2 Split regex, ByteLevel without regex,
        # ChatML added tokens (special, not normalized)
        v = shallow(gj, "added_tokens")
        v["normalizer"] = {"type": "NFC"}
        v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": hf_tok.QWEN2_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        n0 = len(gj["model"]["vocab"])
        v["added_tokens"] += [dict(id=n0 + k, content=c, single_word=False, lstrip=False, rstrip=False, normalized=False,
                                   special=True) for k, c in enumerate(("<|im_start|>", "<|im_end|>"))]
        bl.append(("gpt2 vocab in the Qwen2 tokenizer.json shape (NFC, Split, ChatML tokens)", v))
        eot = {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}
        v = shallow(gj)
        v["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|endoftext|>": eot}}]}
        bl.append(("gpt2 vocab, post_processor Sequence[ByteLevel, TemplateProcessing]", v))
        v = shallow(gj)
        v["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 50256], "cls": ["Ġthe", 262],
                               "trim_offsets": True, "add_prefix_space": False}
        bl.append(("gpt2 vocab, post_processor RobertaProcessing", v))
        v = shallow(gj, "added_tokens")
        v["normalizer"] = {"type": "NFC"}
        v["added_tokens"].append(dict(id=len(gj["model"]["vocab"]), content="<|im_start|>", single_word=False,
                                      lstrip=False, rstrip=False, normalized=False, special=True))
        bl.append(("gpt2 vocab, NFC normalizer, added <|im_start|> (lists of merges)", v))
        for name, j in bl:
            path = tmp_path(f"{len(suites)}.json")
            write_json(path, j)
            suites.append(run_suite(name, tool, ["--hf", path], hf_tok.from_hf_file(path), corpus, rng, 100, 80, 60, 3))
            os.unlink(path)

        # ---- Qwen2.5: no vocabulary in the shared data, so only its pre-tokenizer is checked:
        # transformers' Qwen2.5 tokens of the swift-transformers corpus must never cross a
        # boundary between pllm's pieces (NFC normalizer + Qwen2 Split regex + ByteLevel) ----
        v = shallow(gj)
        v["normalizer"] = {"type": "NFC"}
        v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": hf_tok.QWEN2_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        path = tmp_path("qwen2_pre.json")
        write_json(path, v)
        suites.append(qwen_boundaries(tool, path, os.path.join(tokdir, "parity-baselines", "swift-transformers"),
                                      inputs))
        os.unlink(path)

    if part in ("all", "spm"):
        # ---- Mistral SentencePiece models, and a GGUF "llama" from the v1 pieces ----
        for fname in ("tokenizer.model.v1", "mistral_instruct_tokenizer_240323.model.v3"):
            mpath = os.path.join(tokdir, "mistral-7b-instruct", fname)
            meta = hf_tok.spm_meta(mpath)
            ref = hf_tok.spm_from_meta(meta)
            suites.append(run_suite(f"mistral {fname}", tool, ["--spm", mpath], ref, corpus, rng, None, 300, 200, 64))
            gpath = tmp_path("mistral.gguf")
            hf_tok.write_spm_gguf(gpath, meta)
            suites.append(run_suite(f"GGUF llama from mistral {fname} pieces", tool, [gpath], ref, corpus, rng, 150, 100,
                                    100, 64))
            if fname.endswith("v1"):
                nometa = dict(meta, add_space_prefix=False)
                hf_tok.write_spm_gguf(gpath, nometa)
                suites.append(run_suite("GGUF llama, add_space_prefix false", tool, [gpath], hf_tok.spm_from_meta(nometa),
                                        corpus, rng, 100, 100, 100, 64))
            os.unlink(gpath)

        # ---- the sentencepiece library itself on the .model files (a second, independent
        # reference: its own BPE, which breaks score ties by position; special tokens spelled in
        # the text are plain text to it, hence parse_special off) ----
        import sentencepiece as spm
        import subprocess

        for fname in ("tokenizer.model.v1", "mistral_instruct_tokenizer_240323.model.v3"):
            mpath = os.path.join(tokdir, "mistral-7b-instruct", fname)
            sp = spm.SentencePieceProcessor(model_file=mpath)
            texts = [t for _, t in corpus] + tp.HARD_CASES + SPM_HARD + [random_spm_case(rng) for _ in range(300)]
            texts = [t if isinstance(t, str) else t.decode("utf-8", errors="replace") for t in texts]
            out = subprocess.run([tool, "--spm", mpath], input="\n".join(
                json.dumps({"text": t, "add_special": False, "parse_special": False}) for t in texts) + "\n",
                capture_output=True, text=True)
            got = [json.loads(x).get("ids") for x in out.stdout.splitlines()]
            ss = tp.Suite(f"sentencepiece library, {fname}")
            if len(got) != len(texts):
                ss.check("encode", False, f"tok_tool exited {out.returncode}: {out.stderr[-500:]}")
            for t, g in zip(texts, got):
                want = sp.encode(t)
                ss.check("encode", g == want, f"{t[:100]!r}: got {g[:20]} want {want[:20]}")
            suites.append(ss)

        # ---- mistral-common's own ids for a chat (its v1 and v3 tokenizers), from the prompt
        # string the Mistral templates render: v1 "<s>[INST] user [/INST] answer</s>[INST] ...",
        # v3 with [INST]/[/INST] as control tokens and no spaces around them ----
        sdir = os.path.join(tokdir, "mistral-7b-instruct", "mistral-common-samples", "no_tools")
        msgs = json.load(open(os.path.join(sdir, "sample.json"), encoding="utf-8"))["messages"]
        for ver, fname, sep in (("v1", "tokenizer.model.v1", " "),
                                ("v3", "mistral_instruct_tokenizer_240323.model.v3", "")):
            text = "<s>"
            for m in msgs:
                if m["role"] == "user":
                    text += f"[INST]{sep}{m['content']}{sep}[/INST]"
                else:
                    text += f"{sep}{m['content']}</s>" if sep else f"{m['content']}</s>"
            want = json.load(open(os.path.join(sdir, f"tokens_{ver}.json")))["tokens"]
            import subprocess

            mpath = os.path.join(tokdir, "mistral-7b-instruct", fname)
            out = subprocess.run([tool, "--spm", mpath], input=json.dumps({"text": text, "add_special": False}) + "\n",
                                 capture_output=True, text=True)
            got = json.loads(out.stdout).get("ids") if out.stdout else None
            ms = tp.Suite(f"mistral-common {ver} chat ids")
            ms.check("encode", got == want, f"{text!r}: got {got} want {want}")
            suites.append(ms)

    bad = 0
    for s in suites:
        for f in s.failures:
            print("MISMATCH", f)
    for s in suites:
        bad += s.report()
    print(f"time: {time.time() - t0:.1f}s")
    if bad:
        print(f"tok_parity_hf: FAIL ({bad} mismatches; seed {seed})")
        return 1
    print("tok_parity_hf: all identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
