# CPU backend tests (owner: cpu).
pllm_add_c_test(cpu_kernels SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_kernels.c LABELS unit)

# The logits tool: runs token sequences through real batch plans (used by the Python tests).
add_executable(cpu_logits_tool ${CMAKE_CURRENT_SOURCE_DIR}/cpu_logits_tool.c ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c)
target_link_libraries(cpu_logits_tool PRIVATE pllm_cpu pllm_core)
pllm_add_py_test(cpu_forward_ref cpu_forward_ref.py LABELS unit)
pllm_add_py_test(cpu_model_ref cpu_model_ref.py LABELS model)
# the CPU backend's step workspace (the MoE expert scratch) left out of the default KV budget
pllm_add_c_test(cpu_workspace SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_workspace.c LABELS unit)
pllm_add_py_test(cpu_workspace_moe cpu_workspace.py LABELS unit ARGS $<TARGET_FILE:cpu_workspace>)
# the per-phase timer of the forward pass (PLLM_CPU_PHASE_STATS), dense and MoE
pllm_add_c_test(cpu_phase_stats SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_phase_stats.c LABELS unit)
pllm_add_py_test(cpu_phase_stats_moe cpu_workspace.py LABELS unit ARGS $<TARGET_FILE:cpu_phase_stats>)
