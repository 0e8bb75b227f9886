/*
 * cuemu_internal.h: what the emulator's three parts share: the fiber engine (cuemu_core.cpp),
 * the runtime (cuemu_runtime.cpp: device memory, streams, errors) and cuBLAS (cuemu_cublas.cpp).
 * Not for kernels or for pllm's host code.
 */
#pragma once

#include "cuda/emu/cuda_emu.h"

#include <atomic>
#include <functional>
#include <string>

namespace cuemu
{
namespace rt
{

/* An operation submitted to a stream: runs now, or is recorded when the stream is capturing
 * (and runs at each cudaGraphLaunch). Returns its status. */
using op_fn = std::function<cudaError_t()>;
cudaError_t submit(cudaStream_t stream, op_fn op);

/* Record an error: sets this thread's last error; a sticky one also poisons the device until
 * cudaDeviceReset() (every later call returns it). Prints "cuemu: msg" to stderr when verbose.
 * Returns err. */
cudaError_t fail(cudaError_t err, bool sticky, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record a detailed message for this thread without an error code (cuBLAS failures). */
void note(const char *msg);
/* The sticky error, or cudaSuccess. */
cudaError_t sticky();

/* True when [p, p + n) lies inside one live device allocation (n may be 0: p inside or at its
 * end). */
bool device_range(const void *p, size_t n);
/* True when p lies inside (or at the end of) some live allocation. */
bool is_device_pointer(const void *p);
/* True when p lies inside (or at the end of) a buffer from cudaHostAlloc(cudaHostAllocMapped). */
bool is_mapped_host_pointer(const void *p);
/* For a word of a kernel's by-value argument: empty when it is not the address of host memory
 * (not mapped in this process, or inside a device allocation's mapping, or a mapped pinned
 * buffer); else a description of the host memory it points into. */
std::string host_memory_at(uintptr_t w);
/* Check every allocation's canaries; on damage record a sticky error naming `after` and return
 * false. */
bool check_canaries(const char *after);
/* For the fault handler: describe addr relative to the device allocation whose mapping holds it
 * (best effort, never blocks). False when no allocation holds it. */
bool describe_address(const void *addr, char *buf, size_t cap);
/* The dynamic shared memory a kernel may use (cudaFuncAttributeMaxDynamicSharedMemorySize), or
 * 0 when never set. */
int max_dynamic_smem(const void *kernel);

/* Process-wide counters. */
struct counters {
    std::atomic<uint64_t> launches{0}, blocks{0}, threads{0}, switches{0}, barriers{0}, warp_ops{0};
};
counters &stats();
bool verbose();

} /* namespace rt */
} /* namespace cuemu */

/* Limits of the emulated device: those of sm_80 (the smaller of the two targets). */
#define CUEMU_MAX_THREADS 1024
#define CUEMU_STATIC_SMEM (48 * 1024)  /* static shared memory, and dynamic without opt-in */
#define CUEMU_OPTIN_SMEM  (163 * 1024) /* sharedMemPerBlockOptin of sm_80 */
