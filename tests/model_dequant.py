#!/usr/bin/env python3
"""pllm's reference dequantizer (model/dtype.c, pllm_dequantize_row) against the PyPI gguf
package's (gguf.quants.dequantize), on fresh random data, for every quantized type pllm knows.

Data per type:
  - "quantized": random normal floats (with a few rows of large and tiny magnitude) quantized by
    gguf.quants.quantize, where the package implements it (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1);
  - "random": uniformly random block bytes with the block's half-float scales replaced by
    finite random values (every bit pattern of the quants, sub-block scales and mins occurs);
  - "raw": uniformly random bytes, scales included (inf/nan/subnormal scales; NaN compared
    equal to NaN).
Expected: bitwise identical floats (both compute the same float32 products in the same order:
d*scale then *q, minus dmin*min). The max abs difference is printed per case.
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
# byte offsets of the half-float scales inside one block
SCALES = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
N_BLOCKS_ELEMS = 256 * 96  # elements per case: 96 super-blocks / 768 small blocks


def tool():
    build = os.environ.get("PLLM_BUILD")
    if not build:
        sys.exit("PLLM_BUILD is not set (run through ctest)")
    return os.path.join(build, "tests", "model_tool")


def pllm_dequant(tmp, name, raw, n):
    src, dst = os.path.join(tmp, name + ".bin"), os.path.join(tmp, name + ".f32")
    raw.tofile(src)
    subprocess.run([tool(), "dequant", name.split("-")[0], str(n), src, dst], check=True)
    return np.fromfile(dst, dtype=np.float32)


def main():
    tmp = os.path.join(os.environ.get("PLLM_TEST_TMP", "/tmp"), "model_dequant")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    failures, n_cases = [], 0
    for tname in TYPES:
        qt = Q[tname]
        be, bb = GGML_QUANT_SIZES[qt]
        n = N_BLOCKS_ELEMS
        nb = n // be
        if subprocess.run([tool(), "supported", tname]).returncode != 0:
            failures.append(f"{tname}: pllm_dtype_supported() is false")
        cases = {}
        x = rng.standard_normal((nb // 4, 4 * be)).astype(np.float32)
        x[0] *= 1e4
        x[1] *= 1e-4
        try:
            cases["quantized"] = quantize(x, qt).reshape(-1)
        except NotImplementedError:
            pass
        rnd = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
        for off in SCALES[tname]:
            h = (rng.standard_normal(nb) * rng.choice([1e-3, 1e-1, 1.0, 30.0], size=nb)).astype(np.float16)
            rnd[:, off:off + 2] = h.view(np.uint8).reshape(nb, 2)
        cases["random"] = rnd.reshape(-1)
        cases["raw"] = rng.integers(0, 256, size=nb * bb, dtype=np.uint8)
        for cname, raw in cases.items():
            n_cases += 1
            want = dequantize(raw, qt).reshape(-1).astype(np.float32)
            got = pllm_dequant(tmp, f"{tname}-{cname}", raw, n)
            fin = np.isfinite(want) & np.isfinite(got)
            diff = float(np.abs(want[fin] - got[fin]).max()) if fin.any() else 0.0
            same = np.array_equal(want, got, equal_nan=True)
            print(f"{tname:5s} {cname:9s} {n} elements ({nb} blocks of {bb} bytes): "
                  f"bitwise {'identical' if same else 'DIFFERENT'}, max abs diff {diff:.3g}, "
                  f"non-finite {int((~np.isfinite(want)).sum())}")
            if not same:
                bad = np.nonzero(~((want == got) | (np.isnan(want) & np.isnan(got))))[0]
                failures.append(f"{tname} {cname}: {len(bad)} elements differ, first at {bad[0]}: "
                                f"pllm {got[bad[0]]!r} gguf {want[bad[0]]!r}")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        return 1
    print(f"model_dequant: all {n_cases} cases bitwise identical to gguf.quants.dequantize")
    return 0


if __name__ == "__main__":
    sys.exit(main())
