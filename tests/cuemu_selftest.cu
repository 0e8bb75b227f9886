/*
 * cuemu_selftest.cu: the CUDA emulator's own tests. The kernels are plain CUDA (the real build
 * compiles this file with nvcc to prove it); the test driver runs them through the emulator and
 * checks every result against an independent expectation written from CUDA's documentation:
 * barrier visibility, shuffles for every width/lane/offset, votes and warp reductions, atomics
 * under contention, every index of multi-dimensional grids, 1024-thread blocks, dynamic shared
 * memory, and that each kind of bug is caught and reported (not a hang, not a pass): shared
 * memory out of bounds, a thread returning while others wait at a barrier, threads at different
 * barriers, reads from exited lanes, mismatched warp calls, deadlocks, device buffer overruns,
 * host pointers passed to kernels (as arguments, and inside argument structs: heap, stack, a
 * mapped file, cudaMallocHost memory; a cudaHostAllocMapped buffer passes), __trap, bad launch configurations, and fiber stack overflow.
 */
#include "cuda/launch.h"

#include <cuda_fp16.h>
#include <stdint.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

/* ---- kernels ----------------------------------------------------------------------------- */

/* Every thread writes its slot, then reads its neighbours' after the barrier, several rounds. */
__global__ void k_barrier(int *out, int rounds)
{
    PLLM_SHARED(int, s, 1024);
    const int t = threadIdx.x, n = blockDim.x;
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        s[t] = t * 131 + r;
        __syncthreads();
        acc += s[(t + 1 + r) % n] - s[(t + n - 1) % n];
        __syncthreads();
    }
    out[t] = acc;
}

/* Each lane contributes val = lane * 1000 + blockIdx.x; results of all four shuffles. */
__global__ void k_shfl(int *idx, int *up, int *down, int *xr, int param, int width)
{
    const int lane = threadIdx.x % 32;
    const int gt = blockIdx.x * blockDim.x + threadIdx.x;
    const int val = (int)(threadIdx.x / 32) * 100000 + lane * 1000 + (int)blockIdx.x;
    idx[gt] = __shfl_sync(0xffffffffu, val, param, width);
    up[gt] = __shfl_up_sync(0xffffffffu, val, (unsigned)param, width);
    down[gt] = __shfl_down_sync(0xffffffffu, val, (unsigned)param, width);
    xr[gt] = __shfl_xor_sync(0xffffffffu, val, param, width);
}

/* Shuffles of the other overloads keep every byte. */
__global__ void k_shfl_types(double *d, long long *ll, __half *h, float *f)
{
    const int lane = threadIdx.x;
    d[lane] = __shfl_xor_sync(0xffffffffu, 1e10 + lane * 0.25, 5);
    ll[lane] = __shfl_down_sync(0xffffffffu, (long long)lane << 40 | 7, 3);
    h[lane] = __shfl_sync(0xffffffffu, __float2half(0.5f * (float)lane), 31 - lane);
    f[lane] = __shfl_up_sync(0xffffffffu, -1.5f * (float)lane, 2);
}

/* Votes over a predicate pattern; the second pair uses two disjoint half-warp masks at once. */
__global__ void k_vote(unsigned *ballot, int *any, int *all, unsigned *half_ballot,
                       unsigned pattern)
{
    const int lane = threadIdx.x;
    const int pred = (pattern >> lane) & 1;
    ballot[lane] = __ballot_sync(0xffffffffu, pred);
    any[lane] = __any_sync(0xffffffffu, pred);
    all[lane] = __all_sync(0xffffffffu, pred);
    if (lane < 16)
        half_ballot[lane] = __ballot_sync(0x0000ffffu, pred);
    else
        half_ballot[lane] = __ballot_sync(0xffff0000u, pred);
    __syncwarp();
}

/* Warp reductions and the __syncthreads variants. */
__global__ void k_reduce(unsigned *radd, int *rmin, int *rmax, unsigned *rxor, int *cnt, int *band,
                         int *bor)
{
    const int t = threadIdx.x, lane = t % 32;
    const int v = (lane * 37) % 23 - 11;
    radd[t] = __reduce_add_sync(0xffffffffu, (unsigned)(lane + 1));
    rmin[t] = __reduce_min_sync(0xffffffffu, v);
    rmax[t] = __reduce_max_sync(0xffffffffu, v);
    rxor[t] = __reduce_xor_sync(0xffffffffu, (unsigned)(lane * 2654435761u));
    cnt[t] = __syncthreads_count(t % 3 == 0);
    band[t] = __syncthreads_and(t < 2000);
    bor[t] = __syncthreads_or(t == 77);
}

/* Contended atomics across many blocks; the CAS loop counts its own retries. */
__global__ void k_atomics(int *ctr, float *fsum, unsigned *umax, int *cas_ctr, int *retries,
                          unsigned long long *u64, int *imin)
{
    const unsigned g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(ctr, 1);
    atomicAdd(fsum, 0.5f);
    atomicMax(umax, (g * 2654435761u) >> 3);
    atomicMin(imin, -(int)((g * 40503u) % 100000u));
    atomicAdd(u64, (unsigned long long)g);
    int old = *cas_ctr, assumed;
    do {
        assumed = old;
        old = atomicCAS(cas_ctr, assumed, assumed + 1);
        if (old != assumed) atomicAdd(retries, 1);
    } while (old != assumed);
}

/* Records every index of a 3-D grid of 3-D blocks. */
__global__ void k_indices(int *out)
{
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int nt = blockDim.x * blockDim.y * blockDim.z;
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int *o = out + (block * nt + t) * 6;
    o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
    o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
}

/* Block-wide sum of 1024 threads through warp shuffles and shared memory. */
__global__ void k_block_sum(float *out, const float *in)
{
    PLLM_SHARED(float, partial, 32);
    PLLM_SHARED_VAR(float, total);
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    float v = in[blockIdx.x * blockDim.x + t];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f;
        for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) total = v;
    }
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = total;
}

/* Reverses n floats through dynamic shared memory (n = dynamic bytes / 4). */
__global__ void k_dyn_reverse(float *out, const float *in, int n)
{
    PLLM_DYNAMIC_SHARED(float, buf);
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}

