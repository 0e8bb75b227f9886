# Tokenizer (tokenizer/): C unit tests, and byte-for-byte parity with Hugging Face `tokenizers`
# on the default model through tok_tool (JSONL in, ids/decoded text out).
add_executable(tok_tool ${CMAKE_CURRENT_SOURCE_DIR}/tok_tool.c)
target_link_libraries(tok_tool PRIVATE pllm_core)
pllm_add_c_test(tok_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tok_unit.c LABELS unit)
pllm_add_py_test(tok_parity tok_parity.py LABELS model ARGS $<TARGET_FILE:tok_tool>)
pllm_add_c_test(tok_model SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tok_model.c LABELS model)
# SentencePiece-style and Hugging Face-file tokenizers (tokenizer.json, vocab.json + merges.txt,
# SentencePiece .model, GGUF "llama") against Hugging Face `tokenizers` on $PLLM_SHARED_DATA.
pllm_add_py_test(tok_parity_hf_json tok_parity_hf.py LABELS model ARGS $<TARGET_FILE:tok_tool> json)
pllm_add_py_test(tok_parity_hf_spm tok_parity_hf.py LABELS model ARGS $<TARGET_FILE:tok_tool> spm)
# The Hugging Face / SentencePiece builders on malformed and unsupported files (each refused,
# naming file and construct) and the BOS/EOS/stop/special facts they derive from good ones.
pllm_add_py_test(tok_hf_errors tok_hf_errors.py LABELS unit ARGS $<TARGET_FILE:tok_tool>)
