#!/usr/bin/env python3
"""A CPU backend test on tests/gen_hf_models.py's random Qwen3-MoE GGUFs (F32 and Q8_0: the float
and the integer expert paths), given as its arguments: cpu_workspace (the backend's
workspace_bytes against what a step allocates, and the engine's default KV budget leaving it
out: tests/cpu_workspace.c) or cpu_phase_stats (the per-phase timer: tests/cpu_phase_stats.c).

    cpu_workspace.py CPU_WORKSPACE|CPU_PHASE_STATS
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cpu_workspace.py CPU_WORKSPACE|CPU_PHASE_STATS")
    tmp = os.environ.get("PLLM_TEST_TMP") or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        subprocess.run([sys.executable, os.path.join(HERE, "gen_hf_models.py"), d], check=True,
                       capture_output=True)
        models = [os.path.join(d, f) for f in ("qwen3moe-f32.gguf", "qwen3moe-q8_0.gguf")]
        for m in models:
            if not os.path.exists(m):
                sys.exit(f"{os.path.basename(sys.argv[1])}: gen_hf_models.py wrote no {os.path.basename(m)}: {sorted(os.listdir(d))}")
        p = subprocess.run([sys.argv[1]] + models, capture_output=True, text=True)
        sys.stderr.write(p.stderr)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
