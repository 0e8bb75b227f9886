# CPU performance lab (owner: cpulab). Run by hand or through bench/cpu_report.sh.
#   ceilings       the machine's read bandwidth and fp32 / int8 (VNNI, AMX) peaks: build/bench/ceilings [--json F]
add_executable(ceilings ${CMAKE_CURRENT_SOURCE_DIR}/ceilings.c)
target_link_libraries(ceilings PRIVATE pllm_cpu pllm_core)
