# Tokenizer encode speed vs Hugging Face tokenizers: bench/tok_bench.py drives tok_bench.
add_executable(tok_bench ${CMAKE_CURRENT_SOURCE_DIR}/tok_bench.c)
target_link_libraries(tok_bench PRIVATE pllm_core)
