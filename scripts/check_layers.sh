#!/usr/bin/env bash
# check_layers.sh: fail when a source file includes a header from a folder above its own.
#
# The layers (docs/architecture.md; the same rule the build enforces by giving each folder's
# library only its dependencies' include roots, see CMakeLists.txt):
#
#   cmd        -> datasets engine tokenizer cpu cuda model
#   datasets   -> engine tokenizer model
#   engine     -> tokenizer model
#   tokenizer  -> model
#   cpu, cuda  -> model          (backends see the contract, model/backend.h, never the engine)
#   model      -> (nothing of ours: the foundation)
#
# Checked: every `#include "folder/..."` in the tracked .c/.h/.cpp/.cu/.cuh files of those
# folders, and no `#include "../..."` anywhere in them. tests/ and bench/ sit above everything.
#
#   scripts/check_layers.sh          check the tree; exit 1 listing every violation
set -euo pipefail
cd "$(dirname "$0")/.."

allowed() {
    case "$1" in
    model) echo "model" ;;
    tokenizer) echo "tokenizer model" ;;
    engine) echo "engine tokenizer model" ;;
    datasets) echo "datasets engine tokenizer model" ;;
    cpu) echo "cpu model" ;;
    cuda) echo "cuda model" ;;
    cmd) echo "cmd datasets engine tokenizer cpu cuda model" ;;
    *) return 1 ;;
    esac
}
layers="model tokenizer engine datasets cpu cuda cmd"

bad=0
n_files=0
for layer in $layers; do
    ok=" $(allowed "$layer") "
    while IFS= read -r f; do
        n_files=$((n_files + 1))
        # lines: NUMBER:#include "dir/file.h"
        while IFS=: read -r line text; do
            inc=${text#*\"}
            inc=${inc%%\"*}
            case "$inc" in
            ../* | */../*)
                echo "$f:$line: relative include \"$inc\" (name the folder: \"folder/file.h\")" >&2
                bad=$((bad + 1))
                continue
                ;;
            */*) ;;
            *) continue ;; # same folder
            esac
            top=${inc%%/*}
            case " $layers " in
            *" $top "*) ;;
            *) continue ;; # not one of our folders (e.g. a system path)
            esac
            if [[ "$ok" != *" $top "* ]]; then
                echo "$f:$line: $layer/ includes \"$inc\": $top/ is not below $layer/ (allowed: $(allowed "$layer"))" >&2
                bad=$((bad + 1))
            fi
        done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
    done < <(git ls-files -- "$layer/" | grep -E '\.(c|h|cpp|cu|cuh)$')
done

if [ "$bad" -gt 0 ]; then
    echo "check_layers: FAILED: $bad include(s) point up or sideways (layers: docs/architecture.md)" >&2
    exit 1
fi
echo "check_layers: $n_files files, every include points down"
