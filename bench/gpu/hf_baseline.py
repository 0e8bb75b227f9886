#!/usr/bin/env python3
"""Hugging Face transformers `generate` on the workload of `pllm bench --dataset random`: the peer
a user would otherwise run, at its best batch size (bench/gpu/check.sh).

    hf_baseline.py MODEL_DIR N INPUT_LEN OUTPUT_LEN [BATCH ...]

N prompts of INPUT_LEN random token ids (ids 100..31999, seed 0), each generating exactly
OUTPUT_LEN tokens greedily (fp16 weights, the model's default attention: sdpa), BATCH prompts at a
time. Each batch size given (default 256 128 64) runs the whole workload once after a short warm-up;
one that runs out of GPU memory is reported and skipped. Prints one `hf: {json}` line per batch
size and `hf-best: {json}` for the fastest (output tokens/s).
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: hf_baseline.py MODEL_DIR N INPUT_LEN OUTPUT_LEN [BATCH ...]")
    path, n, in_len, out_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    batches = [int(b) for b in sys.argv[5:]] or [256, 128, 64]
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float16, device_map="cuda").eval()
    print(f"hf: loaded in {time.time() - t0:.1f} s, attention {model.config._attn_implementation}", flush=True)
    ids = torch.randint(100, 32000, (n, in_len), generator=torch.Generator().manual_seed(0))
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None, max_new_tokens=out_len, min_new_tokens=out_len)
    best = None
    with torch.inference_mode():
        warm = ids[:2].cuda()
        model.generate(warm, attention_mask=torch.ones_like(warm), **dict(kw, max_new_tokens=4, min_new_tokens=4))
        for b in batches:
            try:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                t = time.time()
                produced = 0
                for i in range(0, n, b):
                    x = ids[i:i + b].cuda()
                    o = model.generate(x, attention_mask=torch.ones_like(x), **kw)
                    produced += (o.shape[1] - in_len) * o.shape[0]
                torch.cuda.synchronize()
                dt = time.time() - t
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                print(f"hf: batch {b}: out of GPU memory", flush=True)
                continue
            r = dict(engine="transformers", batch=b, requests=n, input_len=in_len, output_len=out_len,
                     seconds=round(dt, 2), output_throughput=round(produced / dt, 1),
                     total_token_throughput=round((produced + n * in_len) / dt, 1),
                     peak_mem_gb=round(torch.cuda.max_memory_allocated() / 1e9, 1))
            print("hf:", json.dumps(r), flush=True)
            if best is None or r["output_throughput"] > best["output_throughput"]:
                best = r
    if best is None:
        sys.exit("hf: every batch size ran out of memory")
    print("hf-best:", json.dumps(best))


if __name__ == "__main__":
    main()