/* 2-D shared tile transpose (row/column bounds of the view are checked). */
__global__ void k_transpose(float *out, const float *in)
{
    PLLM_SHARED_2D(float, tile, 16, 17);
    const int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = in[y * 16 + x];
    __syncthreads();
    out[y * 16 + x] = tile[x][y];
}

/* Fused half multiply-add, one result per element. */
__global__ void k_hfma(__half *out, const __half *a, const __half *b, const __half *c, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __hfma(a[i], b[i], c[i]);
}

/* ---- kernels with bugs the emulator must catch -------------------------------------------- */

__global__ void k_shared_oob(int *out, int bad_index)
{
    PLLM_SHARED(int, s, 32);
    s[threadIdx.x % 32] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = threadIdx.x == 5 ? s[bad_index] : s[threadIdx.x % 32];
}

__global__ void k_dyn_oob(float *out, int n)
{
    PLLM_DYNAMIC_SHARED(float, buf);
    buf[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x + 1) % (unsigned)n];
}

__global__ void k_early_return(int *out)
{
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = 2;
}

__global__ void k_two_barriers(int *out)
{
    if (threadIdx.x < 16) {
        out[threadIdx.x] = 1;
        __syncthreads();
    } else {
        out[threadIdx.x] = 2;
        __syncthreads();
    }
}

__global__ void k_read_exited_lane(int *out)
{
    if (threadIdx.x >= 20) return;
    int v = (int)threadIdx.x;
    v += __shfl_down_sync(0xffffffffu, v, 16);
    out[threadIdx.x] = v;
}

