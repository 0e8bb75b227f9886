/*
 * cuemu.h: the emulator's own small API (C and C++), beyond the CUDA runtime subset it
 * implements. Tests and the emulated build of cuda/device.cpp use it; the real build never
 * includes it. See cuda_emu.h for how the emulator works.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The full diagnostic of the last emulator error (kernel, block, thread, source line, what went
 * wrong), or "" when there was none since the last cudaDeviceReset(). */
const char *pllm_cuemu_error_detail(void);

/* Fiber stack size in bytes for launches made from now on by this host thread (rounded up to
 * pages; at least 16 KiB). The default is $PLLM_CUEMU_STACK_KB KiB, else 128 KiB. */
void pllm_cuemu_set_stack_size(size_t bytes);

/* Work done by the emulator in this process (for test reports). */
typedef struct pllm_cuemu_stats {
    uint64_t launches;         /* kernel launches executed (graph replays included) */
    uint64_t blocks;           /* thread blocks run */
    uint64_t threads;          /* fibers run */
    uint64_t switches;         /* fiber context switches */
    uint64_t barriers;         /* __syncthreads completed */
    uint64_t warp_collectives; /* shuffles, votes, __syncwarp completed */
} pllm_cuemu_stats;
void pllm_cuemu_get_stats(pllm_cuemu_stats *out);

/* Whether to print each kernel failure to stderr when it happens (default 1). Tests that
 * provoke errors on purpose may turn it off and read pllm_cuemu_error_detail() instead. */
void pllm_cuemu_set_verbose(int on);

#ifdef __cplusplus
}
#endif
