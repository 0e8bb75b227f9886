# Integer matmul path of the CPU backend (owner: cpu gemm): every quantized weight type x every
# dispatch path this machine runs, bitwise against the scalar reference.
pllm_add_c_test(cpu_gemm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cpu_gemm.c LABELS unit)
