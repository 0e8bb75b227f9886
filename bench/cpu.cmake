# CPU backend benchmarks (owner: cpu). Run by hand: build/bench/decode_bench [MODEL] [--threads 1,2]
add_executable(decode_bench ${CMAKE_CURRENT_SOURCE_DIR}/decode_bench.c)
target_link_libraries(decode_bench PRIVATE pllm_cpu pllm_core)
# The kernel lab (owner: cpu gemm): variants of the matmul, checked and timed. Run by hand:
# build/bench/gemm_lab [--quick] [--dtype Q4_1]
add_executable(gemm_lab ${CMAKE_CURRENT_SOURCE_DIR}/lab/gemm_lab.c ${CMAKE_SOURCE_DIR}/tests/testutil.c)
target_link_libraries(gemm_lab PRIVATE pllm_cpu pllm_core)
