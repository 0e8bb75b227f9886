#!/usr/bin/env python3
"""cli_user: what a user meets first (issue 21), end to end through the pllm binary.

- the README's quick start: `pllm generate examples/prompts.jsonl` on the default setup (no
  PLLM_CPU_MATH) answers the capital of France with Paris, and gives the texts the README shows
  (required on the kernel table the README was measured with, printed elsewhere: int8 kernel
  tables may differ after a near tie);
- record metadata: a "metadata" field is echoed verbatim into the output line, for pllm and
  OpenAI batch input; --extra-fields error (the default: an unknown field is an error naming
  it), ignore, passthrough (into "metadata"), and the conflicts passthrough refuses;
- a stopped run's report counts and names the requests that did not finish: after SIGINT (exit
  130) and after a failed step (the model file rewritten under the run, exit 3), in the table
  and in --stats-json, and they are exactly the requests missing from the output;
- per-request failures are error lines and the run goes on, on a random model whose vocabulary
  is larger than its tokenizer's (300 rows, 268 tokens), sampled at temperature 1: a prompt
  longer than the context, a stop id outside the vocabulary, an empty stop string; the others
  finish with ids that all have a token, and their logprobs carry the token text;
- --plot: a well-formed self-contained SVG with the expected series (throughput, KV use, hit
  rate, TTFT/TPOT/E2E histograms), for generate and bench; a pllm picture is replaced, another
  file is not;
- tokenize: stdout is records only;
- the command line: an unknown option names the closest one; vLLM's spellings are aliases;
  -n, --logprobs, --system-prompt, --chat-template; generate without input names INPUT;
- refused before the model loads: an output that cannot be written, --threads far beyond the
  cores.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from cli_util import MODEL, PLLM, Test, read_records, records

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
t = Test("cli_user")
t.need_model()
ENV = {k: v for k, v in os.environ.items() if k != "PLLM_CPU_MATH"}  # the default setup
LOADED = "pllm: model "  # the line pllm prints once the model is loaded


def run(args, **kw):
    kw.setdefault("env", ENV)
    return t.run(args, **kw)


# ---------------------------------------------------------------- the README's quick start
rc, out, err = run(["generate", os.path.join(ROOT, "examples", "prompts.jsonl"), "--order", "input"])
got = {r["id"]: r for r in records(out)}
t.check(rc == 0 and len(got) == 4, f"quick start: exit {rc}, {len(got)} records: {err[-400:]}")
t.check("Paris" in got.get("capital", {}).get("text", ""), f"quick start: the capital of France is Paris: {got.get('capital')}")
readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
m = re.search(r"`out.jsonl` then holds.*?```json\n(.*?)```", readme, re.S)
t.check(m is not None, "README shows the quick start's output")
shown = {r["id"]: r for r in records(m.group(1))} if m else {}
t.check(set(shown) == set(got), f"README shows every quick start record: {sorted(shown)}")
same_isa = "avx512vnni kernels, int8 math" in err
for rid, r in shown.items():
    same = got.get(rid, {}).get("text") == r["text"]
    if same_isa or rid == "capital":
        t.check(same, f"quick start {rid}: README shows {r['text']!r}, the run gives {got.get(rid, {}).get('text')!r}")
    elif not same:
        print(f"note: quick start {rid} differs from the README on this kernel table: {got.get(rid, {}).get('text')!r}")

# ---------------------------------------------------------------- metadata, --extra-fields
meta = {"expected": "Paris", "w": 0.1, "nested": {"a": [1, 2.5, None, True]}, "s": "é\"x"}
pl = t.write("meta.jsonl", [
    {"id": "m", "prompt": "The capital of France is", "max_tokens": 2, "metadata": meta},
    {"id": "x", "prompt": "2 + 2 =", "max_tokens": 2, "expected": "4", "category": "math"},
    {"id": "both", "prompt": "Hi", "max_tokens": 2, "expect_any": ["a"], "metadata": {"q": 7}},
    {"id": "clash", "prompt": "Hi", "max_tokens": 2, "q": 1, "metadata": {"q": 7}},
    {"id": "scalar", "prompt": "Hi", "max_tokens": 2, "metadata": "plain", "extra": 1},
    {"id": "typo", "prompt": "Hi", "max_tokens": 2, "temprature": 1},
])
res = {}
for mode in ("error", "ignore", "passthrough"):
    rc, out, err = run(["generate", pl, "--quiet", "--extra-fields", mode])
    res[mode] = {r["id"]: r for r in records(out)}
    t.check(rc == (0 if mode == "ignore" else 1) and len(res[mode]) == 6, f"--extra-fields {mode}: exit {rc}, {len(res[mode])} lines: {err[-300:]}")
    t.check(res[mode].get("m", {}).get("metadata") == meta and res[mode]["m"].get("finish_reason") != "error",
            f"--extra-fields {mode}: metadata echoed verbatim: {res[mode].get('m')}")
    raw = next((l for l in out.splitlines() if '"id":"m"' in l), "")
    t.check('"w":0.1,' in raw, f"--extra-fields {mode}: 0.1 is written as 0.1: {raw[-200:]}")
e, i, p = res["error"], res["ignore"], res["passthrough"]
t.check(all(e[k].get("finish_reason") == "error" for k in ("x", "both", "clash", "scalar", "typo"))
        and "unknown field 'expected'" in e["x"].get("error", "") and "unknown field 'temprature'" in e["typo"].get("error", ""),
        f"--extra-fields error (default): unknown fields are errors naming them: {e.get('x')}")
t.check(e["both"].get("metadata") == {"q": 7} or "metadata" not in e["both"], "an error line may carry the metadata read")
t.check(i["x"].get("finish_reason") != "error" and "metadata" not in i["x"] and i["both"].get("metadata") == {"q": 7}
        and i["typo"].get("finish_reason") != "error", f"--extra-fields ignore: {i.get('x')} {i.get('both')}")
t.check(p["x"].get("metadata") == {"expected": "4", "category": "math"} and p["both"].get("metadata") == {"expect_any": ["a"], "q": 7},
        f"--extra-fields passthrough: unknown fields in metadata: {p.get('x')} {p.get('both')}")
t.check(p["clash"].get("finish_reason") == "error" and "both a record field and a key of 'metadata'" in p["clash"].get("error", "")
        and p["scalar"].get("finish_reason") == "error" and "must be an object" in p["scalar"].get("error", ""),
        f"--extra-fields passthrough conflicts are errors: {p.get('clash')} {p.get('scalar')}")
rc, out, err = run(["generate", pl, "--extra-fields", "keep"])
t.check(rc == 2 and "--extra-fields 'keep'" in err, f"a bad --extra-fields is a usage error: {rc} {err[-200:]}")

oa = t.write("meta_oa.jsonl", [
    {"custom_id": "r1", "method": "POST", "url": "/v1/completions", "metadata": {"qid": 1},
     "body": {"model": "m", "prompt": "The capital of France is", "max_tokens": 2, "expected": "Paris"}},
    {"custom_id": "r2", "method": "POST", "url": "/v1/chat/completions", "category": "x",
     "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}},
])
rc, out, _ = run(["generate", oa, "--quiet"])
o = {r["custom_id"]: r for r in records(out)}
t.check(rc == 1 and o["r1"].get("metadata") == {"qid": 1} and "body.expected" in (o["r1"].get("error") or {}).get("message", "")
        and "'category'" in (o["r2"].get("error") or {}).get("message", ""), f"openai, default: unknown fields are errors: {o}")
rc, out, _ = run(["generate", oa, "--quiet", "--extra-fields", "passthrough"])
o = {r["custom_id"]: r for r in records(out)}
t.check(rc == 0 and o["r1"].get("metadata") == {"qid": 1, "expected": "Paris"} and o["r2"].get("metadata") == {"category": "x"}
        and o["r1"]["response"]["status_code"] == 200, f"openai, passthrough: {o}")

# ---------------------------------------------------------------- a stopped run's report
words = "the of and to in is was that for on with as by at from his her are were this which".split()
long_recs = [{"id": f"s{k}", "prompt": " ".join(words[(k + j) % len(words)] for j in range(12)), "max_tokens": 48,
              "ignore_eos": True} for k in range(10)]
inp = t.write("stop.jsonl", long_recs)
all_ids = {r["id"] for r in long_recs}


def stopped_run(name, model, act):
    outp, stats = t.path(name + ".jsonl"), t.path(name + ".json")
    proc = subprocess.Popen([PLLM, "generate", inp, "-o", outp, "--stats-json", stats, "--max-seqs", "3",
                             "--model", model, "--log-interval", "1000"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=ENV)
    t0 = time.time()
    while time.time() - t0 < 300 and proc.poll() is None:
        if os.path.exists(outp) and open(outp, "rb").read().count(b"\n") >= 1:
            break
        time.sleep(0.02)
    act(proc)
    err = proc.communicate(timeout=300)[1].decode("utf-8", "replace")
    done = {r["id"] for r in read_records(outp)} if os.path.exists(outp) else set()
    st = json.load(open(stats)) if os.path.exists(stats) else {}
    m = re.search(r"Unfinished requests:\s+(\d+) \(ids ([^)]*)\)", err)
    named = set(m.group(2).split(", ")) if m else set()
    missing = all_ids - done
    t.check(m is not None and int(m.group(1)) == len(missing) > 0 and named == missing,
            f"{name}: the report names the {len(missing)} unfinished requests {sorted(missing)}: {err[-1500:]}")
    t.check(st.get("unfinished_requests") == len(missing) and set(st.get("unfinished_ids", [])) == missing,
            f"{name}: --stats-json unfinished_requests/ids: {st.get('unfinished_requests')} {st.get('unfinished_ids')}")
    t.check(f"{len(missing)} requests in flight did not finish (ids" in err.splitlines()[-1] if err.strip() else False,
            f"{name}: the last line says how many did not finish: {err.splitlines()[-1:]}")
    return proc.returncode, err


rc, err = stopped_run("sigint", MODEL, lambda p: p.send_signal(signal.SIGINT))
t.check(rc == 130 and "pllm generate (interrupted)" in err, f"SIGINT: exit {rc}")
model_copy = t.path("model.gguf")
shutil.copyfile(MODEL, model_copy)


def rewrite(proc):
    size = os.path.getsize(model_copy)
    with open(model_copy, "r+b") as f:  # 64 KiB in the middle of the tensor data, same size
        f.seek(size // 2)
        f.write(os.urandom(65536))


rc, err = stopped_run("failed_step", model_copy, rewrite)
t.check(rc == 3 and "(stopped" in err, f"a failed step: exit {rc}: {err[-300:]}")
os.remove(model_copy)

# ---------------------------------------------------------------- per-request failures: padded vocabulary, sampled
sys.path.insert(0, HERE)
import gguf  # noqa: E402
import gen_models  # noqa: E402
from cudacli_e2e import train_bpe  # noqa: E402

PAD = 32


class Padded(gguf.GGUFWriter):
    """The model's 300 embedding rows, a tokenizer of 268 (as Phi-3 and Qwen2.5 pad theirs)."""

    def add_vocab_size(self, n):
        self._v = n
        super().add_vocab_size(n)

    def write_header_to_file(self, *a, **k):
        v = self._v - PAD
        tokens, merges = train_bpe(v - 257)
        tokens = tokens[:v - 1] + ["<|eos|>"]
        self.add_tokenizer_model("gpt2")
        self.add_tokenizer_pre("default")
        self.add_token_list(tokens)
        self.add_token_types([1] * (v - 1) + [3])
        self.add_token_merges(merges[:len(tokens) - 257])
        self.add_eos_token_id(v - 1)
        self.add_add_bos_token(False)
        super().write_header_to_file(*a, **k)