__global__ void k_partial_warp_ok(int *out)
{
    /* 48 threads: the second warp has 16 lanes; a full mask and xor within 16 lanes is fine. */
    int v = (int)threadIdx.x;
    for (int o = 8; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

__global__ void k_mismatched_warp_calls(int *out)
{
    int v = (int)threadIdx.x;
    if (threadIdx.x < 16)
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    else
        __syncwarp(0xffffffffu);
    out[threadIdx.x] = v;
}

__global__ void k_deadlock(int *out)
{
    if (threadIdx.x == 0) __syncwarp(0xffffffffu);
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void k_mask_without_self(int *out)
{
    out[threadIdx.x] = __shfl_sync(0x1u, (int)threadIdx.x, 0);
}

__global__ void k_global_overrun(float *p, int n)
{
    p[threadIdx.x] = 1.0f;
    if (threadIdx.x == 0) p[n + 3] = 2.0f;
}

__global__ void k_trap(int *out, int bad)
{
    if ((int)threadIdx.x == bad) __trap();
    out[threadIdx.x] = 1;
}

/* A kernel that reads a table through its argument struct, as qkv_rope_kernel reads inv_freq:
 * out[i] = table[i] * scale. The pointers inside the struct must be device memory. */
struct table_args {
    const double *table; /* [n] */
    double *out;         /* [n] */
    int n;
    float scale;
    uint64_t seed; /* a plain number in an 8-byte word: never taken for a pointer */
};
/* An argument struct with padding after n (4 bytes before the 8-aligned pointer). */
struct padded_args {
    int n;
    double *out;
};
__global__ void k_struct_padded(padded_args a)
{
    if ((int)threadIdx.x < a.n) a.out[threadIdx.x] = 1.0;
}

__global__ void k_struct_table(table_args a)
{
    int i = threadIdx.x;
    if (i < a.n) a.out[i] = a.table[i] * a.scale;
}

__global__ void k_deep_stack(int *out, int n)
{
    volatile char big[256 * 1024];
    for (int i = 0; i < n; i += 4096) big[i] = (char)i;
    out[threadIdx.x] = big[n / 2];
}

__global__ void k_wild_read(float *out, const float *p, long long off)
{
    out[threadIdx.x] = p[off];
}

#if defined(PLLM_CUDA_EMU) && defined(__SANITIZE_ADDRESS__)
/* A device function returning the address of its local array (ASan's stack-use-after-return). */
__device__ __attribute__((noinline)) int *uar_local_address(int v)
{
    int local[16];
    for (int i = 0; i < 16; i++) local[i] = v + i;
    int *volatile p = local;
    return p;
}

/* Every thread calls it; only the last block reads through the dead pointer, so the fiber that
 * reads runs on a fake stack the emulator kept from the slot's earlier blocks. */
__global__ void k_use_after_return(int *out, int bad_block)
{
    int *p = uar_local_address((int)threadIdx.x);
    out[blockIdx.x * blockDim.x + threadIdx.x] = (int)blockIdx.x == bad_block ? p[3] : 0;
}
#endif

/* A missing barrier: each thread reads the slot its predecessor wrote, with no __syncthreads. */
__global__ void k_racy(int *out)
{
    PLLM_SHARED(int, s, 256);
    s[threadIdx.x] = (int)threadIdx.x + 1;
    out[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x ? s[threadIdx.x - 1] : 0;
}

#ifdef PLLM_CUDA_EMU /* nvcc would need relocatable device code for this one */
__global__ void k_nested_launch(int *out)
{
    PLLM_LAUNCH(k_trap, 1, 32, 0, 0)(out, -1);
}
#endif

/* ---- test driver (emulated build only) ------------------------------------------------------ */
#ifdef PLLM_CUDA_EMU

#define _Noreturn [[noreturn]]
extern "C" {
#include "model/common.h"
#include "tests/testutil.h"
}
#undef _Noreturn

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <sys/mman.h>

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,                      \
                    cudaGetErrorName(e_), pllm_cuemu_error_detail());                              \
            pllm_test_failures++;                                                                  \
        }                                                                                          \
    } while (0)

template <class T> static T *dalloc(size_t n)
{
    void *p = nullptr;
    CUDA_OK(cudaMalloc(&p, n * sizeof(T)));
    return static_cast<T *>(p);
}

template <class T> static std::vector<T> fetch(const T *d, size_t n)
{
    std::vector<T> h(n);
    CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

/* After a launch that must fail: the error code, and a diagnostic mentioning `needle`. */
static void expect_failure(const char *what, cudaError_t want, const char *needle)
{
    cudaError_t got = cudaGetLastError();
    std::string detail = pllm_cuemu_error_detail();
    if (got != want) {
        fprintf(stderr, "%s: expected %s, got %s (%s)\n", what, cudaGetErrorName(want),
                cudaGetErrorName(got), detail.c_str());
        pllm_test_failures++;
    } else if (detail.find(needle) == std::string::npos) {
        fprintf(stderr, "%s: diagnostic lacks '%s': %s\n", what, needle, detail.c_str());
        pllm_test_failures++;
    } else {
        fprintf(stderr, "  caught (%s): %s\n", what, detail.c_str());
    }
    if (cudaGetLastError() != want && want != cudaErrorInvalidConfiguration &&
        want != cudaErrorInvalidValue) {
        fprintf(stderr, "%s: a kernel fault must be sticky\n", what);
        pllm_test_failures++;
    }
    cudaDeviceReset();
}

/* Host memory reached through an argument struct (the class of a22fb61's crash on a real H100,
 * which the emulator used to run without a word: it shares the host's address space). */
static void test_host_pointers(uint64_t *rng)
{
    const int n = 64;
    double *d_table = dalloc<double>(n), *d_out = dalloc<double>(n);
    std::vector<double> want(n), got(n);
    for (int i = 0; i < n; i++) want[i] = (double)(i * 7 + 1);
    CUDA_OK(cudaMemcpy(d_table, want.data(), sizeof(double) * n, cudaMemcpyHostToDevice));
    table_args a = {d_table, d_out, n, 0.5f, 0};
    /* device pointers and plain numbers pass, whatever the numbers */
    for (int r = 0; r < 200; r++) {
        a.seed = pllm_test_rand(rng);
        a.scale = (float)(r % 7) * 0.5f;
        PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
        CUDA_OK(cudaGetLastError());
    }
    CUDA_OK(cudaMemcpy(got.data(), d_out, sizeof(double) * n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) CHECK(got[i] == want[i] * (double)a.scale);
    /* padding is not judged: stale bytes of a host pointer beside an int are no pointer */
    {
        std::vector<double> host(16);
        uintptr_t hp = (uintptr_t)host.data();
        padded_args pa;
        for (size_t k = 0; k < sizeof pa; k += sizeof hp) memcpy((char *)&pa + k, &hp, sizeof hp);
        pa.n = 0; /* the low half of word 0; its high half is the stale pointer's */
        pa.out = d_out;
        PLLM_LAUNCH(k_struct_padded, 1, 32, 0, 0)(pa);
        CUDA_OK(cudaGetLastError());
    }

    /* the heap (the inv_freq bug: pllm_malloc'd, passed inside the struct) */
    double *heap = (double *)malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) heap[i] = 1;
    a.table = heap;
    PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
    expect_failure("host heap pointer in an argument struct", cudaErrorIllegalAddress,
                   "argument 0 (table_args, passed by value) holds a host pointer at byte offset "
                   "0");
    free(heap);
    d_table = dalloc<double>(n), d_out = dalloc<double>(n); /* the reset freed them */
    /* a large allocation (malloc maps it anonymously), as the output word of the struct */
    std::vector<double> big(1 << 16);
    a = table_args{d_table, big.data(), n, 1.0f, 0};
    PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
    expect_failure("large host buffer in an argument struct", cudaErrorIllegalAddress,
                   "at byte offset 8");
    d_table = dalloc<double>(n), d_out = dalloc<double>(n);
    /* the stack */
    double on_stack[64] = {0};
    a = table_args{on_stack, d_out, n, 1.0f, 0};
    PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
#ifdef __SANITIZE_ADDRESS__ /* detect_stack_use_after_return puts locals on a fake stack (an mmap) \
                             */
    expect_failure("stack pointer in an argument struct", cudaErrorIllegalAddress,
                   "holds a host pointer at byte offset 0");
#else
    expect_failure("stack pointer in an argument struct", cudaErrorIllegalAddress,
                   "host stack memory");
#endif
    d_table = dalloc<double>(n), d_out = dalloc<double>(n);
    /* a mapped file (model weights are mapped: a tensor's address must never reach a kernel) */
    FILE *f = tmpfile();
    CHECK(f != nullptr);
    std::vector<double> zeros(512);
    CHECK(fwrite(zeros.data(), sizeof(double), zeros.size(), f) == zeros.size());
    fflush(f);
    void *map = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    CHECK(map != MAP_FAILED);
    a = table_args{(const double *)map, d_out, n, 1.0f, 0};
    PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
    expect_failure("mapped file in an argument struct", cudaErrorIllegalAddress, "mapping the file");
    munmap(map, 4096);
    fclose(f);
    d_table = dalloc<double>(n), d_out = dalloc<double>(n);
    /* pinned memory from cudaMallocHost is a staging buffer, not kernel-readable here */
    double *pinned = nullptr;
    CUDA_OK(cudaMallocHost((void **)&pinned, sizeof(double) * n));
    a = table_args{pinned, d_out, n, 1.0f, 0};
    PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
    expect_failure("cudaMallocHost buffer in an argument struct", cudaErrorIllegalAddress,
                   "cudaMallocHost");
    d_table = dalloc<double>(n), d_out = dalloc<double>(n);
    /* ... while a buffer named kernel-readable (cudaHostAlloc, mapped) passes, in a struct and as
     * a pointer argument */
    double *mapped = nullptr;
    CUDA_OK(cudaHostAlloc((void **)&mapped, sizeof(double) * n, cudaHostAllocMapped));
    for (int i = 0; i < n; i++) mapped[i] = 3;
    a = table_args{mapped, d_out, n, 2.0f, 0};
    PLLM_LAUNCH(k_struct_table, 1, n, 0, 0)(a);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got.data(), d_out, sizeof(double) * n, cudaMemcpyDeviceToHost));
    CHECK(got[5] == 6.0);
    PLLM_LAUNCH(k_trap, 1, 32, 0, 0)((int *)mapped, -1);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaFreeHost(mapped));
    cudaDeviceReset();
}

