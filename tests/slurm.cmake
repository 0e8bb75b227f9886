# Scaling out: pllm generate --shard and pllm merge on a real single-node Slurm (slurmctld,
# slurmd and munged started by the test on localhost; a 4-task array of
# examples/slurm/pllm-array.sbatch, one task requeued mid-run; ~15 s), and the shard/merge
# contract without Slurm (seconds).
pllm_add_py_test(cli_slurm cli_slurm.py LABELS model)
set_tests_properties(cli_slurm PROPERTIES TIMEOUT 300)
pllm_add_py_test(cli_shard cli_shard.py LABELS model)
set_tests_properties(cli_shard PROPERTIES TIMEOUT 300)
# The GNU parallel recipe (examples/parallel/run-shards.sh) as written, on this machine (seconds).
pllm_add_py_test(cli_parallel cli_parallel.py LABELS model)
set_tests_properties(cli_parallel PROPERTIES TIMEOUT 300)
