#!/usr/bin/env python3
"""tok_bench: pllm's tokenizer encode speed against Hugging Face tokenizers, one thread each.

    python3 bench/tok_bench.py [--bench build/bench/tok_bench] [--model M.gguf] [--reps 5]

Corpus: the first human turn of every ShareGPT prompt in
$PLLM_SHARED_DATA/sharegpt/ShareGPT_V3_filtered_1000.json (default /work/shared/data).
pllm runs in bench/tok_bench (C, in-process timing); HF runs the reference set-up of
tests/pyref/hf_tok.py, single-threaded (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false),
both as a Python loop of encode() calls and as one encode_batch() call (no per-call Python
overhead). Best of --reps for each. Prints MB/s and the ratios; token counts must agree.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build = os.environ.get("PLLM_BUILD") or os.path.join(HERE, "..", "build")
    ap.add_argument("--bench", default=os.path.join(build, "bench", "tok_bench"))
    ap.add_argument("--model", default=hf_tok.default_model_path())
    ap.add_argument("--data", default=os.environ.get("PLLM_SHARED_DATA") or os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    with open(os.path.join(args.data, "sharegpt", "ShareGPT_V3_filtered_1000.json"), encoding="utf-8") as f:
        texts = []
        for rec in json.load(f):
            human = next((c["value"] for c in rec.get("conversations", []) if c.get("from") == "human"), None)
            if human is not None:
                texts.append(human)
    nbytes = sum(len(t.encode()) for t in texts)

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as tf:
        for t in texts:
            tf.write(json.dumps({"text": t}) + "\n")
        corpus = tf.name
    try:
        out = subprocess.run([args.bench, args.model, corpus, str(args.reps)], capture_output=True, text=True, check=True)
    finally:
        os.unlink(corpus)
    c = json.loads(out.stdout)

    ref = hf_tok.load(args.model)
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
        print(f"tok_bench: token counts differ: pllm {c['tokens']}, HF {n_loop} / {n_batch}", file=sys.stderr)
        return 1
    mb = nbytes / 1e6
    print(f"corpus: {len(texts)} ShareGPT prompts, {mb:.2f} MB, {c['tokens']} tokens; best of {args.reps}, 1 thread")
    print(f"pllm            {c['seconds'] * 1e3:8.1f} ms  {mb / c['seconds']:7.2f} MB/s")
    print(f"HF encode loop  {best_loop * 1e3:8.1f} ms  {mb / best_loop:7.2f} MB/s")
    print(f"HF encode_batch {best_batch * 1e3:8.1f} ms  {mb / best_batch:7.2f} MB/s")
    print(f"ratio: pllm is {best_loop / c['seconds']:.2f}x HF encode loop, {best_batch / c['seconds']:.2f}x HF encode_batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
