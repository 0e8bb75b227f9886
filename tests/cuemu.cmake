# Tests of the CUDA emulator and of the CUDA kernels run through it (label "cuda"). They need no
# GPU, only the CUDA toolkit's headers; the spill check needs the real nvcc build.
if(TARGET pllm_cuda_emu)
  # a .cu file of the tests, compiled as host C++ against the emulator
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/cuemu_selftest.cu PROPERTIES
                              LANGUAGE CXX COMPILE_OPTIONS "${PLLM_CUDA_EMU_CU_OPTIONS}")
  pllm_add_c_test(cuemu_selftest SOURCES cuemu_selftest.cu LABELS cuda)
  target_link_libraries(cuemu_selftest PRIVATE pllm_cuda_emu)
  pllm_add_c_test(cuemu_kernels SOURCES cuemu_kernels.c LABELS cuda)
  target_link_libraries(cuemu_kernels PRIVATE pllm_cuda_emu)
  pllm_add_c_test(cuemu_device SOURCES cuemu_device.c LABELS cuda)
  target_link_libraries(cuemu_device PRIVATE pllm_cuda_emu)
  # what the emulator does not provide must fail to compile or link
  pllm_add_py_test(cuemu_unemulated cuemu_unemulated.py LABELS cuda
                   ARGS ${CMAKE_CXX_COMPILER} ${PLLM_CUDA_INCLUDE_DIR} ${CMAKE_SOURCE_DIR} $<TARGET_FILE:pllm_cuda_emu>)
  if(PLLM_SANITIZE)
    # the library is instrumented: the snippets link with the sanitizer runtimes too
    set_property(TEST cuemu_unemulated APPEND PROPERTY ENVIRONMENT "PLLM_CUEMU_EXTRA_FLAGS=-fsanitize=address,undefined")
  endif()
else()
  foreach(t cuemu_selftest cuemu_kernels cuemu_device cuemu_unemulated)
    add_test(NAME ${t} COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: CUDA toolkit headers (cuda_fp16.h) not found")
    set_tests_properties(${t} PROPERTIES LABELS cuda SKIP_REGULAR_EXPRESSION "SKIPPED")
  endforeach()
endif()

if(TARGET pllm_cuda)
  # the same kernel and device checks on a real GPU (they skip when none answers)
  foreach(t kernels device)
    pllm_add_c_test(cuemu_${t}_gpu SOURCES cuemu_${t}.c LABELS cuda)
    target_link_libraries(cuemu_${t}_gpu PRIVATE pllm_cuda)
  endforeach()
  list(TRANSFORM PLLM_CUDA_KERNEL_SRC REPLACE ".*/" "" OUTPUT_VARIABLE _cuemu_cu_names)
  pllm_add_py_test(cuemu_spills cuemu_spills.py LABELS cuda ARGS ${PLLM_CUDA_PTXAS_DIR} ${_cuemu_cu_names})
else()
  pllm_add_py_test(cuemu_spills cuemu_spills.py LABELS cuda ARGS --no-nvcc)
endif()
