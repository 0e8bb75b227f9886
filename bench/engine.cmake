# engine_bench: engine overhead per step (null backend) and prefix-cache hit rate against the best
# achievable on interleaved shared-prefix workloads. Run: build/bench/engine_bench [workload] ...
add_executable(engine_bench ${CMAKE_CURRENT_SOURCE_DIR}/engine_bench.c)
target_link_libraries(engine_bench PRIVATE pllm_core)

# engine_model_bench: the issue's benchmarks (a) ShareGPT batching, (b) shared prefix cache on/off,
# (c) the same with a small KV budget, on the real default model. Run: build/bench/engine_model_bench
add_executable(engine_model_bench ${CMAKE_CURRENT_SOURCE_DIR}/engine_model_bench.c)
target_link_libraries(engine_model_bench PRIVATE pllm_cpu pllm_core)
target_compile_definitions(engine_model_bench PRIVATE PLLM_DEFAULT_SHARED_DATA="${PLLM_SHARED_DATA}")

# kv_quality: int8 KV cache against fp16 (and fp32) on a real model and ShareGPT prompts: greedy
# agreement and logit errors. Run: build/bench/kv_quality [--model PATH] [--prompts 100] [--tokens 128]
add_executable(kv_quality ${CMAKE_CURRENT_SOURCE_DIR}/kv_quality.c)
target_link_libraries(kv_quality PRIVATE pllm_cpu pllm_core)
target_compile_definitions(kv_quality PRIVATE PLLM_DEFAULT_SHARED_DATA="${PLLM_SHARED_DATA}")

# overlap_bench: the host side of a decode step at 256 sequences, synchronous vs one step in
# flight, on a null device of a given step time. Run: build/bench/overlap_bench [n_seqs] [device_us]
add_executable(overlap_bench ${CMAKE_CURRENT_SOURCE_DIR}/overlap_bench.c)
target_link_libraries(overlap_bench PRIVATE pllm_core)
