#!/usr/bin/env python3
"""tok_parity: pllm's tokenizer against Hugging Face `tokenizers`, byte for byte.

    tok_parity.py TOK_TOOL [MODEL.gguf]

The reference is tests/pyref/hf_tok.py, built independently from the same GGUF. Corpus:
  * every ShareGPT prompt (first human turn) of $PLLM_SHARED_DATA/sharegpt/ShareGPT_V3_filtered_1000.json
  * every turn of $PLLM_SHARED_DATA/mtbench/mt_bench_question.jsonl
  * the hard cases below (whitespace, digits, contractions, scripts, emoji, code, URLs,
    spelled special tokens, control characters, invalid UTF-8)
  * fresh random strings mixing all of those (seed printed; PLLM_TEST_SEED repeats a run)
Invalid UTF-8 goes to tok_tool as raw bytes; the reference encodes
bytes.decode('utf-8', errors='replace') of the same bytes (pllm's documented convention).

Checks, per case: encode ids identical; decode(ids) and decode(ids, skip_special) identical
to HF's; the incremental detokenizer's concatenated output identical to the full decode
(both modes), holding back at most 3 bytes. Plus random id sequences (split UTF-8, special
tokens, invalid byte runs) for decode/detok parity. 100% is required: any mismatch fails
the test and the first ones are printed with their details.
"""

import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "pyref"))
import hf_tok  # noqa: E402

HARD_CASES = [
    # whitespace
    "", " ", "  ", "a  b", "a   b", "  leading", "trailing  ", "trailing \n", "\t\tx", "x\t\t", "\n", "\n\n\n",
    "a\r\nb\r\n", "\r\n\r\n  \r\n", " \n \n ", "\r", "\u00a0\u00a0x", "\u3000x\u3000", "\u2028a\u2029", "\x0b\x0cx",
    "x \t \n y", "    def f():\n        return 1\n", "a" + " " * 50 + "b", " " * 1000, "\n" * 300, "\t \t" * 100,
    "word \n\n\n  next", "end with spaces   ", "   ", " \t", "\u1680\u2000\u2001\u200a\u202f\u205f x",
    # digits and numbers
    "0", "1234567890", "3.14159265358979", "1,000,000", "-42", "1e-10", "0x1F", "٣٤٥", "²³", "Ⅻ ⅻ", "①②", "½ ⅕",
    "12abc34", "abc123def", "v1.2.3", "2024-01-01T12:00:00Z", "9" * 500, " 1 2 3", "(123)", "１２３", "$19.99",
    "10%", "1st 2nd 3rd 4th", "𝟘𝟙𝟚", "৩৪", "१२३",
    # contractions, both cases
    "don't", "DON'T", "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "he'll", "HE'LL", "she'd", "SHE'D",
    "it's", "IT'S", "'s", "'S", "''s", "rock'n'roll", "o'clock", "it\u2019s curly", "can't've", "y'all'd've",
    "'", "' s", "1's", " 's", "'ll'd", "'Re 'vE 'lL",
    # scripts
    "中文字符测试，标点。", "日本語のテキスト、カタカナ", "한국어 텍스트입니다", "Hello世界123", "עברית", "العربية",
    "ภาษาไทย", "Ελληνικά", "Кириллица", "हिन्दी", "ქართული", "Tiếng Việt", "ǅungla", "ß ẞ ﬁ",
    # emoji
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇫🇷", "1️⃣", "❤️", "🧑🏿‍🚀", "smile 😀😀😀 ok", "🙂" * 200,
    # combining marks and format characters
    "e\u0301", "n\u0303o", "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d", "\u0915\u094d\u0937",
    "\u200b\u200c\u200d", "\ufeffBOM", "soft\u00adhyphen", "\x01\x02\x1b[31mred\x1b[0m", "\x7f\x00x", "\u0085x",
    "\x1c\x1d\x1e\x1f", "\ufffd", "\U0010ffff", "\ue000",
    # code
    'def main(argv):\n    for i in range(10):\n        print(f"{i:>3}")  # comment\n    return 0\n',
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "const x = (a, b) => a ?? b;\nconsole.log(`tmpl ${x}`);",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![]; Ok(()) }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "for f in *.txt; do echo \"$f\" | tr a-z A-Z; done && ls -la ~/",
    "<div class=\"x\"><a href='/y'>link</a></div>",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    r"^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\d{1,3}\.\w+$",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b**=6;c//=7;d<<=8;e>>=9",
    # URLs
    "https://example.com/path?q=1&b=2#frag", "mailto:a@b.co", "file:///tmp/x.txt", "www.example.org:8080/a_b-c",
    # special tokens spelled in text, whole and partial
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_sta", "<|im_start", "im_start|>",
    "<|im_start|><|im_end|>", "<<|im_start|>>", " <|im_end|> ", "<|endoftext|>", "<repo_name>x<file_sep>y",
    "<|im_start|", "<|IM_START|>", "<empty_output>", "<jupyter_code>print(1)", "a<|endoftext|>b<|endoftext|>",
    "<|im_start|>  <|im_end|>\n\n", "<|<|im_end|>|>", "text<|im_end",
    "testing the thing <reponame>x ĠĠ Ġthe", "singing  in\u0120the rain",
    # the byte-level alphabet itself
    "Ġ", "ĠĠ", "Ċ", "\\n", "Ã©", "âĢĻ",
    # long pieces (the heap path)
    "a" * 5000, "Supercalifragilisticexpialidocious" * 50, "x" * 3 + "y" * 3000, ".-" * 2000,
]

