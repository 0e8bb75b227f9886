#!/usr/bin/env python3
"""cli_formats: every input format through `pllm generate` on the real default model.

- pllm JSONL, OpenAI batch JSONL (chat and completions, n > 1, logprobs), ShareGPT as a JSON
  list (the shared sample) and as JSON lines, pllm records as a JSON list;
- malformed records of every kind in each format (bad JSON, missing field, wrong type, empty
  prompt, prompt longer than the context, unknown sampling field, a bad value): each becomes an
  error record naming its file and line (and list element), the run goes on and exits 1;
  --strict stops at the first one with exit 3;
- the OpenAI output has vllm run-batch's schema; the same chat prompt gives the same text in
  every format; --order input keeps input order (n > 1 included);
- .zst in and out, '-' for stdin and stdout give the same records as plain files;
- progress: log lines when stderr is not a terminal, a redrawn line on a terminal, nothing with
  --quiet; usage errors exit 2, a missing input exits 3.
"""
import json
import os
import subprocess

from cli_util import SHAREGPT, Test, canon, read_records, records

t = Test("cli_formats")
t.need_model()
CAP = {"role": "user", "content": "What is the capital of France?"}

# ---------------------------------------------------------------- pllm JSONL, malformed kinds
long_prompt = "word " * 300
pllm_lines = [
    {"id": "g1", "prompt": "The capital of France is", "max_tokens": 4},
    '{"id": "j", "prompt": ',                                   # 2 bad JSON
    {"id": "m"},                                                # 3 missing prompt
    {"id": "w", "prompt": 42},                                  # 4 wrong type
    {"id": "e", "prompt": ""},                                  # 5 empty prompt
    {"id": "long", "prompt": long_prompt},                      # 6 longer than the context
    {"id": "u", "prompt": "x", "temprature": 0.5},              # 7 unknown sampling field
    {"id": "v", "prompt": "x", "top_p": 2},                     # 8 bad value
    "",                                                         # 9 blank: skipped
    {"id": "g2", "messages": [CAP], "max_tokens": 12},          # 10
    {"id": "t", "prompt": "x", "max_tokens": "9"},              # 11 wrong type (sampling)
]
expect = {  # id -> (line, text the message must hold)
    2: (2, "invalid JSON"), "m": (3, "missing field 'prompt'"), "w": (4, "field 'prompt': must be a string, got 42"),
    "e": (5, "field 'prompt': is empty"), "long": (6, "field 'prompt'"), "u": (7, "unknown field 'temprature'"),
    "v": (8, "top_p"), "t": (11, "field 'max_tokens': must be an integer, got \"9\""),
}
p_in = t.write("in.jsonl", pllm_lines)
rc, out, err = t.run(["generate", p_in, "--quiet", "--max-model-len", "128"])
recs = {r["id"]: r for r in records(out)}
t.check(rc == 1, f"pllm: a run with bad records exits 1, got {rc}: {err[-400:]}")
t.check(set(recs) == {"g1", "g2", *expect}, f"pllm: one record per non-blank line: {sorted(map(str, recs))}")
for rid, (line, needle) in expect.items():
    r = recs.get(rid, {})
    t.check(r.get("finish_reason") == "error" and r.get("line") == line and f"in.jsonl:{line}:" in r.get("error", "")
            and needle in r.get("error", ""), f"pllm: record {rid}: error at line {line} with '{needle}': {r}")
t.check("longer" in recs.get("long", {}).get("error", "") or "no room" in recs.get("long", {}).get("error", ""),
        f"pllm: the too-long prompt says why: {recs.get('long')}")
t.check(recs.get("g1", {}).get("completion_tokens") == 4, f"pllm: good records run: {recs.get('g1')}")
chat_text = recs.get("g2", {}).get("text", "")
t.check("Paris" in chat_text, f"pllm: messages rendered with the chat template: {recs.get('g2')}")

rc, out, err = t.run(["generate", p_in, "--quiet", "--strict", "--max-model-len", "128"])
got = records(out)
t.check(rc == 3 and "in.jsonl:2:" in err and "--strict" in err, f"pllm --strict: exit 3 at line 2: {rc} {err[-300:]}")
t.check([r["id"] for r in got if r.get("finish_reason") == "error"] == [2], f"pllm --strict: only line 2's error written: {got}")

# ---------------------------------------------------------------- OpenAI batch JSONL
def oa(cid, body, url="/v1/chat/completions"):
    return {"custom_id": cid, "method": "POST", "url": url, "body": body}

