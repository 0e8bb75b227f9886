# Reliability (issue 8): fault tests, each of which really provokes its fault, and the limits of
# the file readers. Label "rel" (plus unit/model: what they need). A test that fails because the
# product lacks a behaviour stays registered and fails visibly (see tests/fuzz/README.md).
pllm_add_c_test(rel_mapped_file SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rel_mapped_file.c LABELS "unit;rel")
pllm_add_c_test(rel_gguf_limits SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rel_gguf_limits.c LABELS "unit;rel")
