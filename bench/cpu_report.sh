#!/bin/sh
# The issue-6 CPU benchmark report in one command: ceilings, old (pre-issue-6) vs current builds,
# the random TinyLlama-1.1B-shaped model, decode / prefill / ShareGPT figures. See cpu_report.py.
#   bench/cpu_report.sh [--old REV] [--threads N] [--rounds R] [--work DIR] [--quick] [--no-sharegpt] [--sharegpt-prompts N] [--sharegpt-output N]
exec python3 "$(dirname "$0")/cpu_report.py" "$@"
