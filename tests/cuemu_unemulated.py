#!/usr/bin/env python3
"""cuemu_unemulated: CUDA features the emulator does not provide fail the emulated build.

A kernel relying on something not emulated must not compile (or link) against cuda_emu.h: no
silent fallback. Each snippet below is compiled as a .cu file of the emulated build would be
(-x c++, cuda_emu.h force-included); each must fail with the expected message, and the positive
controls must build, so the harness itself is tested.
Usage: cuemu_unemulated.py <c++ compiler> <cuda include dir> <source root> <libpllm_cuda_emu.a>
"""
import os
import subprocess
import sys
import tempfile

KERNEL_HEAD = '#include "cuda/launch.h"\n'

# (name, source, expected substring of the compiler/linker output, or None: must succeed, link?)
CASES = [
    ("control: checked shared memory compiles",
     KERNEL_HEAD + "__global__ void k(float *p) { PLLM_SHARED(float, s, 4); s[threadIdx.x % 4] = 1.f;"
     " __syncthreads(); p[threadIdx.x] = s[0]; }\n", None, False),
    ("__shared__ written directly",
     KERNEL_HEAD + "__global__ void k(float *p) { __shared__ float s[4]; s[0] = 1.f; p[0] = s[0]; }\n",
     "declare shared memory with PLLM_SHARED", False),
    ("extern __shared__ written directly",
     KERNEL_HEAD + "__global__ void k(float *p) { extern __shared__ float s[]; p[0] = s[0]; }\n",
     "declare shared memory with PLLM_SHARED", False),
    ("__constant__ memory",
     KERNEL_HEAD + "__constant__ float c[4];\n__global__ void k(float *p) { p[0] = c[0]; }\n",
     "__constant__ memory is not emulated", False),
    ("__activemask",
     KERNEL_HEAD + "__global__ void k(unsigned *p) { *p = __activemask(); }\n", "__activemask", False),
    ("__match_any_sync",
     KERNEL_HEAD + "__global__ void k(unsigned *p) { *p = __match_any_sync(0xffffffffu, 1); }\n",
     "__match_any_sync", False),
    ("triple-chevron launch",
     KERNEL_HEAD + "__global__ void k(int *p) { *p = 1; }\nvoid run(int *p) { k<<<1, 1>>>(p); }\n",
     "error", False),
    ("shuffle of a type CUDA has no overload for",
     KERNEL_HEAD + "struct pair { int a, b; };\n__global__ void k(pair *p) {"
     " p[0] = __shfl_sync(0xffffffffu, p[1], 0); }\n", "__shfl_sync", False),
    ("inline PTX",
     KERNEL_HEAD + "__global__ void k(unsigned *p) { unsigned r;"
     ' asm volatile("mov.u32 %0, %%laneid;" : "=r"(r)); *p = r; }\n', "no such instruction", False),
    ("control: an emulated runtime call links",
     KERNEL_HEAD + "int main() { void *p; return cudaMalloc(&p, 16) != cudaSuccess; }\n", None, True),
    ("a runtime call the emulator does not implement",
     KERNEL_HEAD + "int main() { void *p; return cudaMallocManaged(&p, 16) != cudaSuccess; }\n",
     "cudaMallocManaged", True),
]


def main():
    cxx, cuda_inc, root, emu_lib = sys.argv[1:5]
    emu_header = os.path.join(root, "cuda", "emu", "cuda_emu.h")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, src, expect, link) in enumerate(CASES):
            path = os.path.join(tmp, f"case{i}.cu")
            with open(path, "w") as f:
                f.write(src)
            cmd = [cxx, "-std=gnu++17", "-x", "c++", "-include", emu_header, "-I", root, "-isystem", cuda_inc,
                   "-D_GNU_SOURCE", "-DPLLM_CUDA_EMU=1", path]
            # the sanitizer build's library needs the sanitizer runtimes (tests/cuemu.cmake sets this)
            cmd += os.environ.get("PLLM_CUEMU_EXTRA_FLAGS", "").split()
            if link:
                cmd += ["-x", "none", emu_lib, "-lpthread", "-o", os.path.join(tmp, f"case{i}")]
            else:
                cmd += ["-c", "-o", os.path.join(tmp, f"case{i}.o")]
            r = subprocess.run(cmd, capture_output=True, text=True)
            out = r.stdout + r.stderr
            if expect is None:
                ok = r.returncode == 0
                verdict = "builds" if ok else "FAILED to build:\n" + out
            else:
                ok = r.returncode != 0 and expect in out
                first = next((ln for ln in out.splitlines() if "error" in ln or "undefined reference" in ln), "")
                verdict = f"rejected: {first.strip()}" if ok else (
                    f"NOT rejected as expected (rc {r.returncode}, wanted '{expect}'):\n{out}")
            print(f"{'ok  ' if ok else 'FAIL'} {name}: {verdict}")
            failures += not ok
    print(f"cuemu_unemulated: {len(CASES)} cases, {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
