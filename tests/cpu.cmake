# CPU backend tests (owner: cpu).
pllm_add_c_test(cpu_kernels SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_kernels.c LABELS unit)
