# The pllm binary: unit tests of the statistics report, and end-to-end tests on the real
# default model (label model; each runs in well under a minute on 2 cores).
pllm_add_c_test(cli_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cli_unit.c LABELS unit)
pllm_add_py_test(generate_e2e generate_e2e.py LABELS model)
set_tests_properties(generate_e2e PROPERTIES TIMEOUT 900)
pllm_add_py_test(cli_formats cli_formats.py LABELS model)
set_tests_properties(cli_formats PROPERTIES TIMEOUT 900)
pllm_add_py_test(cli_resume cli_resume.py LABELS model)
set_tests_properties(cli_resume PROPERTIES TIMEOUT 900)
pllm_add_py_test(cli_stream cli_stream.py LABELS model)
set_tests_properties(cli_stream PROPERTIES TIMEOUT 900)
pllm_add_py_test(cli_bench cli_bench.py LABELS model)
set_tests_properties(cli_bench PROPERTIES TIMEOUT 900)
pllm_add_py_test(cli_tools cli_tools.py LABELS model)
set_tests_properties(cli_tools PROPERTIES TIMEOUT 900)
# A model's generation defaults (generation_config.json) and their precedence, on a random-weight
# Hugging Face directory with a tokenizer written by the test (seconds).
pllm_add_py_test(cli_genconfig cli_genconfig.py LABELS unit)
# the chat template's thinking switch (--thinking) on a random Qwen3 model
pllm_add_py_test(cli_thinking cli_thinking.py LABELS unit)
# a random Phi-3 model whose vocabulary is padded past its tokenizer (as 32064 vs 32011)
pllm_add_py_test(cli_phi3_vocab cli_phi3_vocab.py LABELS unit)
set_tests_properties(cli_genconfig PROPERTIES TIMEOUT 300)
# Output guards, resume that cannot skip or duplicate, --strict, files that are not records,
# compression by magic bytes (issue 23; on the real default model, tiny prompts: ~1 minute).
pllm_add_py_test(cli_guard cli_guard.py LABELS model)
set_tests_properties(cli_guard PROPERTIES TIMEOUT 900)
# The bench gate against its measured noise (Welch's t-test, one run against a spread), on saved
# stats files (--current: nothing is run; seconds).
pllm_add_py_test(cli_gate cli_gate.py LABELS unit)
set_tests_properties(cli_gate PROPERTIES TIMEOUT 300)
# What a user meets first (issue 21): the README quick start's answers, record metadata and
# --extra-fields, a stopped run's report, per-request failures on a padded vocabulary, --plot
# SVGs, vLLM aliases and record defaults, refusals before the model loads (~1 minute).
pllm_add_py_test(cli_user cli_user.py LABELS model)
set_tests_properties(cli_user PROPERTIES TIMEOUT 900)
pllm_add_py_test(cli_prefix_cache cli_prefix_cache.py LABELS model)
set_tests_properties(cli_prefix_cache PROPERTIES TIMEOUT 900)
