# CPU backend benchmarks (owner: cpu). Run by hand: build/bench/decode_bench [MODEL] [--threads 1,2]
add_executable(decode_bench ${CMAKE_CURRENT_SOURCE_DIR}/decode_bench.c)
target_link_libraries(decode_bench PRIVATE pllm_cpu pllm_core)
if(PLLM_GEMM_LAB) # off in the asan preset (CMakeLists.txt)
  # The kernel lab (owner: cpu gemm): variants of the matmul, checked and timed. Run by hand:
  # build/bench/gemm_lab [--quick] [--head] [--dtype Q4_1] [--variants vnni,rolled,nt6] [--tok 16,512]
  # Each lab variant is cpu/gemm_avx512.c compiled again with other tuning macros, its two entry
  # points renamed lab_<name>_qmm / lab_<name>_quant (the list in gemm_lab.c must match).
  add_executable(gemm_lab ${CMAKE_CURRENT_SOURCE_DIR}/lab/gemm_lab.c ${CMAKE_SOURCE_DIR}/tests/testutil.c)
  target_link_libraries(gemm_lab PRIVATE pllm_cpu pllm_core)
  function(pllm_gemm_lab_variant name)
    add_library(gemm_lab_${name} OBJECT ${CMAKE_SOURCE_DIR}/cpu/gemm_avx512.c)
    target_link_libraries(gemm_lab_${name} PRIVATE pllm_core)
    target_compile_definitions(gemm_lab_${name} PRIVATE pllm_cpu_qmatmul_avx512vnni=lab_${name}_qmm
                               pllm_cpu_quant_avx512=lab_${name}_quant ${ARGN})
    target_sources(gemm_lab PRIVATE $<TARGET_OBJECTS:gemm_lab_${name}>)
  endfunction()
  pllm_gemm_lab_variant(rolled GEMM_UNROLL=0 GEMM_EMBED_BCAST=0) # the kernel before 2026-11-26
  pllm_gemm_lab_variant(embed GEMM_EMBED_BCAST=1)   # vpdpbusd with a {1to16} memory operand
  pllm_gemm_lab_variant(nt6 GEMM_NT=6)
  pllm_gemm_lab_variant(nt10 GEMM_NT=10)
  pllm_gemm_lab_variant(nt12 GEMM_NT=12)
  pllm_gemm_lab_variant(tb32 GEMM_TOK_BLOCK=32)
  pllm_gemm_lab_variant(tb128 GEMM_TOK_BLOCK=128)
  pllm_gemm_lab_variant(notb GEMM_TOK_BLOCK=1000000000)
  pllm_gemm_lab_variant(nopf GEMM_PF_DIST=0)
  pllm_gemm_lab_variant(pf512 GEMM_PF_DIST=512)
  pllm_gemm_lab_variant(pf2048 GEMM_PF_DIST=2048)
endif()
# Speculative verification step cost vs tokens (owner: engine/speculate): build/bench/spec_step_bench
add_executable(spec_step_bench ${CMAKE_CURRENT_SOURCE_DIR}/spec_step_bench.c)
target_link_libraries(spec_step_bench PRIVATE pllm_cpu pllm_core)
