# CPU backend benchmarks (owner: cpu). Run by hand: build/bench/decode_bench [MODEL] [--threads 1,2]
add_executable(decode_bench ${CMAKE_CURRENT_SOURCE_DIR}/decode_bench.c)
target_link_libraries(decode_bench PRIVATE pllm_cpu pllm_core)
