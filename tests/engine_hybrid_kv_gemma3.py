#!/usr/bin/env python3
"""engine_hybrid_kv on tests/gen_hf_models.py's random Gemma 3 (GGUF F32: GeGLU, post-norms,
q/k norms, layers sliding/global/sliding with a window of 8 and their own RoPE base): the hybrid
KV layout against keeping every layer's K/V, greedy tokens and top logprobs identical on contexts
of 40..150 tokens (5 to 19 windows), on the CPU backend and the emulated CUDA backend (each
binary given; a missing one is skipped; the emulated one with --quick: fewer prompts and
configurations, the emulator being slow).

    engine_hybrid_kv_gemma3.py ENGINE_HYBRID_KV [ENGINE_HYBRID_KV_CUDA]
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: engine_hybrid_kv_gemma3.py ENGINE_HYBRID_KV [ENGINE_HYBRID_KV_CUDA]")
    tmp = os.environ.get("PLLM_TEST_TMP") or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        subprocess.run([sys.executable, os.path.join(HERE, "gen_hf_models.py"), d], check=True,
                       capture_output=True)
        model = os.path.join(d, "gemma3-f32.gguf")
        fails = 0
        for tool in sys.argv[1:]:
            if not os.path.exists(tool):
                print(f"engine_hybrid_kv_gemma3: {tool} not built, skipped")
                continue
            quick = ["--quick"] if "cuda" in os.path.basename(tool) else []
            p = subprocess.run([tool] + quick + [model], capture_output=True, text=True)
            sys.stderr.write(p.stderr)
            print(f"engine_hybrid_kv_gemma3: {os.path.basename(tool)} exit {p.returncode}")
            fails += p.returncode != 0
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
