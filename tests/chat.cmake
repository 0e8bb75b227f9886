# Chat templates (tokenizer/chat_template.h, tokenizer/jinja_*.c): error reporting, limits and
# fuzz robustness in C; byte parity with Python jinja2 (as transformers sets it up) on every
# real template in the shared data, the default model's GGUF template and extra templates.
add_executable(chat_tool ${CMAKE_CURRENT_SOURCE_DIR}/chat_tool.c)
target_link_libraries(chat_tool PRIVATE pllm_core)

pllm_add_c_test(chat_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/chat_unit.c LABELS unit)
pllm_add_py_test(chat_parity chat_parity.py LABELS unit ARGS $<TARGET_FILE:chat_tool>)
