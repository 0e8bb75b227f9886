# GPU benchmarks (owner: cuda). Run by hand on a machine with a GPU: bench/gpu/run.sh (see there).
#   kernel_bench      every kernel and GEMM of a step against the device's measured peaks
#   kernel_bench_emu  the same code on the emulator: the cuda_kernel_bench_smoke test runs it on
#                     tiny shapes so the benchmark stays correct without a GPU
if(TARGET pllm_cuda)
  add_executable(kernel_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpu/kernel_bench.c)
  target_link_libraries(kernel_bench PRIVATE pllm_cuda pllm_core m)
endif()
if(TARGET pllm_cuda_emu)
  add_executable(kernel_bench_emu ${CMAKE_CURRENT_SOURCE_DIR}/gpu/kernel_bench.c)
  target_link_libraries(kernel_bench_emu PRIVATE pllm_cuda_emu pllm_core m)
  add_test(NAME cuda_kernel_bench_smoke COMMAND kernel_bench_emu --dims tiny)
  set_tests_properties(cuda_kernel_bench_smoke PROPERTIES LABELS cuda SKIP_RETURN_CODE 77)
endif()