base = gen_models.gguf.GGUFWriter
gen_models.gguf.GGUFWriter = Padded
try:
    padded = gen_models.generate(t.path("padded"), shapes=["gqa"], dtypes=["F32"])[0]["path"]
finally:
    gen_models.gguf.GGUFWriter = base
N_TOK = 300 - PAD
prompts = [" ".join(words[(k * 3 + j) % len(words)] for j in range(5)) for k in range(6)]
recs = [{"id": f"ok{k}", "prompt": p, "max_tokens": 12, "ignore_eos": True} for k, p in enumerate(prompts)]
recs[1]["n"] = 2
recs[2]["logprobs"] = 3
recs += [
    {"id": "too_long", "prompt": " ".join(words * 6), "max_tokens": 4},
    {"id": "stop_id", "prompt": "the time", "max_tokens": 4, "stop_token_ids": [100000]},
    {"id": "stop_empty", "prompt": "the time", "max_tokens": 4, "stop": [""]},
    {"id": "stop_nul", "prompt": "the time", "max_tokens": 4, "stop": ["\u0000a"]},
    {"id": "stop_space", "prompt": "the time", "max_tokens": 4, "stop": [" "]},
]
pin = t.write("padded.jsonl", recs)
for seed in ("3", "11"):
    rc, out, err = run(["generate", pin, "--model", padded, "--temperature", "1.0", "--seed", seed, "--token-ids",
                        "--max-model-len", "64", "--max-seqs", "4", "--log-interval", "1000"])
    lines = records(out)
    by = {}
    for r in lines:
        by.setdefault(r["id"], []).append(r)
    t.check(rc == 1 and "Unfinished" not in err and "stopped" not in err,
            f"padded seed {seed}: the run goes on (exit 1: some requests failed): {rc} {err[-600:]}")
    t.check(sorted(by) == sorted(r["id"] for r in recs) and len(by.get("ok1", [])) == 2 and len(lines) == len(recs) + 1,
            f"padded seed {seed}: every request answered once (n=2: twice): {sorted(by)}")
    for rid, what in (("too_long", "max_model_len"), ("stop_id", "stop_token_ids"), ("stop_empty", "stop"),
                      ("stop_nul", "field 'stop': must not contain a NUL")):
        r = by.get(rid, [{}])[0]
        t.check(r.get("finish_reason") == "error" and "padded.jsonl:" in r.get("error", "") and what in r.get("error", ""),
                f"padded seed {seed}: {rid} is an error line naming the file and {what!r}: {r}")
    for rid in [r["id"] for r in recs if r["id"].startswith("ok")] + ["stop_space"]:
        for r in by.get(rid, []):
            t.check(r.get("finish_reason") in ("length", "stop") and all(0 <= x < N_TOK for x in r.get("token_ids", [-1])),
                    f"padded seed {seed}: {rid} finishes with ids that have a token: {r}")
    lp = by.get("ok2", [{}])[0].get("logprobs", [])
    t.check(len(lp) == 12 and all(isinstance(e.get("token"), str) and len(e.get("top_logprobs", [])) == 3
                                  and all("token" in x for x in e["top_logprobs"]) for e in lp),
            f"padded seed {seed}: logprobs carry the token text: {lp[:2]}")

