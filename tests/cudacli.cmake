# The command line on the CUDA backend (owner: cuda, issue 7), label "cuda".
#
# pllm-emu: the pllm binary (the same cmd/ sources) linked with the emulated CUDA library
# (pllm_cuda_emu, cuda/emu/) instead of the real one, so `--device cuda` runs the CUDA backend's
# host code and kernels on the host. Test-only: never installed, and pllm itself never links the
# emulator. Its one device is the emulator's (cudaGetDeviceCount 1, the memory
# PLLM_CUEMU_MEM_MB says, default 1024 MiB).
#
# cudacli_e2e: pllm-emu generate --device cuda against pllm generate --device cpu (identical
# greedy tokens) on random test models and on short prompts of the real default model; the
# device selection messages of both binaries (--device cuda / cuda:N / auto / bad values on
# this machine), --gpu-memory-fraction sizing the KV pool and its validation errors.
if(TARGET pllm_cuda_emu)
  add_executable(pllm-emu ${PLLM_CMD_SRC})
  target_link_libraries(pllm-emu PRIVATE pllm_cpu pllm_cuda_emu pllm_core)
  target_compile_definitions(pllm-emu PRIVATE PLLM_HAVE_CUDA=1)
  pllm_add_py_test(cudacli_e2e cudacli_e2e.py LABELS cuda
                   ARGS $<TARGET_FILE:pllm-emu> $<TARGET_EXISTS:pllm_cuda>)
  # generate --device cuda:0,1: a worker per (emulated) device, one merged output
  pllm_add_py_test(cli_devices cli_devices.py LABELS cuda ARGS $<TARGET_FILE:pllm-emu>)
  # --kv-cache-dtype fp8: greedy agreement with fp16 KV, twice the blocks, refusals
  pllm_add_py_test(cuda_fp8_e2e cuda_fp8_e2e.py LABELS cuda ARGS $<TARGET_FILE:pllm-emu>)
else()
  add_test(NAME cudacli_e2e COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: CUDA toolkit headers (cuda_fp16.h) not found")
  set_tests_properties(cudacli_e2e PROPERTIES LABELS cuda SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
