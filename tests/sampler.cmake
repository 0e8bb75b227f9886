# Sampler (model/sampler.c): unit tests in C, and a check against an independent numpy
# reference of the semantics in model/sampling.h through a small JSON-driven tool.
add_executable(sampler_tool ${CMAKE_CURRENT_SOURCE_DIR}/sampler_tool.c)
target_link_libraries(sampler_tool PRIVATE pllm_core)
pllm_add_py_test(sampler_ref sampler_ref.py LABELS unit ARGS $<TARGET_FILE:sampler_tool> 400)
pllm_add_c_test(sampler_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sampler_unit.c LABELS unit)
