# Reliability (issue 8): fault tests, each of which really provokes its fault, and the limits of
# the file readers. Label "rel" (plus unit/model: what they need). A test that fails because the
# product lacks a behaviour stays registered and fails visibly (see tests/fuzz/README.md).
pllm_add_c_test(rel_mapped_file SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rel_mapped_file.c LABELS "unit;rel")
pllm_add_c_test(rel_gguf_limits SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rel_gguf_limits.c LABELS "unit;rel")
# the pllm binary on the default model, each fault provoked for real (rel_common.py: helpers)
pllm_add_py_test(rel_signals rel_signals.py LABELS "model;rel")
pllm_add_py_test(rel_resume_zst rel_resume_zst.py LABELS "model;rel")
pllm_add_py_test(rel_disk_full rel_disk_full.py LABELS "model;rel")
pllm_add_py_test(rel_model_changed rel_model_changed.py LABELS "model;rel")
pllm_add_py_test(rel_kv_budget rel_kv_budget.py LABELS "model;rel")
pllm_add_py_test(rel_million rel_million.py LABELS "model;rel")
set_tests_properties(rel_signals rel_resume_zst rel_disk_full rel_model_changed rel_kv_budget PROPERTIES TIMEOUT 900)
set_tests_properties(rel_million PROPERTIES TIMEOUT 1800)
# a short real-model run, also what CI runs under ASan+UBSan (scripts/ci-extra.sh)
pllm_add_py_test(rel_generate_smoke rel_generate_smoke.py LABELS "model;rel")
# a line without end: the reader's cap (PLLM_READER_MAX_LINE) stops it with a clear error
pllm_add_py_test(rel_long_line rel_long_line.py LABELS "model;rel")