# ---------------------------------------------------------------- --plot
small = t.write("small.jsonl", [{"id": k, "prompt": p, "max_tokens": 6} for k, p in enumerate(prompts)])
SERIES = ("throughput", "kv_used", "hit_rate", "hit_best", "ttft_hist", "tpot_hist", "e2e_hist")


def check_svg(path, what):
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as ex:
        t.check(False, f"{what}: not well-formed XML: {ex}")
        return
    ns = "{http://www.w3.org/2000/svg}"
    t.check(root.tag == ns + "svg", f"{what}: the root is <svg>: {root.tag}")
    ids = {el.get("id"): el for el in root.iter() if el.get("id")}
    for s in SERIES:
        el = ids.get(s)
        t.check(el is not None and int(el.get("data-n", "0")) > 0, f"{what}: series {s} present with data: {el is not None and el.attrib}")
    d = ids.get("throughput").get("d", "") if ids.get("throughput") is not None else ""
    t.check(len(re.findall(r"[ML]", d)) == int(ids["throughput"].get("data-n", -1)) if "throughput" in ids else False,
            f"{what}: the throughput path has its data-n points")
    bars = [el for el in ids["ttft_hist"] if el.tag == ns + "rect"] if "ttft_hist" in ids else []
    t.check(len(bars) == 40, f"{what}: 40 TTFT bars: {len(bars)}")
    text = open(path, encoding="utf-8").read()
    t.check("<script" not in text and "href" not in text and "@import" not in text, f"{what}: self-contained (no script, no link)")
    titles = " ".join(el.text or "" for el in root.iter(ns + "text"))
    for label in ("Output throughput", "KV cache blocks in use", "Prefix cache hit rate", "Time to first token",
                  "Time per output token", "End-to-end latency"):
        t.check(label in titles, f"{what}: panel '{label}'")


