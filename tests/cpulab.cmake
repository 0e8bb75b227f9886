# CPU performance-lab tests (owner: cpulab): the tiled attention and the thread pool.
pllm_add_c_test(cpu_attn SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_attn.c LABELS unit)
pllm_add_c_test(cpu_pool SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_pool.c LABELS unit)
