#!/usr/bin/env bash
# run-shards.sh: pllm over a few hosts with GNU parallel (or over the local GPUs/cores with
# xargs), then one merge. The input and the output directory must be on a filesystem every host
# sees (NFS, a shared volume); each host needs pllm and the model.
#
#   examples/parallel/run-shards.sh PROMPTS OUTDIR N [HOSTS] [-- PLLM ARGS...]
#     N       number of shards (each host runs one at a time; parallel hands out the next
#             shard as one finishes, so N may exceed the hosts)
#     HOSTS   GNU parallel --sshlogin list, e.g. "gpu1,gpu2" or "2/gpu1,2/gpu2" (2 jobs each);
#             ":" or empty: this machine only
#   e.g.  examples/parallel/run-shards.sh /shared/prompts.jsonl /shared/out 8 gpu1,gpu2 -- --max-tokens 256
#
# Rerunning the same command after a failure resumes every shard (--resume): finished records
# are kept, nothing is done twice. Without GNU parallel, on one machine:
#   seq 0 3 | xargs -P 4 -I{} pllm generate prompts.jsonl --shard {}/4 -o out/shard-{}-of-4.jsonl --resume
#   pllm merge out/shard-*-of-4.jsonl -o merged.jsonl --order input
set -euo pipefail
PROMPTS=${1:?PROMPTS}; OUTDIR=${2:?OUTDIR}; N=${3:?N}; shift 3
HOSTS=":"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then HOSTS=$1; shift; fi
[ "${1:-}" = "--" ] && shift
PLLM=${PLLM:-pllm}
mkdir -p "$OUTDIR"
# {} is the shard number; ssh'd commands get their arguments quoted by parallel
seq 0 $((N - 1)) | parallel --sshlogin "$HOSTS" --jobs 1 --halt soon,fail=1 --line-buffer --tag \
    "$PLLM" generate "$PROMPTS" --shard "{}/$N" -o "$OUTDIR/shard-{}-of-$N.jsonl" --resume \
    --stats-json "$OUTDIR/shard-{}-of-$N.jsonl.stats.json" "$@"
shards=()
for k in $(seq 0 $((N - 1))); do shards+=("$OUTDIR/shard-$k-of-$N.jsonl"); done
"$PLLM" merge "${shards[@]}" -o "$OUTDIR/merged.jsonl" --overwrite --order input \
    --input "$PROMPTS" --stats-json "$OUTDIR/merged.stats.json"
