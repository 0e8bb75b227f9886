"""hf_tok: an independent Hugging Face `tokenizers` reference built from a GGUF file.

pllm's tokenizer (tokenizer/) reads the same GGUF metadata; this module rebuilds the
tokenizer the way the model's published tokenizer.json is set up, using only the `gguf`
package (to read tokenizer.ggml.*) and `tokenizers` (to run it). Nothing here shares code
with pllm, so agreement between the two is evidence, not tautology.

Usage (importable; the module has no side effects on import):

    import sys; sys.path.insert(0, "tests/pyref")
    import hf_tok
    ref = hf_tok.load("~/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ref.encode("Hello <|im_start|>", add_special=False, parse_special=True)  -> [ids]
    ref.encode_bytes(b"caf\\xe9", ...)   invalid UTF-8: replaced as bytes.decode('utf-8',
                                         errors='replace') does, then encoded
    ref.decode(ids, skip_special=False) -> str
    ref.tokenizer                       the underlying tokenizers.Tokenizer
    ref.meta                            the GGUF fields it used (dict)
    meta = hf_tok.with_overrides(ref.meta, pre="qwen2", add_bos_token=None)
    hf_tok.write_tokenizer_gguf(dst, meta); hf_tok.from_meta(meta)
                                        a metadata-only GGUF and its reference with some
                                        fields replaced (None removes one): for testing other
                                        pre-tokenizers and BOS/EOS set-ups on a real vocab

SentencePiece family and Hugging Face files (second half of this module):
    from_hf_file(tokenizer.json)           the file as `tokenizers` itself loads it
    gpt2_from_vocab_merges(vocab, merges)  what transformers' GPT2TokenizerFast builds
    spm_meta(x.model)                      GGUF-style fields of a SentencePiece model (tokens,
                                           scores, types as llama.cpp's converter writes them)
    spm_from_meta(meta)                    the tokenizer transformers' LlamaConverter makes from
                                           such pieces (merges derived from the scores)
    write_spm_gguf(dst, meta)              a metadata-only GGUF "llama"
    llama2_json_from_phi3(j), llama2_gguf_meta(j)
                                           the Llama-2 tokenizer.json / GGUF fields from Phi-3's
                                           tokenizer.json (same 32000-piece base vocabulary)

Supported for GGUF: tokenizer.ggml.model == "gpt2" (byte-level BPE) with tokenizer.ggml.pre in
PRE_TOKENIZERS below (and "llama" through spm_from_meta). The set-up, per field:
  * model: BPE(vocab = {token: id} from tokenizer.ggml.tokens, merges = tokenizer.ggml.merges
    split at the space, no unk token, no dropout); ignore_merges for Llama-3 as its
    tokenizer.json has it.
  * pre-tokenizer: by name. "smollm" (SmolLM/SmolLM2's published tokenizer.json):
    Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
    use_regex=True)]; "gpt2": ByteLevel(use_regex=True); "llama-bpe"/"llama3" and "qwen2":
    Split(their regex, Isolated) then ByteLevel(use_regex=False).
  * decoder: ByteLevel.
  * added tokens: control tokens (token_type 3) as special AddedTokens, user-defined
    tokens (4) as non-special ones; neither normalized nor stripped.
  * post-processor: TemplateProcessing adding BOS/EOS when tokenizer.ggml.add_bos_token /
    add_eos_token say so (only used with add_special=True).
  * parse_special=False sets Tokenizer.encode_special_tokens (special tokens spelled in the
    text are then ordinary text).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# The regexes of the models' tokenizer.json files (run by tokenizers with Oniguruma).
LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS = ("smollm", "gpt2", "llama-bpe", "llama3", "qwen2")

CONTROL = 3
USER_DEFINED = 4


def default_model_path() -> str:
    """The default model's GGUF: $PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf."""
    home = os.environ.get("PLLM_HOME") or os.path.expanduser("~/.cache/pllm")
    return os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def read_gguf_tokenizer(path: str) -> dict:
    """The tokenizer.ggml.* fields of a GGUF file as plain Python values."""
    import gguf  # imported here so that importing this module needs nothing

    r = gguf.GGUFReader(path)
    out = {}
    for name, f in r.fields.items():
        if not name.startswith("tokenizer.ggml."):
            continue
        key = name[len("tokenizer.ggml."):]
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                out[key] = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                out[key] = [int(f.parts[i][0]) for i in f.data]
        elif t == gguf.GGUFValueType.STRING:
            out[key] = bytes(f.parts[-1]).decode("utf-8")
        else:
            v = f.parts[-1][0]
            out[key] = bool(v) if t == gguf.GGUFValueType.BOOL else int(v)
    return out


