#!/usr/bin/env python3
"""tok_bench: pllm's tokenizer encode speed against Hugging Face tokenizers, one thread each,
side by side for every tokenizer family, measured in one run.

    python3 bench/tok_bench.py [--bench build/bench/tok_bench] [--reps 5] [--only NAME]

Tokenizers (the same files on both sides):
  smollm2 (GGUF)       byte-level BPE, Digits + ByteLevel pre-tokenizer (the default model)
  gpt2 (vocab+merges)  byte-level BPE, GPT-2 regex
  phi-3 (json)         SentencePiece-style BPE by merge rank, byte fallback, no pre-tokenizer
  mistral v1 (.model)  SentencePiece BPE by piece score (reference: its transformers conversion)
  llama-2 (GGUF llama) SentencePiece BPE by score from GGUF metadata (written here)
Corpus: the first human turn of every ShareGPT prompt in
$PLLM_SHARED_DATA/sharegpt/ShareGPT_V3_filtered_1000.json. pllm runs in bench/tok_bench (C,
in-process timing, add_special off). HF runs single-threaded (RAYON_NUM_THREADS=1,
TOKENIZERS_PARALLELISM=false) both as a Python loop of encode() calls and as one
encode_batch() call (no per-call Python overhead). Best of --reps for each. Token counts must
agree. Prints MB/s per side and the ratio pllm / HF (> 1: pllm faster).
"""

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pyref"))
import hf_tok  # noqa: E402


def families(data: str, tmp: str):
    """(name, pllm tok_bench arguments, reference factory) per tokenizer."""
    tok = os.path.join(data, "tokenizers")
    phi3 = os.path.join(tok, "phi-3-mini", "tokenizer.json")
    vocab, merges = os.path.join(tok, "gpt2", "vocab.json"), os.path.join(tok, "gpt2", "merges.txt")
    mistral = os.path.join(tok, "mistral-7b-instruct", "tokenizer.model.v1")
    llama_gguf = os.path.join(tmp, "tok_bench_llama2.gguf")

    def llama2_ref():
        meta = hf_tok.llama2_gguf_meta(hf_tok.llama2_json_from_phi3(json.load(open(phi3, encoding="utf-8"))))
        hf_tok.write_spm_gguf(llama_gguf, meta)
        return hf_tok.spm_from_meta(meta)

    return [
        ("smollm2 (GGUF, byte-level)", [hf_tok.default_model_path()], lambda: hf_tok.load()),
        ("gpt2 (vocab+merges, byte-level)", ["--vocab-merges", vocab, merges],
         lambda: hf_tok.gpt2_from_vocab_merges(vocab, merges)),
        ("phi-3 (tokenizer.json, SPM by rank)", ["--hf", phi3], lambda: hf_tok.from_hf_file(phi3)),
        ("mistral v1 (.model, SPM by score)", ["--spm", mistral],
         lambda: hf_tok.spm_from_meta(hf_tok.spm_meta(mistral))),
        ("llama-2 (GGUF llama, SPM by score)", [llama_gguf], llama2_ref),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build = os.environ.get("PLLM_BUILD") or os.path.join(HERE, "..", "build")
    ap.add_argument("--bench", default=os.path.join(build, "bench", "tok_bench"))
    ap.add_argument("--data", default=os.environ.get("PLLM_SHARED_DATA") or os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default=None, help="run the families whose name contains this")
    args = ap.parse_args()

    with open(os.path.join(args.data, "sharegpt", "ShareGPT_V3_filtered_1000.json"), encoding="utf-8") as f:
        texts = []
        for rec in json.load(f):
            human = next((c["value"] for c in rec.get("conversations", []) if c.get("from") == "human"), None)
            if human is not None:
                texts.append(human)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    tmp = tempfile.mkdtemp(prefix="tok_bench_")
    corpus = os.path.join(tmp, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as tf:
        for t in texts:
            tf.write(json.dumps({"text": t}) + "\n")

    print(f"corpus: {len(texts)} ShareGPT prompts, {mb:.2f} MB; best of {args.reps}; 1 thread each; add_special off")
    print(f"{'tokenizer':38} {'tokens':>8} {'pllm MB/s':>10} {'HF loop':>9} {'HF batch':>9} "
          f"{'vs loop':>8} {'vs batch':>9}")
    rc = 0
    try:
        for name, targs, make_ref in families(args.data, tmp):
            if args.only and args.only not in name:
                continue
            ref = make_ref()
            out = subprocess.run([args.bench, corpus, str(args.reps)] + targs, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{name}: tok_bench failed: {out.stderr.strip()}", file=sys.stderr)
                rc = 1
                continue
            c = json.loads(out.stdout)
            tk = ref.tokenizer
            best_loop = best_batch = 1e30
            n_loop = n_batch = 0
            for _ in range(args.reps):
                t0 = time.perf_counter()
                n_loop = sum(len(tk.encode(t, add_special_tokens=False).ids) for t in texts)
                best_loop = min(best_loop, time.perf_counter() - t0)
                t0 = time.perf_counter()
                n_batch = sum(len(e.ids) for e in tk.encode_batch(texts, add_special_tokens=False))
                best_batch = min(best_batch, time.perf_counter() - t0)
            if not (c["tokens"] == n_loop == n_batch):
                print(f"{name}: token counts differ: pllm {c['tokens']}, HF {n_loop} / {n_batch}", file=sys.stderr)
                rc = 1
            print(f"{name:38} {c['tokens']:8d} {mb / c['seconds']:10.2f} {mb / best_loop:9.2f} {mb / best_batch:9.2f} "
                  f"{best_loop / c['seconds']:7.2f}x {best_batch / c['seconds']:8.2f}x")
    finally:
        for fn in os.listdir(tmp):
            os.unlink(os.path.join(tmp, fn))
        os.rmdir(tmp)
    return rc


if __name__ == "__main__":
    sys.exit(main())