svg = t.path("run.svg")
rc, out, err = run(["generate", small, "--quiet", "--plot", svg])
t.check(rc == 0, f"generate --plot: exit {rc}: {err[-300:]}")
check_svg(svg, "generate --plot")
rc, _, err = run(["generate", small, "--quiet", "--plot", svg])
t.check(rc == 0, f"a picture pllm drew is replaced without --overwrite: {rc} {err[-200:]}")
other = t.write_text("other.svg", "<svg>mine</svg>")
rc, _, err = run(["generate", small, "--quiet", "--plot", other])
t.check(rc == 2 and "exists" in err and LOADED not in err and open(other).read() == "<svg>mine</svg>",
        f"another file is not replaced: {rc} {err[-200:]}")
bsvg = t.path("bench.svg")
rc, _, err = run(["bench", "--dataset", "prefix", "--num-prefixes", "2", "--prefix-len", "32", "--input-len", "16",
                  "--output-len", "4", "--num-prompts", "8", "--plot", bsvg, "--quiet"])
t.check(rc == 0, f"bench --plot: exit {rc}: {err[-300:]}")
check_svg(bsvg, "bench --plot")

# ---------------------------------------------------------------- tokenize: stdout is records only
rc, out, err = run(["tokenize", small])
t.check(rc == 0 and all("token_ids" in r for r in records(out)) and '{"total"' in err, f"tokenize: records on stdout, the total on stderr")