static void test_barrier(void)
{
    const int rounds = 5;
    for (int n : {32, 96, 1000, 1024}) {
        int *d = dalloc<int>((size_t)n);
        PLLM_LAUNCH(k_barrier, 1, n, 0, 0)(d, rounds);
        CUDA_OK(cudaGetLastError());
        std::vector<int> h = fetch(d, (size_t)n);
        int bad = 0;
        for (int t = 0; t < n; t++) {
            int want = 0;
            for (int r = 0; r < rounds; r++)
                want += (((t + 1 + r) % n) * 131 + r) - (((t + n - 1) % n) * 131 + r);
            bad += h[(size_t)t] != want;
        }
        CHECK(bad == 0);
        cudaFree(d);
    }
}

/* Expected shuffle results, from the CUDA programming guide's definitions. */
static int lane_val(int t, int block)
{
    return (t / 32) * 100000 + (t % 32) * 1000 + block;
}

static void test_shuffles(void)
{
    const int nb = 2, nt = 64, n = nb * nt;
    int *idx = dalloc<int>(n), *up = dalloc<int>(n), *down = dalloc<int>(n), *xr = dalloc<int>(n);
    int checked = 0, bad = 0;
    for (int width = 1; width <= 32; width *= 2)
        for (int param = 0; param < 40; param++) {
            PLLM_LAUNCH(k_shfl, nb, nt, 0, 0)(idx, up, down, xr, param, width);
            CUDA_OK(cudaGetLastError());
            std::vector<int> hi = fetch(idx, n), hu = fetch(up, n), hd = fetch(down, n),
                             hx = fetch(xr, n);
            const int p = param & 31; /* lane operands are 5 bits wide (PTX shfl.sync) */
            for (int b = 0; b < nb; b++)
                for (int t = 0; t < nt; t++) {
                    const int lane = t % 32, wbase = t - lane, g = b * nt + t;
                    const int seg = lane / width * width, pos = lane % width;
                    /* CUDA guide: idx reads srcLane modulo width within the lane's segment; up/down
                     * keep the own value when the source leaves the segment; xor may read earlier
                     * segments but keeps the own value for a later one. */
                    const int w_idx = lane_val(wbase + seg + param % width, b);
                    const int w_up = pos >= p ? lane_val(t - p, b) : lane_val(t, b);
                    const int w_down = pos + p < width ? lane_val(t + p, b) : lane_val(t, b);
                    const int xl = lane ^ p;
                    const int w_xor = xl < seg + width ? lane_val(wbase + xl, b) : lane_val(t, b);
                    int wrong =
                        (hi[g] != w_idx) + (hu[g] != w_up) + (hd[g] != w_down) + (hx[g] != w_xor);
                    if (wrong && bad < 5)
                        fprintf(stderr,
                                "shfl width %d param %d thread %d: idx %d/%d up %d/%d down %d/%d "
                                "xor %d/%d\n",
                                width, param, t, hi[g], w_idx, hu[g], w_up, hd[g], w_down, hx[g],
                                w_xor);
                    bad += wrong;
                    checked += 4;
                }
        }
    fprintf(
        stderr,
        "  shuffles: %d results checked (widths 1..32, lane operands 0..39, 2 warps x 2 blocks)\n",
        checked);
    CHECK(bad == 0);
    cudaFree(idx), cudaFree(up), cudaFree(down), cudaFree(xr);

    double *d = dalloc<double>(32);
    long long *ll = dalloc<long long>(32);
    __half *h = dalloc<__half>(32);
    float *f = dalloc<float>(32);
    PLLM_LAUNCH(k_shfl_types, 1, 32, 0, 0)(d, ll, h, f);
    CUDA_OK(cudaGetLastError());
    std::vector<double> hd = fetch(d, 32);
    std::vector<long long> hll = fetch(ll, 32);
    std::vector<__half> hh = fetch(h, 32);
    std::vector<float> hf = fetch(f, 32);
    int tbad = 0;
    for (int l = 0; l < 32; l++) {
        tbad += hd[(size_t)l] != 1e10 + (l ^ 5) * 0.25;
        tbad += hll[(size_t)l] != (((long long)(l + 3 < 32 ? l + 3 : l)) << 40 | 7);
        tbad += __half2float(hh[(size_t)l]) != 0.5f * (float)(31 - l);
        tbad += hf[(size_t)l] != -1.5f * (float)(l >= 2 ? l - 2 : l);
    }
    CHECK(tbad == 0);
    cudaFree(d), cudaFree(ll), cudaFree(h), cudaFree(f);
}

static void test_votes(uint64_t *rng)
{
    unsigned *ballot = dalloc<unsigned>(32), *halves = dalloc<unsigned>(32);
    int *any = dalloc<int>(32), *all = dalloc<int>(32);
    int bad = 0;
    std::vector<unsigned> patterns = {0u, 0xffffffffu, 1u, 0x80000000u, 0x0000ffffu, 0xffff0000u};
    for (int i = 0; i < 20; i++) patterns.push_back((unsigned)pllm_test_rand(rng));
    for (unsigned pat : patterns) {
        PLLM_LAUNCH(k_vote, 1, 32, 0, 0)(ballot, any, all, halves, pat);
        CUDA_OK(cudaGetLastError());
        std::vector<unsigned> hb = fetch(ballot, 32), hh = fetch(halves, 32);
        std::vector<int> ha = fetch(any, 32), hl = fetch(all, 32);
        for (int l = 0; l < 32; l++) {
            bad += hb[(size_t)l] != pat;
            bad += ha[(size_t)l] != (pat != 0);
            bad += hl[(size_t)l] != (pat == 0xffffffffu);
            bad += hh[(size_t)l] != (l < 16 ? (pat & 0xffffu) : (pat & 0xffff0000u));
        }
    }
    CHECK(bad == 0);
    cudaFree(ballot), cudaFree(halves), cudaFree(any), cudaFree(all);

    const int n = 1024;
    unsigned *radd = dalloc<unsigned>(n), *rxor = dalloc<unsigned>(n);
    int *rmin = dalloc<int>(n), *rmax = dalloc<int>(n), *cnt = dalloc<int>(n),
        *band = dalloc<int>(n), *bor = dalloc<int>(n);
    PLLM_LAUNCH(k_reduce, 1, n, 0, 0)(radd, rmin, rmax, rxor, cnt, band, bor);
    CUDA_OK(cudaGetLastError());
    std::vector<unsigned> ha = fetch(radd, n), hx = fetch(rxor, n);
    std::vector<int> hmin = fetch(rmin, n), hmax = fetch(rmax, n), hc = fetch(cnt, n),
                     hand = fetch(band, n), hor = fetch(bor, n);
    int wmin = 1 << 30, wmax = -(1 << 30), wcnt = 0;
    unsigned wx = 0;
    for (int l = 0; l < 32; l++) {
        int v = (l * 37) % 23 - 11;
        wmin = v < wmin ? v : wmin;
        wmax = v > wmax ? v : wmax;
        wx ^= (unsigned)(l * 2654435761u);
    }
    for (int t = 0; t < n; t++) wcnt += t % 3 == 0;
    bad = 0;
    for (int t = 0; t < n; t++)
        bad += ha[(size_t)t] != 528u || hmin[(size_t)t] != wmin || hmax[(size_t)t] != wmax ||
               hx[(size_t)t] != wx || hc[(size_t)t] != wcnt || hand[(size_t)t] != 1 ||
               hor[(size_t)t] != 1;
    CHECK(bad == 0);
    cudaFree(radd), cudaFree(rxor), cudaFree(rmin), cudaFree(rmax), cudaFree(cnt), cudaFree(band),
        cudaFree(bor);
}

