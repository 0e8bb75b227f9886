# moe_bench: a mixture-of-experts model (Qwen3-30B-A3B's ratios scaled down) against a dense model
# of the same active parameter count, batched on the CPU. Run: bench/moe_bench.sh
add_executable(moe_bench ${CMAKE_CURRENT_SOURCE_DIR}/moe_bench.c)
target_link_libraries(moe_bench PRIVATE pllm_cpu pllm_core)
