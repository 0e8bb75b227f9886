# GGUF reader and model loader: every malformed file gets a clear error (file, field, offset).
add_executable(gguf_check ${CMAKE_CURRENT_SOURCE_DIR}/gguf_check.c)
target_link_libraries(gguf_check PRIVATE pllm_core)
pllm_add_py_test(gguf_malformed gguf_malformed.py LABELS unit ARGS $<TARGET_FILE:gguf_check>)