static void test_atomics(void)
{
    const int nb = 6, nt = 1024, total = nb * nt;
    int *ctr = dalloc<int>(1), *cas = dalloc<int>(1), *retries = dalloc<int>(1),
        *imin = dalloc<int>(1);
    float *fsum = dalloc<float>(1);
    unsigned *umax = dalloc<unsigned>(1);
    unsigned long long *u64 = dalloc<unsigned long long>(1);
    CUDA_OK(cudaMemset(ctr, 0, 4));
    CUDA_OK(cudaMemset(cas, 0, 4));
    CUDA_OK(cudaMemset(retries, 0, 4));
    CUDA_OK(cudaMemset(imin, 0, 4));
    CUDA_OK(cudaMemset(fsum, 0, 4));
    CUDA_OK(cudaMemset(umax, 0, 4));
    CUDA_OK(cudaMemset(u64, 0, 8));
    PLLM_LAUNCH(k_atomics, nb, nt, 0, 0)(ctr, fsum, umax, cas, retries, u64, imin);
    CUDA_OK(cudaGetLastError());
    int hc = fetch(ctr, 1)[0], hcas = fetch(cas, 1)[0], hr = fetch(retries, 1)[0],
        hmin = fetch(imin, 1)[0];
    float hf = fetch(fsum, 1)[0];
    unsigned hm = fetch(umax, 1)[0];
    unsigned long long h64 = fetch(u64, 1)[0];
    unsigned wm = 0;
    int wmin = 0;
    for (unsigned g = 0; g < (unsigned)total; g++) {
        unsigned v = (g * 2654435761u) >> 3;
        wm = v > wm ? v : wm;
        int m = -(int)((g * 40503u) % 100000u);
        wmin = m < wmin ? m : wmin;
    }
    fprintf(stderr, "  atomics: %d threads, CAS loop retried %d times under contention\n", total,
            hr);
    CHECK(hc == total);
    CHECK(hcas == total);
    CHECK(hf == 0.5f * (float)total);
    CHECK(hm == wm);
    CHECK(hmin == wmin);
    CHECK(h64 == (unsigned long long)total * (total - 1) / 2);
    CHECK(hr > 0); /* the yields at atomics must interleave threads */
    cudaFree(ctr), cudaFree(cas), cudaFree(retries), cudaFree(fsum), cudaFree(umax), cudaFree(u64),
        cudaFree(imin);
}

static void test_indices(void)
{
    dim3 grid(3, 2, 2), block(8, 4, 3);
    const int nblocks = 12, nt = 96, n = nblocks * nt * 6;
    int *d = dalloc<int>(n);
    PLLM_LAUNCH(k_indices, grid, block, 0, 0)(d);
    CUDA_OK(cudaGetLastError());
    std::vector<int> h = fetch(d, n);
    int bad = 0;
    for (int bz = 0; bz < 2; bz++)
        for (int by = 0; by < 2; by++)
            for (int bx = 0; bx < 3; bx++)
                for (int tz = 0; tz < 3; tz++)
                    for (int ty = 0; ty < 4; ty++)
                        for (int tx = 0; tx < 8; tx++) {
                            int b = bx + 3 * (by + 2 * bz), t = tx + 8 * (ty + 4 * tz);
                            const int *o = &h[(size_t)(b * nt + t) * 6];
                            bad += o[0] != tx || o[1] != ty || o[2] != tz || o[3] != bx ||
                                   o[4] != by || o[5] != bz;
                        }
    CHECK(bad == 0);
    cudaFree(d);
}

