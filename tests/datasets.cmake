pllm_add_c_test(datasets_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/datasets_unit.c LABELS unit)
