# Model loading (owner: models): GGUF and Hugging Face directories, K-quant dequantization,
# RoPE/layout conventions across formats, random-weight test models, a second real model.
add_executable(model_tool ${CMAKE_CURRENT_SOURCE_DIR}/model_tool.c)
target_link_libraries(model_tool PRIVATE pllm_core)
pllm_add_py_test(model_dequant model_dequant.py LABELS unit)
pllm_add_py_test(model_forward model_forward.py LABELS unit)
pllm_add_py_test(model_forward_kquant model_forward.py ARGS --group kquant LABELS unit)
pllm_add_py_test(model_forward_ropefreqs model_forward.py ARGS --group ropefreqs LABELS unit)
pllm_add_py_test(model_hf_malformed model_hf_malformed.py LABELS unit)
pllm_add_c_test(model_st_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_st_fuzz.c LABELS unit)
pllm_add_py_test(model_qwen2_real model_qwen2_real.py LABELS model)
pllm_add_py_test(model_hf_real model_hf_real.py LABELS model)
set_tests_properties(model_qwen2_real PROPERTIES TIMEOUT 900)
