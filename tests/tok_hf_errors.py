#!/usr/bin/env python3
"""tok_hf_errors: the Hugging Face / SentencePiece builders on malformed and unsupported files,
and the facts (BOS/EOS, stop ids, special ids, add_special) they derive from good ones.

    tok_hf_errors.py TOK_TOOL

Every malformed or unsupported file must be refused (tok_tool exits 1) with a message naming
the file and the field or construct; never a silently different tokenizer. The good files
are the shared ones ($PLLM_SHARED_DATA/tokenizers) and small variants written here.
"""

import copy
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "pyref"))
import hf_tok  # noqa: E402

failures = []
n_checks = 0


def run(tool, args, lines=('{"info": true}',)):
    p = subprocess.run([tool] + args, input="\n".join(lines) + "\n", capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    global n_checks
    n_checks += 1
    if not cond:
        failures.append(what)


def expect_error(tool, args, *needles, label):
    rc, out, err = run(tool, args)
    ok = rc == 1 and all(n in err for n in needles)
    check(ok, f"{label}: want exit 1 and {needles} in the message; got exit {rc}: {err.strip()[:400]}")


def main() -> int:
    tool = sys.argv[1]
    data = os.environ.get("PLLM_SHARED_DATA") or os.path.join(HERE, "..", "..", "shared", "data")
    tokdir = os.path.join(data, "tokenizers")
    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP") or "/tmp", f"tok_hf_errors_{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    phi3 = os.path.join(tokdir, "phi-3-mini", "tokenizer.json")
    phi3_cfg = os.path.join(tokdir, "phi-3-mini", "tokenizer_config.json")
    pj = json.load(open(phi3, encoding="utf-8"))

    def write(name, obj, raw=None):
        path = os.path.join(tmp, name)
        with open(path, "w" if raw is None or isinstance(raw, str) else "wb") as f:
            if raw is not None:
                f.write(raw)
            else:
                json.dump(obj, f, ensure_ascii=False)
        return path

    def variant(name, edit):
        j = copy.deepcopy(pj)
        edit(j)
        return write(name, j)

    # ---- tokenizer.json: malformed ----
    p = write("bad.json", None, raw='{"model": {"type": "BPE", "vocab": {"a": 0}, ')
    expect_error(tool, ["--hf", p], p, "line", label="truncated JSON")
    expect_error(tool, ["--hf", os.path.join(tmp, "missing.json")], "missing.json", "cannot open", label="missing file")
    p = write("nomodel.json", {"version": "1.0"})
    expect_error(tool, ["--hf", p], p, "model", label="no model")
    p = variant("merge_bad.json", lambda j: j["model"]["merges"].__setitem__(5, "abc"))
    expect_error(tool, ["--hf", p], p, "model.merges[5]", label="merge without a space")
    p = variant("merge_oov.json", lambda j: j["model"]["merges"].__setitem__(7, "zz qq"))
    expect_error(tool, ["--hf", p], p, "model.merges[7]", "not in the vocabulary", label="merge of unknown tokens")
    p = variant("hole.json", lambda j: j["model"]["vocab"].pop("▁the"))
    expect_error(tool, ["--hf", p], p, "token id 278 has no token", label="vocabulary hole")
    p = variant("dup_added.json", lambda j: j["added_tokens"].append(
        dict(id=40000, content="▁the", special=False, normalized=False, lstrip=False, rstrip=False, single_word=False)))
    expect_error(tool, ["--hf", p], p, "▁the", "model.vocab has it as 278", label="added token re-id")
    p = variant("unk_oov.json", lambda j: j["model"].__setitem__("unk_token", "<nope>"))
    expect_error(tool, ["--hf", p], p, "model.unk_token", "<nope>", label="unk not a token")

    # ---- tokenizer.json: unsupported constructs, each named ----
    cases = [
        ("unigram.json", lambda j: j["model"].__setitem__("type", "Unigram"), ("model type", "Unigram")),
        ("dropout.json", lambda j: j["model"].__setitem__("dropout", 0.1), ("model.dropout",)),
        ("csp.json", lambda j: j["model"].__setitem__("continuing_subword_prefix", "##"),
         ("continuing_subword_prefix",)),
        ("bert_norm.json", lambda j: j.__setitem__("normalizer", {"type": "BertNormalizer"}),
         ("normalizer", "BertNormalizer")),
        ("precompiled.json", lambda j: j.__setitem__("normalizer", {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": "AAAA"}]}), ("normalizer", "Precompiled")),
        ("ws_pre.json", lambda j: j.__setitem__("pre_tokenizer", {"type": "Whitespace"}),
         ("pre_tokenizer", "Whitespace")),
        ("bad_regex.json", lambda j: j.__setitem__("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "(a"},
                                                                      "behavior": "Isolated", "invert": False}),
         ("pre-tokenizer regex", "(a")),
        ("after_bl.json", lambda j: j.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            {"type": "Digits", "individual_digits": True}]}), ("after ByteLevel",)),
        ("no_dec.json", lambda j: j.__setitem__("decoder", None), ("no decoder",)),
        ("wp_dec.json", lambda j: j.__setitem__("decoder", {"type": "WordPiece", "prefix": "##"}),
         ("decoder", "WordPiece")),
        ("strip_first.json", lambda j: j.__setitem__("decoder", {"type": "Sequence", "decoders": [
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}, {"type": "Fuse"}]}), ("Strip", "position 0")),
        ("strip_stop.json", lambda j: j["decoder"]["decoders"][3].__setitem__("stop", 1), ("Strip",)),
        ("post.json", lambda j: j.__setitem__("post_processor", {"type": "Mystery"}), ("post_processor", "Mystery")),
        ("meta_norm.json", lambda j: (j.__setitem__("decoder", {"type": "Metaspace", "replacement": "▁",
                                                                 "prepend_scheme": "always"}),
                                      j["added_tokens"].append(dict(id=j["model"]["vocab"]["hello"], content="hello",
                                                                    special=False, normalized=True, lstrip=False,
                                                                    rstrip=False, single_word=False))),
         ("normalized to other text", "Metaspace decoder")),
        ("mixed.json", lambda j: j.__setitem__("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": False}),
         ("ByteLevel pre-tokenizer with a non-ByteLevel decoder",)),
    ]
    for name, edit, needles in cases:
        p = variant(name, edit)
        expect_error(tool, ["--hf", p], p, *needles, label=name)

    # ---- tokenizer_config.json ----
    cfg = json.load(open(phi3_cfg, encoding="utf-8"))
    c = dict(cfg, bos_token="<nope>")
    pc = write("cfg_bos.json", c)
    expect_error(tool, ["--hf", phi3, pc], pc, "bos_token", "<nope>", label="config bos not a token")
    c = dict(cfg, add_eos_token=True)
    c.pop("eos_token")
    pc = write("cfg_eos.json", c)
    expect_error(tool, ["--hf", phi3, pc], pc, "add_eos_token", label="add_eos without eos")
    pc = write("cfg_bad.json", None, raw="{")
    expect_error(tool, ["--hf", phi3, pc], pc, "line", label="config not JSON")

    # ---- vocab.json + merges.txt, .model, directories ----
    vocab = os.path.join(tokdir, "gpt2", "vocab.json")
    pm = write("merges.txt", None, raw="#version: 0.2\nĠ t\nĠ t h\n")
    expect_error(tool, ["--vocab-merges", vocab, pm], pm, "line 3", label="merges.txt line with two spaces")
    pm = write("merges2.txt", None, raw="#version: 0.2\nĠ t\nzz qq\n")
    expect_error(tool, ["--vocab-merges", vocab, pm], "merges", "not in the vocabulary", label="merges.txt oov")
    mpath = os.path.join(tokdir, "mistral-7b-instruct", "tokenizer.model.v1")
    raw = open(mpath, "rb").read()
    p = write("trunc.model", None, raw=raw[:1000])
    expect_error(tool, ["--spm", p], p, "truncated", label="truncated .model")
    # a Unigram model: trainer_spec {model_type: 1} after one piece
    piece = b"\x0a\x05" + b"\x0a\x03abc"
    p = write("unigram.model", None, raw=piece + b"\x12\x02\x18\x01")
    expect_error(tool, ["--spm", p], p, "model_type = 1", label="Unigram .model")
    p = write("charsmap.model", None, raw=piece + b"\x12\x02\x18\x02" + b"\x1a\x0c\x0a\x08nmt_nfkc\x12\x00")
    expect_error(tool, ["--spm", p], p, "normalizer_spec", "nmt_nfkc", label="nmt_nfkc .model")
    empty_dir = os.path.join(tmp, "emptydir")
    os.makedirs(empty_dir, exist_ok=True)
    expect_error(tool, ["--dir", empty_dir], empty_dir, "no tokenizer.json", label="empty directory")

    # ---- GGUF llama: scores of the wrong length ----
    meta = hf_tok.spm_meta(mpath)
    bad = dict(meta, scores=meta["scores"][:-1])
    gp = os.path.join(tmp, "short_scores.gguf")
    hf_tok.write_spm_gguf(gp, bad)
    expect_error(tool, [gp], gp, "tokenizer.ggml.scores", label="GGUF scores length")

    # ---- facts from good files ----
    def facts(args, texts=()):
        rc, out, err = run(tool, args, ['{"info": true}'] + [json.dumps({"text": t, "add_special": True})
                                                               for t in texts])
        check(rc == 0, f"{args}: exit {rc}: {err[-300:]}")
        lines = [json.loads(x) for x in out.splitlines()]
        return lines[0] if lines else {}, [x.get("ids") for x in lines[1:]]

    info, enc = facts(["--hf", phi3, phi3_cfg], ["Hi"])
    check(info.get("bos") == 1 and info.get("eos") == 32000, f"phi-3 bos/eos: {info}")
    check({32000, 32007} <= set(info.get("stop_ids", [])), f"phi-3 stop ids: {info.get('stop_ids')}")
    check(2 not in info.get("special_ids", []) and 32007 in info.get("special_ids", []),
          "phi-3: </s> is not special there, <|end|> is")
    check(enc == [[6324]], f"phi-3: add_bos_token false in its config: {enc}")
    check("cut at word starts" in info.get("describe", ""), f"phi-3 describe: {info.get('describe')}")
    info, enc = facts(["--hf", phi3], ["Hi"])
    check(info.get("bos") == -1 and enc == [[6324]], f"phi-3 without config: {info} {enc}")
    p = write("llama2_noconfig.json", hf_tok.llama2_json_from_phi3(pj))
    info, enc = facts(["--hf", p], ["Hi"])
    check(info.get("bos") == 1 and info.get("eos") == -1 and enc == [[1, 6324]],
          f"llama-2 without config: BOS from the template: {info} {enc}")
    d = os.path.join(tmp, "llama2dir")
    os.makedirs(d, exist_ok=True)
    write(os.path.join("llama2dir", "tokenizer.json"), hf_tok.llama2_json_from_phi3(pj))
    write(os.path.join("llama2dir", "tokenizer_config.json"),
          {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": True})
    info, enc = facts(["--dir", d], ["Hi"])
    check(info.get("bos") == 1 and info.get("eos") == 2 and enc == [[1, 6324, 2]],
          f"llama-2 dir with add_eos_token: {info} {enc}")
    info, enc = facts(["--spm", mpath], ["Hi"])
    check(info.get("bos") == 1 and info.get("eos") == 2 and enc == [[1, 15359]] and 2 in info.get("stop_ids", []),
          f"mistral .model: {info} {enc}")
    vm = ["--vocab-merges", vocab, os.path.join(tokdir, "gpt2", "merges.txt")]
    info, enc = facts(vm, ["Hi"])
    check(info.get("bos") == 50256 and info.get("eos") == 50256 and enc == [[17250]], f"gpt2: {info} {enc}")

    for fn in sorted(os.listdir(tmp), reverse=True):
        path = os.path.join(tmp, fn)
        if os.path.isdir(path):
            for g in os.listdir(path):
                os.unlink(os.path.join(path, g))
            os.rmdir(path)
        else:
            os.unlink(path)
    os.rmdir(tmp)
    for f in failures:
        print("FAIL", f)
    print(f"tok_hf_errors: {n_checks - len(failures)}/{n_checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