oa_lines = [
    oa("chat", {"model": "smol", "messages": [CAP], "max_tokens": 12, "logprobs": True, "top_logprobs": 2}),
    oa("comp", {"prompt": "The capital of Germany is", "max_tokens": 5, "n": 2, "temperature": 0.7, "seed": 11,
                "logprobs": 1}, url="/v1/completions"),
    '{"custom_id": "badjson", "method": ',                                       # 3
    {"method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}},       # 4 missing custom_id
    oa("wtype", {"messages": [CAP], "max_tokens": "12"}),                        # 5 wrong type
    oa("empty", {"prompt": ""}, url="/v1/completions"),                          # 6 empty prompt
    oa("long", {"prompt": long_prompt}, url="/v1/completions"),                  # 7 too long
    oa("unk", {"messages": [CAP], "tempreature": 1}),                            # 8 unknown field
    oa("url", {"prompt": "x"}, url="/v1/embeddings"),                            # 9 wrong url
    oa("chat2", {"messages": [CAP], "max_completion_tokens": 12}),               # 10
]
o_in = t.write("batch.jsonl", oa_lines)
o_out = t.path("batch.out.jsonl")
rc, _, err = t.run(["generate", o_in, "-o", o_out, "--quiet", "--order", "input", "--max-model-len", "128"])
got = read_records(o_out)
t.check(rc == 1, f"openai: exit 1 with bad lines: {rc} {err[-300:]}")
t.check(len(got) == 10, f"openai: one output line per input line: {len(got)}")
want_order = ["chat", "comp", None, None, "wtype", "empty", "long", "unk", "url", "chat2"]
t.check([r.get("custom_id") for r in got] == want_order, f"openai --order input: {[r.get('custom_id') for r in got]}")
for i, r in enumerate(got):
    line = i + 1
    t.check(set(r) == {"id", "custom_id", "response", "error"} and r["id"].startswith("pllm-"), f"openai line {line} keys: {r}")
    resp = r.get("response") or {}
    t.check({"status_code", "request_id", "body"} <= set(resp), f"openai line {line}: response keys {resp}")
    if want_order[i] in ("chat", "comp", "chat2"):
        body = resp.get("body") or {}
        t.check(resp.get("status_code") == 200 and r["error"] is None, f"openai {want_order[i]}: status 200: {r}")
        t.check({"id", "object", "created", "model", "choices", "usage"} <= set(body), f"openai body keys: {body.keys()}")
        u = body.get("usage", {})
        t.check(u.get("total_tokens") == u.get("prompt_tokens", 0) + u.get("completion_tokens", 0) and u.get("prompt_tokens", 0) > 0,
                f"openai usage adds up: {u}")
    else:
        e = r.get("error") or {}
        t.check(resp.get("status_code") == 400 and resp.get("body") is None and f"batch.jsonl:{line}:" in e.get("message", "")
                and e.get("line") == line, f"openai line {line}: an error line naming it: {r}")
by = {r.get("custom_id"): r for r in got}
chat = by.get("chat", {}).get("response", {}).get("body", {})
ch = (chat.get("choices") or [{}])[0]
t.check(chat.get("object") == "chat.completion" and chat.get("model") == "smol", f"openai chat body: {chat}")
t.check(ch.get("message", {}).get("role") == "assistant" and ch.get("message", {}).get("content") == chat_text,
        f"openai chat: the same text as the pllm format: {ch.get('message')} vs {chat_text!r}")
lp = (ch.get("logprobs") or {}).get("content") or []
t.check(len(lp) == chat.get("usage", {}).get("completion_tokens") and all(len(e["top_logprobs"]) == 2 and "bytes" in e for e in lp),
        f"openai chat logprobs: one entry per token with 2 top entries")
t.check("".join(bytes(e["bytes"]).decode("utf-8", "replace") for e in lp).startswith(chat_text[:10]),
        "openai chat logprob tokens spell the text")
comp = by.get("comp", {}).get("response", {}).get("body", {})
cs = comp.get("choices") or []
t.check(comp.get("object") == "text_completion" and [c.get("index") for c in cs] == [0, 1], f"openai n=2: {cs}")
t.check(all(len(c["logprobs"]["tokens"]) == len(c["logprobs"]["token_logprobs"]) for c in cs if c.get("logprobs")),
        "openai completions logprobs")
t.check(comp.get("usage", {}).get("completion_tokens") == 10, f"openai n=2 usage counts both: {comp.get('usage')}")
t.check(by.get("chat2", {}).get("response", {}).get("body", {}).get("choices", [{}])[0].get("message", {}).get("content") == chat_text,
        "openai max_completion_tokens works as max_tokens")
rc, out, err = t.run(["generate", o_in, "--quiet", "--strict"])
t.check(rc == 3 and "batch.jsonl:3:" in err, f"openai --strict stops at line 3: {rc} {err[-300:]}")
# the same batch answered in the pllm format
rc, out, _ = t.run(["generate", o_in, "--quiet", "--output-format", "pllm", "--max-model-len", "128"])
pr = {r["id"]: r for r in records(out)}
t.check(pr.get("chat", {}).get("text") == chat_text, "--output-format pllm on OpenAI input")

# ---------------------------------------------------------------- ShareGPT: JSON list and JSON lines
sample = sorted(json.load(open(SHAREGPT)), key=lambda e: len(e["conversations"][0]["value"]))[:3]  # short ones: fast
multi = {"id": "multi", "conversations": [{"from": "human", "value": "What is the capital of France?"},
                                          {"from": "gpt", "value": "Paris."},
                                          {"from": "human", "value": "And of Germany?"}]}
bad_missing = {"id": "nocv"}
bad_role = {"id": "role", "conversations": [{"from": "robot", "value": "x"}]}
bad_empty = {"id": "emp", "conversations": [{"from": "human", "value": ""}]}
bad_long = {"id": "slong", "conversations": [{"from": "human", "value": long_prompt * 4}]}
entries = sample + [multi, bad_missing, bad_role, bad_empty, bad_long]
# a list whose 6th element is not valid JSON but balanced: an error of that element only
elems = [json.dumps(e) for e in entries]
elems.insert(5, '{"id": "tru", "conversations": [tru]}')
sg_json = t.write_text("sg.json", "[\n" + ",\n".join(elems) + "\n]\n")
rc, out, err = t.run(["generate", sg_json, "--quiet", "--max-tokens", "3", "--max-model-len", "1024"])
sg = {r["id"]: r for r in records(out)}
t.check(rc == 1, f"sharegpt list: exit 1: {rc} {err[-300:]}")
want_ids = {e["id"] for e in sample} | {"multi", "nocv", "role", "emp", "slong", 6}
t.check(set(sg) == want_ids, f"sharegpt list: a record per element: {sorted(map(str, sg))}")
for e in sample + [multi]:
    r = sg.get(e["id"], {})
    t.check(r.get("finish_reason") == "length" and r.get("completion_tokens") == 3, f"sharegpt {e['id']}: ran: {r}")
for rid, el, needle in [(6, 6, "invalid JSON"), ("nocv", 5, "missing field 'conversations'"), ("role", 7, "conversations[0].from"),
                        ("emp", 8, "empty"), ("slong", 9, "no room")]:
    r = sg.get(rid, {})
    t.check(r.get("finish_reason") == "error" and r.get("element") == el and f"element {el}:" in r.get("error", "")
            and needle in r.get("error", "") and f"sg.json:{r.get('line')}:" in r.get("error", ""),
            f"sharegpt element {el}: error naming it: {r}")
sg_jsonl = t.write("sg.jsonl", entries)
rc, out, err = t.run(["generate", sg_jsonl, "--quiet", "--max-tokens", "3", "--max-model-len", "1024"])
sgl = {r["id"]: r for r in records(out)}
t.check(all(sgl.get(e["id"], {}).get("text") == sg.get(e["id"], {}).get("text") for e in sample + [multi]),
        "sharegpt JSON lines give the same texts as the JSON list")
t.check(sgl.get("nocv", {}).get("line") == 5, f"sharegpt JSON lines: errors name the line: {sgl.get('nocv')}")
# the shared sample as it is: detected as a ShareGPT list; --limit takes its first records
rc, out, err = t.run(["generate", SHAREGPT, "--max-tokens", "2", "--strict", "--limit", "3"])
t.check(rc == 0 and [r["id"] for r in records(out)] != [] and sorted(r["id"] for r in records(out)) == sorted(e["id"] for e in
        json.load(open(SHAREGPT))[:3]) and "sharegpt (a JSON list)" in err,
        f"the shared sample, first 3 records: rc={rc}, {len(records(out))} records, {err[:300]}")

# pllm records as a JSON list
plist = t.write_text("plist.json", json.dumps([{"id": "a", "messages": [CAP], "max_tokens": 12}, {"prompt": "Hi", "max_tokens": 2}]))
rc, out, err = t.run(["generate", plist, "--quiet"])
pl = {r["id"]: r for r in records(out)}
t.check(rc == 0 and pl.get("a", {}).get("text") == chat_text and 2 in pl, f"pllm records as a JSON list (ids by element): {pl}")

# ---------------------------------------------------------------- .zst and stdin/stdout
good = [r for r in pllm_lines if isinstance(r, dict) and r["id"] in ("g1", "g2")] + \
       [{"id": f"z{i}", "prompt": f"Count to {i}:", "max_tokens": 3} for i in range(4)]
plain = t.write("good.jsonl", good)
rc, ref_out, err = t.run(["generate", plain, "--quiet"])
t.check(rc == 0, f"clean run exits 0: {rc} {err[-300:]}")
subprocess.run(["zstd", "-q", "-f", plain, "-o", plain + ".zst"], check=True)
zout = t.path("out.jsonl.zst")
rc, _, err = t.run(["generate", plain + ".zst", "-o", zout, "--quiet"])
t.check(rc == 0 and canon(read_records(zout)) == canon(records(ref_out)), f".zst in and out round trip: {rc} {err[-300:]}")
rc, out, err = t.run(["generate", "-", "--quiet"], stdin=open(plain, "rb").read())
t.check(rc == 0 and canon(records(out)) == canon(records(ref_out)), "stdin in, stdout out")
rc, out, err = t.run(["generate", "-", "--quiet", "-o", "-"], stdin=subprocess.run(["zstd", "-dc", plain + ".zst"], capture_output=True).stdout)
t.check(rc == 0 and canon(records(out)) == canon(records(ref_out)), "zstd -dc | pllm generate - -o -")
sgz = sg_json + ".zst"
subprocess.run(["zstd", "-q", "-f", sg_json, "-o", sgz], check=True)
rc, out, err = t.run(["generate", sgz, "--quiet", "--max-tokens", "3", "--max-model-len", "1024"])
t.check(canon(records(out.replace("sg.json.zst:", "sg.json:"))) == canon(list(sg.values())),
        "a .zst ShareGPT list streams like the plain one")

# ---------------------------------------------------------------- --order input
order_in = [{"id": f"o{i}", "prompt": f"Story {i}:", "max_tokens": 12 - 2 * i, "n": 2 if i == 1 else 1} for i in range(6)]
op = t.write("order.jsonl", order_in)
rc, out, err = t.run(["generate", op, "--quiet", "--order", "input", "--window", "2", "--reorder-buffer", "3"])
ids = [(r["id"], r.get("index", 0)) for r in records(out)]
want = [("o0", 0), ("o1", 0), ("o1", 1), ("o2", 0), ("o3", 0), ("o4", 0), ("o5", 0)]
t.check(rc == 0 and ids == want, f"--order input (small window and reorder buffer): {ids}")
rc, out, err = t.run(["generate", op, "--quiet"])
t.check(rc == 0 and sorted((r["id"], r.get("index", 0)) for r in records(out)) == want, "--order completion: the same set")

# ---------------------------------------------------------------- progress and usage
rc, _, err = t.run(["generate", plain, "--log-interval", "0.001"])
t.check(rc == 0 and "[pllm generate]" in err and "req" in err and "tok/s" in err, f"progress log lines when not a terminal: {err[-500:]}")
rc, out, err = t.run(["generate", plain, "--quiet"])
t.check(rc == 0 and err == "", f"--quiet: nothing on stderr: {err!r}")
r = subprocess.run(["script", "-qec", f"{os.environ.get('PLLM_BIN', 'pllm')} generate {plain} -o {t.path('tty.jsonl')}", "/dev/null"],
                   capture_output=True, timeout=600)
tty = r.stdout.decode("utf-8", "replace")
t.check(r.returncode == 0 and "\r\x1b[K[pllm generate]" in tty and "ETA" in tty and "cache hit" in tty,
        f"a progress line redrawn on a terminal: {tty[-400:]!r}")
for args, code, needle in [(["generate", plain, "--format", "xml"], 2, "--format"),
                           (["generate", plain, "--order", "random"], 2, "--order"),
                           (["generate", plain, "--window", "8", "--reorder-buffer", "4"], 2, "--reorder-buffer"),
                           (["generate", t.path("missing.jsonl")], 3, "missing.jsonl"),
                           (["generate", plain, "--resume"], 2, "--resume")]:
    rc, _, err = t.run(args)
    t.check(rc == code and needle in err, f"{args[2:]}: exit {code} naming {needle}: {rc} {err[-200:]}")

t.finish()