static void test_block_sum(uint64_t *rng)
{
    const int nb = 3, nt = 1024, n = nb * nt;
    std::vector<float> in((size_t)n);
    for (float &x : in)
        x = (float)(int)(pllm_test_randf(rng) * 1000.0f); /* integers: the sum is exact */
    float *din = dalloc<float>(n), *dout = dalloc<float>(n);
    CUDA_OK(cudaMemcpy(din, in.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
    PLLM_LAUNCH(k_block_sum, nb, nt, 0, 0)(dout, din);
    CUDA_OK(cudaGetLastError());
    std::vector<float> h = fetch(dout, n);
    int bad = 0;
    for (int b = 0; b < nb; b++) {
        double s = 0;
        for (int t = 0; t < nt; t++) s += in[(size_t)(b * nt + t)];
        for (int t = 0; t < nt; t++) bad += h[(size_t)(b * nt + t)] != (float)s;
    }
    CHECK(bad == 0);
    cudaFree(din), cudaFree(dout);
}

static void test_dynamic_shared(uint64_t *rng)
{
    for (int n : {1, 100, 4000, 12288}) {
        std::vector<float> in((size_t)n);
        for (float &x : in) x = pllm_test_randf(rng);
        float *din = dalloc<float>((size_t)n), *dout = dalloc<float>((size_t)n);
        CUDA_OK(cudaMemcpy(din, in.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
        PLLM_LAUNCH(k_dyn_reverse, 1, 256, (size_t)n * 4, 0)(dout, din, n);
        CUDA_OK(cudaGetLastError());
        std::vector<float> h = fetch(dout, (size_t)n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += h[(size_t)i] != in[(size_t)(n - 1 - i)];
        CHECK(bad == 0);
        cudaFree(din), cudaFree(dout);
    }
    /* over 48 KiB needs the opt-in attribute, as on a GPU */
    const int big = 20000;
    float *din = dalloc<float>(big), *dout = dalloc<float>(big);
    CUDA_OK(cudaMemset(din, 0, big * 4));
    pllm_cuemu_set_verbose(0);
    PLLM_LAUNCH(k_dyn_reverse, 1, 256, (size_t)big * 4, 0)(dout, din, big);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    pllm_cuemu_set_verbose(1);
    CUDA_OK(cudaFuncSetAttribute((const void *)k_dyn_reverse,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, big * 4));
    PLLM_LAUNCH(k_dyn_reverse, 1, 256, (size_t)big * 4, 0)(dout, din, big);
    CUDA_OK(cudaGetLastError());
    cudaFree(din), cudaFree(dout);

    float *tin = dalloc<float>(256), *tout = dalloc<float>(256);
    std::vector<float> t(256);
    for (int i = 0; i < 256; i++) t[(size_t)i] = (float)i;
    CUDA_OK(cudaMemcpy(tin, t.data(), 1024, cudaMemcpyHostToDevice));
    PLLM_LAUNCH(k_transpose, 1, dim3(16, 16), 0, 0)(tout, tin);
    CUDA_OK(cudaGetLastError());
    std::vector<float> ht = fetch(tout, 256);
    int bad = 0;
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 16; x++) bad += ht[(size_t)(y * 16 + x)] != (float)(x * 16 + y);
    CHECK(bad == 0);
    cudaFree(tin), cudaFree(tout);
}

static void test_partial_warp(void)
{
    int *d = dalloc<int>(48);
    PLLM_LAUNCH(k_partial_warp_ok, 1, 48, 0, 0)(d);
    CUDA_OK(cudaGetLastError());
    std::vector<int> h = fetch(d, 48);
    int bad = 0;
    for (int t = 0; t < 48; t++) {
        int base = t / 16 * 16, want = 0;
        for (int i = 0; i < 16; i++) want += base + i;
        bad += h[(size_t)t] != want;
    }
    CHECK(bad == 0);
    cudaFree(d);
}

/* Every bug class: the launch fails with a sticky error and a diagnostic, never hangs. */
static void test_errors(void)
{
    pllm_cuemu_set_verbose(0);
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_shared_oob, 1, 64, 0, 0)(d, 32);
        expect_failure("shared out of bounds", cudaErrorIllegalAddress,
                       "index 32 out of bounds [0, 32)");
    }
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_shared_oob, 1, 64, 0, 0)(d, -1);
        expect_failure("shared negative index", cudaErrorIllegalAddress, "index -1 out of bounds");
    }
    {
        float *d = dalloc<float>(64);
        PLLM_LAUNCH(k_dyn_oob, 1, 64, 63 * sizeof(float), 0)(d, 63);
        expect_failure("dynamic shared out of bounds", cudaErrorIllegalAddress, "thread (63,0,0)");
    }
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_early_return, 1, 64, 0, 0)(d);
        expect_failure("early return before a barrier", cudaErrorLaunchFailure, "returned");
    }
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_two_barriers, 1, 64, 0, 0)(d);
        expect_failure("different barriers", cudaErrorLaunchFailure,
                       "must meet at the same barrier");
    }
    {
        int *d = dalloc<int>(32);
        PLLM_LAUNCH(k_read_exited_lane, 1, 32, 0, 0)(d);
        expect_failure("read from an exited lane", cudaErrorLaunchFailure, "has returned");
    }
    {
        int *d = dalloc<int>(32);
        PLLM_LAUNCH(k_mismatched_warp_calls, 1, 32, 0, 0)(d);
        expect_failure("mismatched warp calls", cudaErrorLaunchFailure,
                       "must all make that same call");
    }
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_deadlock, 1, 64, 0, 0)(d);
        expect_failure("deadlock", cudaErrorLaunchFailure, "deadlock");
    }
    {
        int *d = dalloc<int>(32);
        PLLM_LAUNCH(k_mask_without_self, 1, 32, 0, 0)(d);
        expect_failure("mask without the caller", cudaErrorLaunchFailure,
                       "does not include the calling lane");
    }
    {
        float *d = dalloc<float>(100);
        PLLM_LAUNCH(k_global_overrun, 1, 100, 0, 0)(d, 100);
        expect_failure("device buffer overrun", cudaErrorIllegalAddress,
                       "past the end of the 400-byte allocation");
    }
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_trap, 1, 64, 0, 0)(d, 9);
        expect_failure("__trap", cudaErrorLaunchFailure, "thread (9,0,0): __trap() called");
    }
    {
        int *d = dalloc<int>(64);
        PLLM_LAUNCH(k_nested_launch, 1, 1, 0, 0)(d);
        expect_failure("launch from a kernel", cudaErrorLaunchFailure, "dynamic parallelism");
    }
    {
        std::vector<int> host(64);
        PLLM_LAUNCH(k_trap, 1, 64, 0, 0)(host.data(), -1);
        expect_failure("host pointer argument", cudaErrorIllegalAddress, "argument 0");
    }
    {
        int *d = dalloc<int>(2048);
        PLLM_LAUNCH(k_trap, 1, 1025, 0, 0)(d, -1);
        expect_failure("1025 threads", cudaErrorInvalidConfiguration,
                       "invalid launch configuration");
        d = dalloc<int>(64);
        PLLM_LAUNCH(k_trap, 1, 64, 0, 0)(d, -1); /* a configuration error is not sticky */
        CUDA_OK(cudaGetLastError());
        cudaDeviceReset();
    }
    {
        int *d = dalloc<int>(16);
        std::vector<int> h(32);
        CHECK(cudaMemcpy(h.data(), d, 32 * sizeof(int), cudaMemcpyDeviceToHost) ==
              cudaErrorInvalidValue);
        CHECK(cudaMemcpy(d, h.data(), 16 * sizeof(int), cudaMemcpyDeviceToHost) ==
              cudaErrorInvalidValue);
        CHECK(cudaMemset(d + 8, 0, 9 * sizeof(int)) == cudaErrorInvalidValue);
        CHECK(cudaFree(h.data()) == cudaErrorInvalidValue);
        cudaDeviceReset();
    }
    pllm_cuemu_set_verbose(1);
}

