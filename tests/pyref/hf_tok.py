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

Supported: tokenizer.ggml.model == "gpt2" (byte-level BPE) with tokenizer.ggml.pre in
PRE_TOKENIZERS below. The set-up, per field:
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
