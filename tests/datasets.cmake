pllm_add_c_test(datasets_unit SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/datasets_unit.c LABELS unit)
pllm_add_c_test(datasets_ordered_writer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/datasets_ordered_writer.c
                LABELS unit)