# ---------------------------------------------------------------- the command line
rc, _, err = run(["generate", small, "--temprature", "0.5"])
t.check(rc == 2 and "did you mean --temperature?" in err, f"closest option: {err[-200:]}")
rc, _, err = run(["generate", small, "--max-num-seqz", "2"])
t.check(rc == 2 and "did you mean --max-seqs?" in err, f"closest option (through vLLM's alias): {err[-200:]}")
a = run(["generate", small, "--quiet", "--max-num-seqs", "2", "--max-num-batched-tokens", "64", "--token-ids"])
b = run(["generate", small, "--quiet", "--max-seqs", "2", "--max-batched-tokens", "64", "--token-ids"])
t.check(a[0] == 0 and [r["token_ids"] for r in records(a[1])] == [r["token_ids"] for r in records(b[1])],
        "vLLM's --max-num-seqs / --max-num-batched-tokens are aliases")
rc, _, err = run(["generate", small, "--gpu-memory-utilization", "0.5", "--quiet", "--limit", "1"])
t.check(rc == 0, f"--gpu-memory-utilization is accepted: {rc} {err[-200:]}")
rc, _, err = run(["generate"])
t.check(rc == 2 and "missing INPUT" in err, f"generate without input names INPUT: {err[-200:]}")
rc, out, _ = run(["generate", small, "--quiet", "-n", "2", "--temperature", "0.8", "--limit", "2"])
t.check(rc == 0 and len(records(out)) == 4 and {r.get("index") for r in records(out)} == {0, 1}, f"-n 2: {out[-300:]}")
rc, out, _ = run(["generate", small, "--quiet", "--logprobs", "2", "--limit", "1"])
lp = records(out)[0].get("logprobs", []) if rc == 0 else []
t.check(len(lp) == 6 and all(isinstance(e.get("token"), str) and len(e.get("top_logprobs", [])) == 2 for e in lp),
        f"--logprobs 2: ids with token text: {lp[:1]}")
chat = t.write("chat.jsonl", [{"id": "c", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
                              {"id": "s", "messages": [{"role": "system", "content": "Own."}, {"role": "user", "content": "Hi"}],
                               "max_tokens": 2}])
rc, out, _ = run(["generate", chat, "--quiet", "--echo", "--system-prompt", "Be terse."])
e = {r["id"]: r for r in records(out)}
t.check(rc == 0 and "Be terse." in e["c"]["prompt"] and "Be terse." not in e["s"]["prompt"] and "Own." in e["s"]["prompt"],
        f"--system-prompt: first in a conversation without one: {e}")
tmpl = t.write_text("t.jinja", "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]")
rc, out, _ = run(["generate", chat, "--quiet", "--echo", "--chat-template", tmpl])
e = {r["id"]: r for r in records(out)}
t.check(rc == 0 and e.get("c", {}).get("prompt") == "[user] Hi\n[assistant]", f"--chat-template FILE: {e.get('c')}")
rc, _, err = run(["generate", chat, "--chat-template", t.path("none.jinja")])
t.check(rc == 2 and "--chat-template" in err and LOADED not in err, f"an unreadable --chat-template before the model loads: {err[-200:]}")

# ---------------------------------------------------------------- refused before the model loads
for args, what in [(["-o", "/nonexistent-dir/out.jsonl"], "its directory /nonexistent-dir does not exist"),
                   (["-o", t.tmp], "is a directory"),
                   (["--stats-json", os.path.join(small, "x.json")], "is not a directory"),
                   (["--plot", "/nonexistent-dir/p.svg"], "does not exist"),
                   (["--threads", "100000"], "--threads 100000 is far beyond")]:
    rc, _, err = run(["generate", small] + args)
    t.check(rc == 2 and what in err and LOADED not in err, f"{args}: exit 2 before the model loads: {rc} {err[-300:]}")
rc, _, err = run(["bench", "--dataset", "random", "--stats-json", "/nonexistent-dir/s.json"])
t.check(rc == 2 and "does not exist" in err and LOADED not in err, f"bench: an unwritable --stats-json before the model loads: {err[-200:]}")

t.finish()