# Invalid UTF-8 (raw bytes)
HARD_BYTES = [
    b"\xff", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\x80",
    b"\xf5\x80\x80\x80", b"abc\x80def", b"\xfe\xff", b"caf\xe9", b"\xf4\x90\x80\x80", b"<|im_\xffstart|>",
    b"<|im_start|>\xff<|im_end|>", b"a\x00b", b"\xf0\x9f\x98\x80\xf0\x9f\x98", b"\xe0\x80\x80", b"\xe0\xa0",
    b"12\xff34", b"don\xe2\x80t", b" \xc2 \xc2\xa0 ", b"\x80" * 50, b"\xf0\x90\x80" * 20, b"x\xed\x9f\xbf\xed\xa0",
]

POOLS = [
    list("abcdefghijklmnopqrstuvwxyz"), list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), list("0123456789"),
    [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\x0b"],
    list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"), ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'LL"],
    list("中文字符日本語한국어"), ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "❤️", "\u200d", "\ufe0f"],
    ["\u0301", "\u0308", "\u0324", "\u094d"], ["²", "½", "٣", "१", "Ⅻ", "𝟘"],
    ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_sta", "<|", "|>", "<file_sep>", "<repo"],
    list("éèàüößçñøåæœ"), ["Ġ", "Ċ", "Ã", "ĉ"], ["\x00", "\x01", "\x1b", "\x7f", "\u0085", "\ufeff"],
]
BAD_BYTES = [b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf", b"\x80", b"\xf8"]


def random_case(rng: random.Random) -> bytes | str:
    if rng.random() < 0.1:  # pure random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    parts = []
    for _ in range(rng.randint(1, 60)):
        pool = rng.choice(POOLS)
        parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
    s = "".join(parts)
    if rng.random() < 0.25:
        b = s.encode()
        for _ in range(rng.randint(1, 4)):
            k = rng.randint(0, len(b))
            b = b[:k] + rng.choice(BAD_BYTES) + b[k:]
        return b
    return s


def load_corpus(data: str):
    cases = []
    with open(os.path.join(data, "sharegpt", "ShareGPT_V3_filtered_1000.json"), encoding="utf-8") as f:
        for rec in json.load(f):
            conv = rec.get("conversations") or []
            human = next((c["value"] for c in conv if c.get("from") == "human"), None)
            if human is not None:
                cases.append(("sharegpt", human))
    with open(os.path.join(data, "mtbench", "mt_bench_question.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                for turn in json.loads(line)["turns"]:
                    cases.append(("mtbench", turn))
    return cases


def make_dec_cases(ref, rng, n):
    """Random id sequences: byte tokens (lead and continuation bytes, so characters split
    across tokens and invalid runs), special tokens, and anything else."""
    n_vocab = len(ref.meta["tokens"])
    byte_ids = [ref.tokenizer.token_to_id(hf_tok_byte_char(b)) for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    special_ids = [i for i, ty in enumerate(ref.meta.get("token_type", [])) if ty == hf_tok.CONTROL] or [0]
    cases = []
    for _ in range(n):
        ids = []
        for _ in range(rng.randint(1, 40)):
            r = rng.random()
            ids.append(rng.choice(byte_ids) if r < 0.5 else rng.choice(special_ids) if r < 0.6 else rng.randrange(n_vocab))
        cases.append(ids)
    return cases


class Suite:
    """One model (GGUF) against its reference: runs tok_tool once over all cases."""

    def __init__(self, name):
        self.name = name
        self.counts = {k: [0, 0] for k in ("encode", "decode", "decode_skip", "detok", "detok_skip", "pending")}
        self.groups = {}
        self.failures = []
        self.max_pending = 3

    def check(self, kind, ok, detail):
        self.counts[kind][1] += 1
        if ok:
            self.counts[kind][0] += 1
        elif len(self.failures) < 15:
            self.failures.append(f"{self.name}: {kind}: {detail}")

    def check_decodes(self, ref, ids, out, label):
        want = ref.decode(ids, skip_special=False)
        want_skip = ref.decode(ids, skip_special=True)
        self.check("decode", out.get("decoded") == want, f"{label}: got {out.get('decoded')!r}, want {want!r}")
        self.check("decode_skip", out.get("decoded_skip") == want_skip,
                   f"{label}: got {out.get('decoded_skip')!r}, want {want_skip!r}")
        self.check("detok", out.get("detok") == want, f"{label}: got {out.get('detok')!r}, want {want!r}")
        self.check("detok_skip", out.get("detok_skip") == want_skip,
                   f"{label}: got {out.get('detok_skip')!r}, want {want_skip!r}")
        self.check("pending", out.get("detok_max_pending", 999) <= self.max_pending,
                   f"{label}: held back {out.get('detok_max_pending')}")

    def run(self, tool, model, ref, enc_cases, dec_cases):
        lines = []
        for g, s, add, parse in enc_cases:
            rec = {"add_special": add, "parse_special": parse}
            if isinstance(s, bytes):
                rec["bytes"] = list(s)
            else:
                rec["text"] = s
            lines.append(json.dumps(rec))
        lines += [json.dumps({"ids": ids}) for ids in dec_cases]
        argv = [tool] + (list(model) if isinstance(model, (list, tuple)) else [model])
        proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
        outs = [json.loads(x) for x in proc.stdout.splitlines()]
        if len(outs) != len(lines):
            self.check("encode", False, f"{tool} exited {proc.returncode}, {len(lines)} lines in, {len(outs)} out: "
                       f"{proc.stderr[-2000:]}")
            return
        for (g, s, add, parse), out in zip(enc_cases, outs):
            label = f"[{g} add={add} parse={parse}] {s[:120]!r}"
            if "error" in out:
                self.check("encode", False, f"{label}: tok_tool error {out['error']}")
                continue
            want = ref.encode_bytes(s, add, parse) if isinstance(s, bytes) else ref.encode(s, add, parse)
            got = out["ids"]
            ok = got == want
            gc = self.groups.setdefault(g, [0, 0])
            gc[0] += ok
            gc[1] += 1
            if ok:
                self.check("encode", True, "")
            else:
                k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
                ctx = lambda ids: [ref.tokenizer.id_to_token(i) for i in ids[max(0, k - 3):k + 4]]  # noqa: E731
                self.check("encode", False, f"{label}: first difference at {k}: got {ctx(got)} want {ctx(want)}")
            self.check_decodes(ref, got, out, label)
        for ids, out in zip(dec_cases, outs[len(enc_cases):]):
            if "error" in out:
                self.check("decode", False, f"ids {ids}: tok_tool error {out['error']}")
                continue
            self.check_decodes(ref, ids, out, f"ids {ids}")

    def report(self, max_pending=3):
        c = self.counts
        print(f"{self.name}: " + ", ".join(f"{ok}/{n} {k} identical" for k, (ok, n) in c.items() if k != "pending")
              + f"; detok held back <= {self.max_pending} bytes in {c['pending'][0]}/{c['pending'][1]}")
        print(f"{self.name}: encode by group: " + ", ".join(f"{g} {ok}/{n}" for g, (ok, n) in self.groups.items()))
        return sum(n - ok for ok, n in c.values())


# Pre-tokenizer and BOS/EOS variants checked on the default model's vocabulary (a
# metadata-only GGUF with the field replaced; None removes it, so the family default applies).
VARIANTS = [
    ("pre=gpt2", {"pre": "gpt2"}),
    ("pre=llama-bpe (no add_bos key: BOS by default, ignore_merges)", {"pre": "llama-bpe", "add_bos_token": None}),
    ("pre=qwen2", {"pre": "qwen2"}),
    ("smollm add_bos+add_eos", {"add_bos_token": True, "add_eos_token": True}),
    ("user-defined tokens", "user-defined"),
]
# tokens re-typed as user-defined (matched verbatim in text even with parse_special off,
# never skipped): a control token, a word piece and a byte-level whitespace token
USER_DEFINED_TOKENS = ("<reponame>", "ing", "ĠĠ", "Ġthe")


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: tok_parity.py TOK_TOOL [MODEL.gguf]", file=sys.stderr)
        return 2
    tool = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else hf_tok.default_model_path()
    if not os.path.exists(model):
        print(f"tok_parity: FAIL: model {model} is missing (set PLLM_HOME or run scripts/setup.sh)", file=sys.stderr)
        return 1
    data = os.environ.get("PLLM_SHARED_DATA") or os.path.join(HERE, "..", "..", "shared", "data")
    tmp = os.environ.get("PLLM_TEST_TMP") or "/tmp"
    seed = int(os.environ.get("PLLM_TEST_SEED") or time.time_ns() % (1 << 32))
    rng = random.Random(seed)
    print(f"tok_parity: model {model}, seed {seed} (PLLM_TEST_SEED={seed} repeats this run)")
    t0 = time.time()

    corpus = load_corpus(data)
    hard = [("hard", s) for s in HARD_CASES] + [("hard-bytes", b) for b in HARD_BYTES]
    opts = ((False, True), (False, False), (True, True))

    # the default model: the whole corpus, hard cases and fresh random strings
    ref = hf_tok.load(model)
    enc = [(g, s, False, True) for g, s in corpus]
    enc += [(g, s, a, p) for g, s in hard + [("random", random_case(rng)) for _ in range(400)] for a, p in opts]
    main_suite = Suite("default model")
    main_suite.run(tool, model, ref, enc, make_dec_cases(ref, rng, 400))
    suites = [main_suite]

    # variants: hard cases, fresh random strings and part of the corpus
    for name, over in VARIANTS:
        path = os.path.join(tmp, f"tok_parity_variant_{len(suites)}.gguf")
        if over == "user-defined":
            types = list(ref.meta["token_type"])
            for tok in USER_DEFINED_TOKENS:
                types[ref.meta["tokens"].index(tok)] = hf_tok.USER_DEFINED
            over = {"token_type": types}
        vmeta = hf_tok.with_overrides(ref.meta, **over)
        hf_tok.write_tokenizer_gguf(path, vmeta)
        vref = hf_tok.from_meta(vmeta)
        enc = [(g, s, False, True) for g, s in rng.sample(corpus, 200)]
        enc += [(g, s, a, p) for g, s in hard + [("random", random_case(rng)) for _ in range(100)] for a, p in opts]
        suite = Suite(name)
        suite.run(tool, path, vref, enc, make_dec_cases(vref, rng, 50))
        suites.append(suite)
        os.unlink(path)

    bad = 0
    for s in suites:
        for f in s.failures:
            print("MISMATCH", f)
    for s in suites:
        bad += s.report()
    print(f"time: {time.time() - t0:.1f}s")
    if bad:
        print(f"tok_parity: FAIL ({bad} mismatches; seed {seed})")
        return 1
    print("tok_parity: all identical")
    return 0


def hf_tok_byte_char(b: int) -> str:
    """GPT-2's bytes_to_unicode for one byte (the reference's own copy)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in printable].index(b))


if __name__ == "__main__":
    sys.exit(main())
