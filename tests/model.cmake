# Model loading (owner: models): GGUF and Hugging Face directories, K-quant dequantization,
# RoPE/layout conventions across formats, random-weight test models, a second real model.
add_executable(model_tool ${CMAKE_CURRENT_SOURCE_DIR}/model_tool.c)
target_link_libraries(model_tool PRIVATE pllm_core)
pllm_add_py_test(model_dequant model_dequant.py LABELS unit)
pllm_add_py_test(model_forward model_forward.py LABELS unit)
pllm_add_py_test(model_forward_kquant model_forward.py ARGS --group kquant LABELS unit)
pllm_add_py_test(model_forward_ropefreqs model_forward.py ARGS --group ropefreqs LABELS unit)
pllm_add_py_test(model_forward_moe model_forward.py ARGS --group moe LABELS unit)
pllm_add_py_test(model_hf_malformed model_hf_malformed.py LABELS unit)
pllm_add_c_test(model_st_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_st_fuzz.c LABELS unit)
pllm_add_py_test(model_qwen2_real model_qwen2_real.py LABELS model)
pllm_add_py_test(model_hf_real model_hf_real.py LABELS model)
set_tests_properties(model_qwen2_real PROPERTIES TIMEOUT 900)
# Gemma 3 270M (scripts/setup.sh fetches it): logits within 1e-4 of a float reference, so the
# CPU's float32 path
pllm_add_py_test(model_gemma3_real model_gemma3_real.py LABELS model)
set_tests_properties(model_gemma3_real PROPERTIES TIMEOUT 900)
set_property(TEST model_gemma3_real APPEND PROPERTY ENVIRONMENT PLLM_CPU_MATH=f32)
# `pllm info` on every random-weight test model (and a GGUF with general.sampling.* keys)
pllm_add_py_test(model_info model_info.py LABELS unit)