/* A bug that kills the process (a fault): run it in a child, check it dies with the report. */
static void expect_death(const char *what, void (*body)(void), const char *needle)
{
    int fd[2];
    if (pipe(fd) != 0) {
        pllm_test_failures++;
        return;
    }
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
#ifdef __SANITIZE_ADDRESS__
        /* an expected death: ASan's report of it goes to this child's stderr, not to the report
         * files the sanitizer CI run fails on (scripts/ci-extra.sh) */
        __sanitizer_set_report_path("stderr");
#endif
        body();
        _exit(0);
    }
    close(fd[1]);
    std::string out;
    char buf[4096];
    ssize_t r;
    while ((r = read(fd[0], buf, sizeof buf)) > 0) out.append(buf, (size_t)r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool died = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
    if (!died || out.find(needle) == std::string::npos) {
        fprintf(stderr, "%s: expected the child to die reporting '%s'; status %d, stderr:\n%s\n",
                what, needle, status, out.c_str());
        pllm_test_failures++;
    } else {
        size_t nl = out.find('\n', out.find(needle));
        size_t st = out.rfind('\n', out.find(needle));
        st = st == std::string::npos ? 0 : st + 1;
        fprintf(stderr, "  caught (%s): %s\n", what, out.substr(st, nl - st).c_str());
    }
}

static void deep_stack_body(void)
{
    pllm_cuemu_set_stack_size(64 * 1024);
    int *d = dalloc<int>(32);
    PLLM_LAUNCH(k_deep_stack, 1, 32, 0, 0)(d, 256 * 1024);
}

static void wild_read_body(void)
{
    float *p = dalloc<float>(64), *o = dalloc<float>(32);
    PLLM_LAUNCH(k_wild_read, 1, 32, 0, 0)(o, p, 64); /* just past the end: the guard page */
}

#ifdef __SANITIZE_ADDRESS__
static void use_after_return_body(void)
{
    int *d = dalloc<int>(8 * 64);
    PLLM_LAUNCH(k_use_after_return, 8, 64, 0, 0)(d, 7);
    cudaDeviceSynchronize();
}
#endif

static void test_graphs_and_streams(uint64_t *rng)
{
    const int n = 300;
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    float *din = dalloc<float>(n), *dout = dalloc<float>(n);
    std::vector<float> in((size_t)n), out((size_t)n);
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_OK(cudaMemcpyAsync(din, in.data(), n * 4, cudaMemcpyHostToDevice, s));
    PLLM_LAUNCH(k_dyn_reverse, 1, 128, n * 4, s)(dout, din, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpyAsync(out.data(), dout, n * 4, cudaMemcpyDeviceToHost, s));
    cudaGraph_t g;
    cudaGraphExec_t x;
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CUDA_OK(cudaGraphInstantiate(&x, g, 0));
    CHECK(out[0] == 0.0f); /* nothing ran during the capture */
    for (int rep = 0; rep < 3; rep++) {
        for (float &v : in) v = pllm_test_randf(rng);
        CUDA_OK(cudaGraphLaunch(x, s));
        CUDA_OK(cudaStreamSynchronize(s));
        int bad = 0;
        for (int i = 0; i < n; i++) bad += out[(size_t)i] != in[(size_t)(n - 1 - i)];
        CHECK(bad == 0);
    }
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);

    /* synchronising while capturing invalidates the capture */
    pllm_cuemu_set_verbose(0);
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
    pllm_cuemu_set_verbose(1);
    (void)cudaGetLastError();

    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaEventRecord(e0, s));
    PLLM_LAUNCH(k_dyn_reverse, 4, 128, n * 4, s)(dout, din, n);
    CUDA_OK(cudaEventRecord(e1, s));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms = -1;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 0.0f);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(din), cudaFree(dout);
    CUDA_OK(cudaStreamDestroy(s));
}

/* An independent reference for __hfma: a, b, c are integers times 2^-24, so a*b + c is an exact
 * integer times 2^-48 in 128 bits; the nearest half is chosen by exact distance, ties to even. */
