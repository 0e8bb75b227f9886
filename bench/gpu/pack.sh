#!/usr/bin/env bash
# bench/gpu/pack.sh: build here what bench/gpu/check.sh runs on a GPU machine, and pack it.
#
#     bench/gpu/pack.sh [BUILD_DIR]          (default BUILD_DIR: build-gpu)
#
# A GPU machine lent for a few minutes has the CUDA toolkit, PyTorch and transformers, but none
# of pllm's -dev packages (jansson, zstd, pcre2, xxhash, icu), no `gguf` Python package and no
# network. So the binaries are built here, for that machine:
#   - -DPLLM_NATIVE=OFF: this machine's -march=native may fault on the other machine's CPU;
#   - -DCMAKE_CUDA_ARCHITECTURES="${PLLM_GPU_ARCHS:-90a}": H100/H200 (set 80;90a for an A100);
# and packed into .gpu/pllm-gpu.tar.xz (ignored by git) with what they need there:
#   bin/     pllm, kernel_bench
#   tests/   the GPU twins (cuda_ops_gpu, cuda_fp8_gpu, cuda_sampler_gpu, cuda_backend_gpu, cuda_flashinfer_gpu,
#            cuemu_kernels_gpu,
#            cuemu_device_gpu) and cuda_vs_cpu_gpu (the tool tests/cuda_e2e.py drives)
#   lib/     the shared libraries the binaries link outside glibc/libstdc++ (ldd); cuBLAS is
#            not among them: pllm loads it at run time (cuda/device.cpp), check.sh finds it
#   site/    the `gguf` package (pure Python) that tests/gen_models.py needs
#   tokenizer/  the phi-3-mini tokenizer (../shared/data: Llama-2's vocabulary) for the
#            random-weight 7B-shape model check.sh writes there
# The scripts (check.sh, mkmodel.py, hf_baseline.py, tests/*.py) travel with the checkout.
# Then, on the device tool:  run(command="bench/gpu/check.sh", carry=[".gpu"]).
# The pack is 10-15 MB; a GPU machine may receive 64 MiB a call.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
data=${PLLM_SHARED_DATA:-$root/../shared/data}
tok=$data/tokenizers/phi-3-mini
[ -f "$tok/tokenizer.json" ] || { echo "pack.sh: $tok/tokenizer.json is missing (set PLLM_SHARED_DATA)" >&2; exit 2; }
command -v nvcc >/dev/null || { echo "pack.sh: nvcc is not on PATH: the CUDA backend cannot be built" >&2; exit 2; }

twins="cuda_ops_gpu cuda_fp8_gpu cuda_sampler_gpu cuda_backend_gpu cuda_flashinfer_gpu cuemu_kernels_gpu cuemu_device_gpu"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPLLM_NATIVE=OFF -DPLLM_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${PLLM_GPU_ARCHS:-90a}" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j"$(nproc)" --target pllm kernel_bench cuda_vs_cpu_gpu $twins

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$stage/lib" "$stage/site" "$stage/tokenizer"
cp "$build/pllm" "$build/bench/kernel_bench" "$stage/bin/"
for t in $twins cuda_vs_cpu_gpu; do
    f=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
    [ -n "$f" ] || { echo "pack.sh: $t was not built in $build" >&2; exit 1; }
    cp "$f" "$stage/tests/"
done
strip --strip-debug "$stage"/bin/* "$stage"/tests/*
for b in "$stage"/bin/* "$stage"/tests/*; do
    ldd "$b" | awk '/=>/ {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libdl|libpthread|librt)\.so' |
    while read -r l; do cp -L "$l" "$stage/lib/"; done
gguf_dir=$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')
cp -r "$gguf_dir" "$stage/site/"
find "$stage/site" -name __pycache__ -prune -exec rm -rf {} +
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$stage/tokenizer/"
(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown) > "$stage/COMMIT"

mkdir -p "$root/.gpu"
tar -cJf "$root/.gpu/pllm-gpu.tar.xz" -C "$stage" .
echo "pack.sh: $(du -h "$root/.gpu/pllm-gpu.tar.xz" | cut -f1) in .gpu/pllm-gpu.tar.xz (commit $(cat "$stage/COMMIT")):"
echo "  libraries: $(ls "$stage/lib" | tr '\n' ' ')"
echo "  run it on a GPU machine: bench/gpu/check.sh   (device tool: carry [\".gpu\"])"
