/*
 * device.h: the thin device API the CUDA backend's host code uses: one device context (a stream
 * and a cuBLAS handle), memory, copies, synchronisation, GEMM and graph capture. Kernels are
 * launched through their own C launchers (cuda/kernels.h), which take the same context.
 *
 * device.cpp implements it once against the CUDA runtime and cuBLAS. The real build links it
 * with libcudart/libcublas; the emulated build links the very same code with cuda/emu/ (a host
 * implementation of that runtime/cuBLAS subset), so the host side of the backend runs in the
 * test suite on machines without a GPU, and links no CUDA library there.
 *
 * Ownership and errors: pllm_cuda_dev_init creates the context, pllm_cuda_dev_free destroys it
 * (accepts NULL). Pointers from pllm_cuda_alloc are device memory, owned by the caller, freed
 * with pllm_cuda_free. Every operation is ordered on the context's stream; copies and kernels
 * may run asynchronously, so errors of earlier work can surface at any later call, and always at
 * pllm_cuda_sync. Failures return a pllm_status with a message naming the CUDA/cuBLAS call, file
 * and line (and, in the emulated build, the emulator's diagnostic).
 */
#pragma once

#ifdef __cplusplus
extern "C" { /* model/dtype.h has no C++ guards of its own */
#endif

#include "model/common.h"
#include "model/dtype.h"

typedef struct pllm_cuda_dev pllm_cuda_dev;
typedef struct pllm_cuda_graph pllm_cuda_graph;
typedef struct pllm_cuda_event pllm_cuda_event;

typedef struct pllm_cuda_dev_info {
    char name[256];
    int ordinal;
    int sm_major, sm_minor;
    int n_sm;
    size_t total_bytes, free_bytes;
    size_t smem_per_block_optin; /* the most shared memory one block may use, bytes */
    int mem_bus_bits;            /* memory bus width, and clock in kHz (0 when unknown) */
    int mem_clock_khz;
    int sm_clock_khz;
    bool emulated; /* the host emulator (cuda/emu/), not a GPU */
} pllm_cuda_dev_info;

/* Devices that answer (0 when there is no driver or no GPU; never an error). When why is not
 * NULL, why[0..n) gets a one-line reason for the count ("no CUDA driver: ...", "2 devices"). */
int pllm_cuda_dev_count(char *why, size_t n);

pllm_status pllm_cuda_dev_init(pllm_cuda_dev **out, int ordinal);
void pllm_cuda_dev_free(pllm_cuda_dev *dev);
pllm_status pllm_cuda_dev_info_get(pllm_cuda_dev *dev, pllm_cuda_dev_info *info);

/* Device memory (256-byte aligned). alloc of 0 bytes gives NULL. free accepts NULL. */
pllm_status pllm_cuda_alloc(pllm_cuda_dev *dev, void **out, size_t bytes);
void pllm_cuda_free(pllm_cuda_dev *dev, void *p);
/* Page-locked host memory for fast asynchronous copies. */
pllm_status pllm_cuda_host_alloc(pllm_cuda_dev *dev, void **out, size_t bytes);
void pllm_cuda_host_free(pllm_cuda_dev *dev, void *p);

/* Copies and memset, ordered on the context's stream. A host buffer given to an upload or
 * download must stay valid and unchanged until the next pllm_cuda_sync. */
pllm_status pllm_cuda_upload(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes);
pllm_status pllm_cuda_download(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes);
pllm_status pllm_cuda_copy(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes);
pllm_status pllm_cuda_memset(pllm_cuda_dev *dev, void *dst, int value, size_t bytes);
/* Wait for everything queued on the context's stream; reports any error of that work. */
pllm_status pllm_cuda_sync(pllm_cuda_dev *dev);

/*
 * GEMM, row-major, optionally strided-batched:
 *     C[b] (m x n) = alpha * op(A[b]) (m x k) * op(B[b]) (k x n) + beta * C[b]
 * A is stored [m][lda] (trans_a false) or [k][lda] (trans_a true: op(A) = A^T); B is stored
 * [k][ldb] (trans_b false) or [n][ldb] (trans_b true; the usual weight layout [out][in]);
 * C is [m][ldc]. Matrix b of a batch starts stride_x elements after matrix b-1 (0 broadcasts).
 * Types: a_dtype == b_dtype in {F32, F16, BF16}; c_dtype is F32 or a_dtype. Products accumulate
 * in F32 (cuBLAS compute type 32F); C is read only when beta != 0.
 */
typedef struct pllm_cuda_gemm_args {
    int32_t m, n, k;
    int32_t batch; /* >= 1 */
    const void *a;
    pllm_dtype a_dtype;
    int64_t lda, stride_a;
    bool trans_a;
    const void *b;
    pllm_dtype b_dtype;
    int64_t ldb, stride_b;
    bool trans_b;
    void *c;
    pllm_dtype c_dtype;
    int64_t ldc, stride_c;
    float alpha, beta;
} pllm_cuda_gemm_args;
pllm_status pllm_cuda_gemm(pllm_cuda_dev *dev, const pllm_cuda_gemm_args *g);

/* Events: a point in the context's stream. record queues it; sync waits until the stream
 * has passed it (and reports errors of the work before it); elapsed is the time between two
 * completed records, in milliseconds. */
pllm_status pllm_cuda_event_create(pllm_cuda_dev *dev, pllm_cuda_event **out);
void pllm_cuda_event_free(pllm_cuda_event *e);
pllm_status pllm_cuda_event_record(pllm_cuda_dev *dev, pllm_cuda_event *e);
pllm_status pllm_cuda_event_sync(pllm_cuda_event *e);
pllm_status pllm_cuda_event_elapsed(pllm_cuda_event *start, pllm_cuda_event *end, float *ms);

/* Graph capture: between begin and end, work queued on the context (kernels, copies, GEMMs) is
 * recorded instead of run; pllm_cuda_graph_launch replays it (same pointers, same arguments).
 * Synchronising inside a capture is an error. */
pllm_status pllm_cuda_graph_begin(pllm_cuda_dev *dev);
pllm_status pllm_cuda_graph_end(pllm_cuda_dev *dev, pllm_cuda_graph **out);
pllm_status pllm_cuda_graph_launch(pllm_cuda_dev *dev, pllm_cuda_graph *g);
void pllm_cuda_graph_free(pllm_cuda_graph *g);

#ifdef __cplusplus
}
#endif