static uint16_t hbits(__half h)
{
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static __half hfrom(uint16_t u)
{
    __half h;
    memcpy(static_cast<void *>(&h), &u, 2);
    return h;
}
static uint16_t ref_hfma(uint16_t a, uint16_t b, uint16_t c)
{
    auto units = [](uint16_t h) { return (long long)ldexp((double)__half2float(hfrom(h)), 24); };
    const __int128 S = (__int128)units(a) * units(b) + (__int128)units(c) * ((__int128)1 << 24);
    const __int128 lim = (__int128)65520 << 48; /* from here on, round to infinity */
    if (S >= lim) return 0x7c00;
    if (S <= -lim) return 0xfc00;
    if (S == 0) { /* exact zero: -0 only for (-0) + (-0) */
        bool pneg = ((a ^ b) & 0x8000) != 0;
        return (pneg && (c & 0x8000)) ? 0x8000 : 0x0000;
    }
    uint16_t h0 = hbits(__double2half((double)S * 0x1p-48));
    uint16_t cand[5] = {h0, (uint16_t)(h0 + 1), (uint16_t)(h0 - 1), 0x0001, 0x8001};
    int best = -1;
    __int128 best_d = 0;
    for (int i = 0; i < 5; i++) {
        if ((cand[i] & 0x7c00) == 0x7c00) continue; /* inf/nan */
        __int128 d = S - (__int128)units(cand[i]) * ((__int128)1 << 24);
        if (d < 0) d = -d;
        if (best < 0 || d < best_d || (d == best_d && !(cand[i] & 1) && (cand[best] & 1)))
            best = i, best_d = d;
    }
    return cand[best];
}

static void test_hfma(uint64_t *rng)
{
    const int n = 1 << 16;
    std::vector<__half> a((size_t)n), b((size_t)n), c((size_t)n);
    auto finite = [&](uint16_t mask) {
        uint16_t u;
        do u = (uint16_t)(pllm_test_rand(rng) & mask);
        while ((u & 0x7c00) == 0x7c00);
        return u;
    };
    for (int i = 0; i < n; i++) {
        /* moderate exponents, and a tiny (subnormal) c in half the cases: the double-rounding trap
         */
        a[(size_t)i] =
            hfrom((uint16_t)((finite(0x83ff) | 0x3800) ^ (pllm_test_rand(rng) & 0x0400)));
        b[(size_t)i] =
            hfrom((uint16_t)((finite(0x83ff) | 0x3c00) ^ (pllm_test_rand(rng) & 0x0c00)));
        c[(size_t)i] = hfrom(i % 2 ? finite(0x83ff) : finite(0xffff));
    }
    __half *da = dalloc<__half>(n), *db = dalloc<__half>(n), *dc = dalloc<__half>(n),
           *dout = dalloc<__half>(n);
    CUDA_OK(cudaMemcpy(da, a.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db, b.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dc, c.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
    PLLM_LAUNCH(k_hfma, (n + 255) / 256, 256, 0, 0)(dout, da, db, dc, n);
    CUDA_OK(cudaGetLastError());
    std::vector<__half> h = fetch(dout, (size_t)n);
    int bad = 0, naive_off = 0;
    for (int i = 0; i < n; i++) {
        uint16_t want = ref_hfma(hbits(a[(size_t)i]), hbits(b[(size_t)i]), hbits(c[(size_t)i]));
        uint16_t naive = hbits(__float2half(fmaf(
            __half2float(a[(size_t)i]), __half2float(b[(size_t)i]), __half2float(c[(size_t)i]))));
        naive_off += naive != want;
        if (hbits(h[(size_t)i]) != want && bad++ < 3)
            fprintf(stderr, "__hfma(%04x, %04x, %04x) = %04x, want %04x\n", hbits(a[(size_t)i]),
                    hbits(b[(size_t)i]), hbits(c[(size_t)i]), hbits(h[(size_t)i]), want);
    }
    fprintf(stderr, "  __hfma: %d random cases exact (float fma then rounding would miss %d)\n",
            n - bad, naive_off);
    CHECK(bad == 0);
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dout);
}

/* The emulator alternates the thread order between blocks, so a race shows in one of them. */
static void test_race_exposed(void)
{
    int *d = dalloc<int>(512);
    PLLM_LAUNCH(k_racy, 2, 256, 0, 0)(d);
    CUDA_OK(cudaGetLastError());
    std::vector<int> h = fetch(d, 512);
    int wrong[2] = {0, 0};
    for (int b = 0; b < 2; b++)
        for (int t = 1; t < 256; t++) wrong[b] += h[(size_t)(b * 256 + t)] != t;
    fprintf(stderr, "  missing barrier: %d and %d of 255 reads wrong in blocks 0 and 1\n", wrong[0],
            wrong[1]);
    if (strcmp(pllm_test_env("PLLM_CUEMU_ORDER", "alternate"), "forward") != 0) /* forward hides it */
        CHECK(wrong[0] + wrong[1] > 0);
    cudaFree(d);
}

static void test_poison(void)
{
    /* fresh device memory reads as NaN; memset clears it */
    float *d = dalloc<float>(10);
    std::vector<float> h = fetch(d, 10);
    CHECK(h[0] != h[0] && h[9] != h[9]);
    CUDA_OK(cudaMemset(d, 0, 40));
    h = fetch(d, 10);
    CHECK(h[0] == 0.0f && h[9] == 0.0f);
    cudaFree(d);
}

int main(void)
{
    uint64_t seed = strtoull(pllm_test_env("PLLM_TEST_SEED", "0"), nullptr, 10);
    if (!seed) seed = (uint64_t)time(nullptr) ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "cuemu_selftest: seed %llu (PLLM_TEST_SEED to repeat)\n",
            (unsigned long long)seed);
    uint64_t rng = seed;
    double t0 = pllm_now();
    test_barrier();
    test_shuffles();
    test_votes(&rng);
    test_atomics();
    test_indices();
    test_block_sum(&rng);
    test_dynamic_shared(&rng);
    test_partial_warp();
    test_graphs_and_streams(&rng);
    test_poison();
    test_race_exposed();
    test_hfma(&rng);
    test_errors();
    test_host_pointers(&rng);
    expect_death("fiber stack overflow", deep_stack_body, "fiber stack overflow");
    expect_death("read just past a device buffer", wild_read_body,
                 "0 bytes past the end of the 256-byte device allocation");
#ifdef __SANITIZE_ADDRESS__
    /* ASan's stack-use-after-return inside a kernel, when the run asks for it (scripts/ci-extra.sh
     * does): the emulator keeps each fiber slot's fake stack from block to block */
    const char *ao = getenv("ASAN_OPTIONS");
    if (ao && strstr(ao, "detect_stack_use_after_return=1"))
        expect_death("stack use after return in a kernel", use_after_return_body,
                     "stack-use-after-return");
    else
        fprintf(stderr, "cuemu_selftest: ASAN_OPTIONS lacks detect_stack_use_after_return=1: "
                        "the use-after-return check is not run\n");
#endif
    pllm_cuemu_stats st;
    pllm_cuemu_get_stats(&st);
    fprintf(stderr,
            "cuemu_selftest: %llu launches, %llu blocks, %llu threads, %llu switches, %llu "
            "barriers, %llu warp "
            "collectives in %.2f s\n",
            (unsigned long long)st.launches, (unsigned long long)st.blocks,
            (unsigned long long)st.threads, (unsigned long long)st.switches,
            (unsigned long long)st.barriers, (unsigned long long)st.warp_collectives,
            pllm_now() - t0);
    return pllm_test_finish("cuemu_selftest");
}

#endif /* PLLM_CUDA_EMU */
