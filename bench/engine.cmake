# engine_bench: engine overhead per step (null backend) and prefix-cache hit rate on
# interleaved shared-prefix groups. Run: build/bench/engine_bench [n_requests] [n_blocks] [n_groups]
add_executable(engine_bench ${CMAKE_CURRENT_SOURCE_DIR}/engine_bench.c)
target_link_libraries(engine_bench PRIVATE pllm_core)