_ID_WRITERS = {
    "bos_token_id": "add_bos_token_id",
    "eos_token_id": "add_eos_token_id",
    "unknown_token_id": "add_unk_token_id",
    "padding_token_id": "add_pad_token_id",
    "eot_token_id": "add_eot_token_id",
    "add_bos_token": "add_add_bos_token",
    "add_eos_token": "add_add_eos_token",
    "add_space_prefix": "add_add_space_prefix",
}


def with_overrides(meta: dict, **overrides) -> dict:
    """A copy of meta with fields replaced by their short name (pre="gpt2"); None removes one."""
    out = dict(meta)
    for k, v in overrides.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def write_tokenizer_gguf(dst: str, meta: dict) -> None:
    """Write dst: a GGUF holding only the tokenizer.ggml.* fields in meta (as returned by
    read_gguf_tokenizer / with_overrides), no tensors."""
    import gguf

    w = gguf.GGUFWriter(dst, arch="llama")
    w.add_tokenizer_model(meta["model"])
    if "pre" in meta:
        w.add_tokenizer_pre(meta["pre"])
    w.add_token_list(meta["tokens"])
    if "token_type" in meta:
        w.add_token_types(meta["token_type"])
    if "merges" in meta:
        w.add_token_merges(meta["merges"])
    for k, fn in _ID_WRITERS.items():
        if k in meta:
            getattr(w, fn)(meta[k])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def _pre_tokenizer(name: str):
    from tokenizers import Regex, pre_tokenizers as pt

    if name == "smollm":
        return pt.Sequence([pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    if name == "gpt2":
        return pt.ByteLevel(add_prefix_space=False, use_regex=True)
    if name in ("llama-bpe", "llama3", "qwen2"):
        rx = QWEN2_RE if name == "qwen2" else LLAMA3_RE
        return pt.Sequence(
            [
                pt.Split(Regex(rx), behavior="isolated", invert=False),
                pt.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise ValueError(f"hf_tok: pre-tokenizer {name!r} has no reference set-up (have {PRE_TOKENIZERS})")


@dataclass
class Reference:
    tokenizer: object
    meta: dict
    add_bos: bool = False
    add_eos: bool = False
    _plain: object = field(default=None, repr=False)

    def encode(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        self.tokenizer.encode_special_tokens = not parse_special
        try:
            return self.tokenizer.encode(text, add_special_tokens=add_special).ids
        finally:
            self.tokenizer.encode_special_tokens = False

    def encode_bytes(self, data: bytes, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return self.encode(data.decode("utf-8", errors="replace"), add_special, parse_special)

    def decode(self, ids, skip_special: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)


def load(path: str | None = None) -> Reference:
    """Build the reference tokenizer for the GGUF at path (default: default_model_path())."""
    path = os.path.expanduser(path or default_model_path())
    if not os.path.exists(path):
        raise FileNotFoundError(f"hf_tok: {path} does not exist (run scripts/setup.sh to fetch the default model)")
    return from_meta(read_gguf_tokenizer(path))


def from_meta(meta: dict) -> Reference:
    """Build the reference tokenizer from tokenizer.ggml.* fields (read_gguf_tokenizer's dict)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    if meta.get("model") != "gpt2":
        raise ValueError(f"hf_tok: tokenizer.ggml.model = {meta.get('model')!r}: only 'gpt2' has a reference")
    tokens = meta["tokens"]
    types = meta.get("token_type", [1] * len(tokens))
    pre = meta.get("pre", "default")

    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    bpe = models.BPE(vocab, merges, ignore_merges=pre in ("llama-bpe", "llama3"))
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = _pre_tokenizer(pre)
    tk.decoder = decoders.ByteLevel()
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (CONTROL, USER_DEFINED):
            added.append(AddedToken(t, special=ty == CONTROL, normalized=False, lstrip=False, rstrip=False, single_word=False))
    # add_tokens keeps each token's special flag; ids come from the vocabulary
    tk.add_tokens(added)

    bos_id, eos_id = meta.get("bos_token_id"), meta.get("eos_token_id")
    add_bos = bool(meta.get("add_bos_token", pre in ("llama-bpe", "llama3")))
    add_eos = bool(meta.get("add_eos_token", False))
    if add_bos or add_eos:
        single, special = "$A", []
        if add_bos:
            single = f"{tokens[bos_id]} {single}"
            special.append((tokens[bos_id], bos_id))
        if add_eos:
            single = f"{single} {tokens[eos_id]}"
            special.append((tokens[eos_id], eos_id))
        tk.post_processor = processors.TemplateProcessing(single=single, special_tokens=special)
    return Reference(tokenizer=tk, meta=meta, add_bos=add_bos, add_eos=add_eos)


# ---------------------------------------------------------------------------------------
# Hugging Face files and SentencePiece models (the SentencePiece-style family)
# ---------------------------------------------------------------------------------------

NORMAL, UNKNOWN, UNUSED, BYTE = 1, 2, 5, 6


def from_hf_file(path: str) -> Reference:
    """The reference for a tokenizer.json: `tokenizers` loads the file itself."""
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(path)
    return Reference(tokenizer=tk, meta={"source": path})


def gpt2_from_vocab_merges(vocab_path: str, merges_path: str) -> Reference:
    """What transformers' GPT2TokenizerFast builds from vocab.json + merges.txt: BPE with the
    ByteLevel pre-tokenizer (no prefix space) and decoder, "<|endoftext|>" a special token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tk = Tokenizer(models.BPE.from_file(vocab_path, merges_path))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
    return Reference(tokenizer=tk, meta={"source": vocab_path})


def _pb_varint(b: bytes, i: int):
    x = shift = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return x, i


def _pb_fields(b: bytes):
    """(field, wire type, value) of one protobuf message (value: int, or bytes for type 2)."""
    i = 0
    while i < len(b):
        key, i = _pb_varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _pb_varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _pb_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield f, wt, v


def spm_meta(model_path: str) -> dict:
    """GGUF-style fields of a SentencePiece .model, as llama.cpp's converter writes them:
    tokens, scores and token types from the `sentencepiece` package (the piece types it does
    not expose, user-defined, come from the model proto), special ids from its trainer spec,
    add_space_prefix from the normalizer's add_dummy_prefix."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    raw = open(model_path, "rb").read()
    proto_types = [next((v for f, wt, v in _pb_fields(p) if f == 3), NORMAL)
                   for f, wt, p in _pb_fields(raw) if f == 1]
    add_dummy = True
    for f, wt, v in _pb_fields(raw):
        if f == 3:
            add_dummy = next((bool(x) for g, w, x in _pb_fields(v) if g == 3), True)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        ty = (CONTROL if sp.is_control(i) else UNKNOWN if sp.is_unknown(i) else UNUSED if sp.is_unused(i)
              else BYTE if sp.is_byte(i) else USER_DEFINED if proto_types[i] == USER_DEFINED else NORMAL)
        types.append(ty)
    return {"model": "llama", "tokens": tokens, "scores": scores, "token_type": types,
            "bos_token_id": sp.bos_id(), "eos_token_id": sp.eos_id(), "unknown_token_id": sp.unk_id(),
            "add_bos_token": True, "add_space_prefix": add_dummy}


def spm_merges(tokens, scores):
    """transformers' SentencePieceExtractor with scores: every split of every piece into two
    pieces, grouped by piece and ordered within it by (left id, right id); pieces ordered by
    score, highest first (a stable sort: equal scores keep vocabulary order)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, score in zip(tokens, scores):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    return vocab, [(a, b) for a, b, _ in merges]


def spm_from_meta(meta: dict) -> Reference:
    """The tokenizer transformers' LlamaConverter makes from SentencePiece pieces (legacy
    form): BPE(merges from scores, byte_fallback, unk, fuse_unk), normalizer Prepend("▁") +
    Replace(" ", "▁") (Prepend only with add_space_prefix), decoder Replace/ByteFallback/Fuse/
    Strip, control and unknown pieces special added tokens, user-defined ones plain added
    tokens, "<s> $A" when add_bos_token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    tokens, scores = meta["tokens"], list(meta["scores"])
    types = meta.get("token_type", [NORMAL] * len(tokens))
    # LlamaConverter.vocab(): the first three pieces get score 0
    for i in range(min(3, len(scores))):
        scores[i] = 0.0
    vocab, merges = spm_merges(tokens, scores)
    unk = tokens[meta["unknown_token_id"]] if meta.get("unknown_token_id", -1) >= 0 else None
    tk = Tokenizer(models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    prefix = meta.get("add_space_prefix", True)
    steps = [normalizers.Replace(" ", "▁")]
    if prefix:
        steps.insert(0, normalizers.Prepend("▁"))
    tk.normalizer = normalizers.Sequence(steps)
    decs = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        decs.append(decoders.Strip(" ", 1, 0))
    tk.decoder = decoders.Sequence(decs)
    added = [AddedToken(t, special=ty in (CONTROL, UNKNOWN), normalized=False)
             for t, ty in zip(tokens, types) if ty in (CONTROL, UNKNOWN, USER_DEFINED)]
    tk.add_tokens(added)
    bos = meta.get("bos_token_id", -1)
    if meta.get("add_bos_token", True) and bos >= 0:
        tk.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A",
                                                          special_tokens=[(tokens[bos], bos)])
    return Reference(tokenizer=tk, meta=meta)


def write_spm_gguf(dst: str, meta: dict) -> None:
    """A metadata-only GGUF with tokenizer.ggml.model = "llama" from spm_meta-style fields."""
    import gguf

    w = gguf.GGUFWriter(dst, arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(meta["tokens"])
    w.add_token_scores(meta["scores"])
    w.add_token_types(meta["token_type"])
    for k, fn in _ID_WRITERS.items():
        if k in meta:
            getattr(w, fn)(meta[k])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def llama2_json_from_phi3(phi3_json: dict) -> dict:
    """The Llama-2 / TinyLlama tokenizer.json from Phi-3-mini's (same 32000-piece base vocab
    and merges): only <unk>, <s>, </s> as added tokens, all special, no stripping; "<s> $A"."""
    j = dict(phi3_json)  # shares the model section; only the top level changes
    j["added_tokens"] = [dict(id=i, content=c, single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=True)
                         for i, c in ((0, "<unk>"), (1, "<s>"), (2, "</s>"))]
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    return j


def llama2_gguf_meta(llama2_json: dict) -> dict:
    """GGUF "llama" fields for the Llama-2 vocabulary of a tokenizer.json, with scores as the
    original tokenizer.model has them: a merged piece scores -(rank of the first merge that
    makes it), except the pieces of two or more "▁", which all score -1e9 (Llama-2's
    tokenizer.model ties them there); other pieces 0 (specials, bytes) or below every merge
    (characters)."""
    m = llama2_json["model"]
    vocab = m["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    scores = [None] * len(tokens)
    for rank, mg in enumerate(m["merges"]):
        a, b = mg.split(" ") if isinstance(mg, str) else mg
        i = vocab[a + b]
        if scores[i] is None:
            scores[i] = -float(rank)
    types = []
    for i, t in enumerate(tokens):
        if i == 0:
            types.append(UNKNOWN)
        elif i in (1, 2):
            types.append(CONTROL)
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(BYTE)
        else:
            types.append(NORMAL)
        if scores[i] is None:
            scores[i] = 0.0 if types[-1] != NORMAL else -float(len(m["merges"]) + i)
        if len(t) >= 2 and set(t) == {"▁"}:
            scores[i] = -1e9
    return {"model": "llama", "tokens": tokens, "scores": scores, "token_type": types,
            "bos_token_id": 1, "eos_token_id": 2, "unknown_token_id": 0, "add_bos_token": True,
            "add_space_prefix": True}
