#!/usr/bin/env python3
"""A short real-model run of `pllm generate`, small enough for the sanitizer build (CI runs it
under ASan+UBSan+LeakSanitizer, where the pllm binary is ~20x slower): a raw prompt, a chat
prompt, n=2 sampled completions, a bad record, greedy answers that make sense, one line each,
and exit code 1 (a bad record was reported) with no sanitizer report on stderr."""
import json
import os

from rel_common import check, describe_exit, finish, log, need_model, run, tmpdir, write_jsonl

need_model()
TMP = tmpdir("rel_smoke_")
inp = write_jsonl(os.path.join(TMP, "in.jsonl"), [
    {"id": "raw", "prompt": "The capital of France is", "max_tokens": 3},
    {"id": "chat", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8},
    {"id": "two", "prompt": "Once upon a time", "max_tokens": 3, "n": 2, "temperature": 0.8, "seed": 7},
    '{"id": "bad", "prompt": 5}',
])
rc, out, err = run(["generate", inp, "--quiet", "--token-ids"], timeout=600)
recs = [json.loads(l) for l in out.splitlines() if l.strip()]
log(f"{describe_exit(rc)}; {len(recs)} lines; stderr: {err.strip()[-300:]}")
check(rc == 1, f"expected exit 1 (one bad record), got {describe_exit(rc)}")
check("Sanitizer" not in err and "runtime error" not in err, f"sanitizer report: {err[-2000:]}")
by = {}
for r in recs:
    by.setdefault(r["id"], []).append(r)
check(sorted(by) == ["bad", "chat", "raw", "two"] and len(by.get("two", [])) == 2,
      f"one line per completion: {sorted((k, len(v)) for k, v in by.items())}")
check("Paris" in by.get("chat", [{}])[0].get("text", ""), f"chat answer: {by.get('chat')}")
check(by.get("bad", [{}])[0].get("finish_reason") == "error", f"bad record: {by.get('bad')}")
check(all(len(r.get("token_ids", [])) == 3 for r in by.get("two", [])), f"n=2: {by.get('two')}")
finish("rel_generate_smoke")
