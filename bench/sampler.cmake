# sampler_bench: microseconds per pllm_sample call (greedy, temperature, top-p, top-k, min-p,
# penalties) on 49152 and 151936 vocabularies. Run: build/bench/sampler_bench [iterations]
add_executable(sampler_bench ${CMAKE_CURRENT_SOURCE_DIR}/sampler_bench.c)
target_link_libraries(sampler_bench PRIVATE pllm_core)
