/*
 * launch.h: the few macros pllm's kernels use instead of CUDA syntax the host compiler cannot
 * read, so that one .cu source compiles both under nvcc (the real device) and as host C++
 * against the emulator (cuda/emu/cuda_emu.h, force-included first in that build). Every .cu file
 * includes this header. Everything else in a kernel is plain CUDA C++.
 *
 *   PLLM_LAUNCH(kernel, grid, block, shmem, stream)(args...)
 *       kernel<<<grid, block, shmem, stream>>>(args...). A template instance goes in parentheses:
 *       PLLM_LAUNCH((k<float, 256>), ...). Check cudaGetLastError() afterwards.
 *   PLLM_SHARED(T, name, n);            __shared__ T name[n];
 *   PLLM_SHARED_2D(T, name, rows, cols); __shared__ T name[rows][cols];
 *   PLLM_SHARED_VAR(T, name);           __shared__ T name;
 *   PLLM_DYNAMIC_SHARED(T, name);       the launch's dynamic shared memory as T *name
 *                                        (16-byte aligned; several arrays are carved from it).
 *
 * Under the emulator the shared-memory names are checked views: indexing is bounds-checked, and
 * they convert to plain T * (unchecked from then on) to be passed to device functions. Do not
 * apply sizeof to them; use the element counts.
 */
#pragma once

#if defined(__CUDACC__)

#define PLLM_LAUNCH(kernel, grid, block, shmem, stream)                                            \
    kernel<<<(grid), (block), (shmem), (stream)>>>
#define PLLM_SHARED(T, name, n)             __shared__ T name[n]
#define PLLM_SHARED_2D(T, name, rows, cols) __shared__ T name[rows][cols]
#define PLLM_SHARED_VAR(T, name)            __shared__ T name
#define PLLM_DYNAMIC_SHARED(T, name)                                                               \
    extern __shared__ __align__(16) unsigned char name##_pllm_dyn_[];                              \
    T *const name = reinterpret_cast<T *>(name##_pllm_dyn_)

#elif defined(PLLM_CUDA_EMU)

#define PLLM_LAUNCH(kernel, grid, block, shmem, stream)                                            \
    CUEMU_LAUNCH_(kernel, grid, block, shmem, stream)
#define PLLM_SHARED(T, name, n)             CUEMU_SHARED_(T, name, n)
#define PLLM_SHARED_2D(T, name, rows, cols) CUEMU_SHARED_2D_(T, name, rows, cols)
#define PLLM_SHARED_VAR(T, name)            CUEMU_SHARED_VAR_(T, name)
#define PLLM_DYNAMIC_SHARED(T, name)        CUEMU_DYNAMIC_SHARED_(T, name)

#else
#error "compile .cu files with nvcc, or as C++ with -include cuda/emu/cuda_emu.h (the emulator)"
#endif
