# CPU performance lab (owner: cpulab). Run by hand or through bench/cpu_report.sh.
#   ceilings       the machine's read bandwidth and fp32 / int8 (VNNI, AMX) peaks: build/bench/ceilings [--json F]
add_executable(ceilings ${CMAKE_CURRENT_SOURCE_DIR}/ceilings.c)
target_link_libraries(ceilings PRIVATE pllm_cpu pllm_core)
#   pool_bench     thread pool barriers/s and empty regions/s: build/bench/pool_bench [--threads N]
add_executable(pool_bench ${CMAKE_CURRENT_SOURCE_DIR}/pool_bench.c)
target_link_libraries(pool_bench PRIVATE pllm_cpu pllm_core)
#   attn_lab       the attention tile's timing on the engine's shapes: build/bench/attn_lab [--ms 300]
add_executable(attn_lab ${CMAKE_CURRENT_SOURCE_DIR}/lab/attn_lab.c ${CMAKE_SOURCE_DIR}/tests/testutil.c)
target_link_libraries(attn_lab PRIVATE pllm_cpu pllm_core)
