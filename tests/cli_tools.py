#!/usr/bin/env python3
"""cli_tools: `pllm --help`, `pllm CMD --help`, `pllm info`, `pllm tokenize`, and the exit codes.

- every option of every command is listed with its default, in `pllm --help` and in
  `pllm CMD --help` (the same lines); unknown commands and options exit 2;
- `pllm tokenize` gives exactly the token ids of an independent reference (Hugging Face
  `tokenizers` set up from the GGUF, tests/pyref/hf_tok.py; chat messages rendered by Python
  jinja2 as transformers renders them), for raw prompts, chat messages, OpenAI lines and the
  whole shared ShareGPT sample (1000 records), with a closing total line that adds up; bad
  records give error lines (exit 1);
- `pllm info` on the default GGUF model and on a Hugging Face directory: architecture, sizes
  (the parameter count equals the sum of the file's tensor sizes), dtypes, tokenizer, chat
  template (its source and a sample rendering equal to jinja2's);
- the README documents the exit codes 0, 1, 2, 3, 130.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import gguf
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from cli_util import MODEL, SHAREGPT, Test, records

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "pyref"))
import hf_tok  # noqa: E402

t = Test("cli_tools")
t.need_model()
HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- help
COMMANDS = ["generate", "bench", "tokenize", "info"]
rc, top, _ = t.run(["--help"])
t.check(rc == 0 and all(f"---- pllm {c} ----" in top for c in COMMANDS), "pllm --help has a section per command")
for c in COMMANDS:
    rc, out, _ = t.run([c, "--help"])
    opts = [l for l in out.splitlines() if re.match(r"^  -", l)]
    t.check(rc == 0 and len(opts) >= 2, f"pllm {c} --help lists options")
    for l in opts:
        if "--help" in l:
            continue
        t.check("(default: " in l, f"pllm {c}: every option shows its default: {l.strip()}")
        t.check(l in top, f"pllm --help lists the same option line for {c}: {l.strip()}")
rc, out, _ = t.run(["help", "bench"])
t.check(rc == 0 and "--max-regression" in out, "pllm help bench")
for args in (["frobnicate"], ["generate", "--no-such-option", "x"], [], ["info", "--json", "a", "b"]):
    rc, _, err = t.run(args)
    t.check(rc == 2, f"usage error exits 2: {args}: {rc}")
readme = open(os.path.join(HERE, "..", "README.md")).read()
for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |"):
    t.check(code in readme, f"README documents exit code {code}")

# ---------------------------------------------------------------- the reference tokenizer and template
ref = hf_tok.load(MODEL)
reader = gguf.GGUFReader(MODEL)
field = reader.fields["tokenizer.chat_template"]
template_src = bytes(field.parts[field.data[0]]).decode()


class Generation(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
tmpl = env.from_string(template_src)
bos = ref.tokenizer.id_to_token(ref.meta["bos_token_id"]) if ref.meta.get("bos_token_id") is not None else ""
eos = ref.tokenizer.id_to_token(ref.meta["eos_token_id"]) if ref.meta.get("eos_token_id") is not None else ""


def ref_ids(rec):
    if "prompt" in rec:
        return ref.encode(rec["prompt"], add_special=True, parse_special=True)
    text = tmpl.render(messages=rec["messages"], add_generation_prompt=True, bos_token=bos, eos_token=eos)
    return ref.encode(text, add_special=False, parse_special=True)


# ---------------------------------------------------------------- tokenize
recs = [
    {"id": "a", "prompt": "Hello, world!"},
    {"id": "uni", "prompt": "Caf\u00e9 \u4e2d\u6587 \U0001F600  tabs\tand\nnewlines 12345"},
    {"id": "spec", "prompt": "text <|im_start|>user\nspelled special tokens<|im_end|>"},
    {"id": "chat", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]},
    {"id": "multi", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                 {"role": "user", "content": "Capital of France?"}]},
]
inp = t.write("tok.jsonl", recs + ['{"id": "bad", "prompt": 3}', {"prompt": "no id"}])
rc, out, err = t.run(["tokenize", inp])
lines = records(out)
by = {r.get("id"): r for r in lines if "id" in r}
t.check(rc == 1, f"tokenize with a bad record exits 1: {rc} {err[-200:]}")
for r in recs:
    got = by.get(r["id"], {})
    want = ref_ids(r)
    t.check(got.get("token_ids") == want and got.get("n_tokens") == len(want),
            f"tokenize {r['id']}: {got.get('token_ids')} vs reference {want}")
t.check(by.get(7, {}).get("n_tokens") == len(ref_ids({"prompt": "no id"})), "a record without an id is named by its line")
t.check(by.get("bad", {}).get("line") == 6 and "tok.jsonl:6:" in by.get("bad", {}).get("error", ""), f"error line: {by.get('bad')}")
# stdout holds the records only (jq .token_ids works on every line); the total is on stderr
t.check(all("total" not in r for r in lines), f"tokenize stdout is records only: {lines[-1]}")
totals = [json.loads(l) for l in err.splitlines() if l.startswith('{"total"')]
t.check(len(totals) == 1, f"the total is one JSON line on stderr: {err[-400:]}")
total = totals[0].get("total", {}) if totals else {}
ok = [r for r in lines if "n_tokens" in r]
t.check(total.get("records") == 6 and total.get("errors") == 1 and total.get("n_tokens") == sum(r["n_tokens"] for r in ok)
        and total.get("max") == max(r["n_tokens"] for r in ok) and total.get("min") == min(r["n_tokens"] for r in ok)
        and total.get("n_ctx") == 8192, f"the total line adds up: {total}")
rc, out, _ = t.run(["tokenize", inp, "--counts-only", "--no-total", "--quiet"])
t.check(all("token_ids" not in r for r in records(out)) and all("total" not in r for r in records(out)), "--counts-only --no-total")
rc, out, err = t.run(["tokenize", inp, "--total"])
t.check(records(out)[-1].get("total") == total and '{"total"' not in err, f"--total: the total as the output's last line: {out[-300:]}")
rc, out, _ = t.run(["tokenize", "-", "--quiet"], stdin=open(inp, "rb").read())
t.check([r.get("token_ids") for r in records(out)][:5] == [ref_ids(r) for r in recs], "tokenize reads stdin")

# OpenAI lines: chat messages and a completions prompt
oa = t.write("oa.jsonl", [{"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": recs[3]["messages"]}},
                          {"custom_id": "p", "method": "POST", "url": "/v1/completions", "body": {"prompt": recs[0]["prompt"]}}])
rc, out, _ = t.run(["tokenize", oa, "--quiet"])
o = {r.get("id"): r for r in records(out)}
t.check(rc == 0 and o.get("c", {}).get("token_ids") == ref_ids(recs[3]) and o.get("p", {}).get("token_ids") == ref_ids(recs[0]),
        "tokenize OpenAI lines: custom_id as id, same ids")

# the whole shared sample (a 1000-element JSON list), each conversation through the chat template
sample = json.load(open(SHAREGPT))
rc, out, err = t.run(["tokenize", SHAREGPT, "--counts-only", "--total"], timeout=600)
lines = records(out)
want = [len(ref_ids({"messages": [{"role": "user", "content": e["conversations"][0]["value"]}]})) for e in sample]
got = [r.get("n_tokens") for r in lines[:-1]]
t.check(rc == 0 and got == want, f"tokenize the shared sample: {sum(g == w for g, w in zip(got, want))}/{len(want)} equal the reference")
t.check(lines[-1].get("total", {}).get("n_tokens") == sum(want), f"the sample's total: {lines[-1]} vs {sum(want)}")
print(f"tokenize: shared sample: {len(want)} records, {sum(want)} tokens, all equal to the reference")

# ---------------------------------------------------------------- info (GGUF)
rc, out, _ = t.run(["info"])
for label in ("model:", "architecture:", "parameters:", "weights:", "shape:", "context:", "vocabulary:", "rope:",
              "matrix dtypes:", "tokenizer:", "special tokens:", "chat template:", "example rendering:", "identity:"):
    t.check(label in out, f"pllm info shows {label}")
rc, out, _ = t.run(["info", MODEL, "--json"])
info = json.loads(out) if rc == 0 else {}
m = info.get("model", {})
n_params = sum(int(x.n_elements) for x in reader.tensors)
t.check(m.get("arch") == "llama" and m.get("n_layer") == 30 and m.get("n_vocab") == 49152 and m.get("format") == "gguf",
        f"info --json: the model: {m}")
t.check(info.get("parameters") == n_params, f"parameters {info.get('parameters')} = the sum of the GGUF tensors {n_params}")
tk = info.get("tokenizer", {})
t.check(tk.get("loaded") and tk.get("n_vocab") == 49152 and tk.get("bos", {}).get("text") == bos, f"info tokenizer: {tk}")
ct = info.get("chat_template", {})
example = tmpl.render(messages=[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}],
                      add_generation_prompt=True, bos_token=bos, eos_token=eos)
t.check(ct.get("source") == template_src and ct.get("usable") and ct.get("example") == example,
        f"info chat template: source and example as jinja2 renders it: {ct.get('example')!r}")
rc, out, err = t.run(["info", "--template"])
t.check(rc == 0 and template_src.strip()[:40] in out, "info --template prints the source")
rc, _, err = t.run(["info", t.path("nope.gguf")])
t.check(rc == 3 and "nope.gguf" in err, f"info on a missing file: exit 3 naming it: {rc} {err}")

# ---------------------------------------------------------------- info (a Hugging Face directory)
hf_root = t.path("hf")
subprocess.run([sys.executable, os.path.join(HERE, "gen_hf_models.py"), hf_root], check=True, capture_output=True)
d = os.path.join(hf_root, "llama-gqa-hf-f32")
cfg = json.load(open(os.path.join(d, "config.json")))
gpt2 = os.path.join(os.path.dirname(SHAREGPT), "..", "tokenizers", "gpt2")
for f in ("vocab.json", "merges.txt"):
    shutil.copy(os.path.join(gpt2, f), d)
json.dump({"chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                            "{% if add_generation_prompt %}<assistant>{% endif %}"}, open(os.path.join(d, "tokenizer_config.json"), "w"))
rc, out, err = t.run(["info", d, "--json"])
info = json.loads(out) if rc == 0 else {}
m = info.get("model", {})
t.check(rc == 0 and m.get("format") == "hf" and m.get("n_embd") == cfg["hidden_size"] and m.get("n_layer") == cfg["num_hidden_layers"]
        and m.get("n_head_kv") == cfg["num_key_value_heads"] and m.get("n_vocab") == cfg["vocab_size"],
        f"info on an HF directory: the config: {rc} {err[-300:]} {m}")
t.check(info.get("tokenizer", {}).get("loaded") is True, f"info on an HF directory: vocab.json + merges.txt: {info.get('tokenizer')}")
ct = info.get("chat_template", {})
t.check(ct.get("usable") and ct.get("example") == "<system>You are a helpful assistant.\n<user>Hello!\n<assistant>",
        f"info on an HF directory: tokenizer_config.json's template: {ct}")
rc, out, _ = t.run(["info", d])
t.check(rc == 0 and "(hf)" in out and "GQA" in out, "info on an HF directory, human-readable")

t.finish()
