/*
 * cuda_emu.h: the CUDA emulator ("cuemu"). It lets pllm's kernels (the .cu files under cuda/)
 * compile unchanged as host C++ and run on a machine without a GPU, slowly, exactly and
 * strictly, so that the test suite proves their indexing, synchronisation and numerics.
 *
 * How it is used
 *   The emulated build compiles each .cu file as C++ (`-x c++`) with this header force-included
 *   first (`-include cuda/emu/cuda_emu.h`) and links libpllm_cuda_emu, which also implements the
 *   subset of the CUDA runtime and cuBLAS that pllm uses (cudaMalloc, cudaMemcpyAsync, streams,
 *   events, graphs, cublasGemmStridedBatchedEx, ...) on the host, against the toolkit's own
 *   declarations (cuda_runtime_api.h, cublas_api.h). No CUDA library is linked. Kernels use the
 *   few macros of cuda/launch.h (PLLM_LAUNCH, PLLM_SHARED, PLLM_DYNAMIC_SHARED), which expand to
 *   the plain CUDA syntax under nvcc and to the emulator's checked versions here.
 *
 * What is emulated
 *   - builtins: threadIdx, blockIdx, blockDim, gridDim (per fiber), warpSize, dim3/uint3
 *     (the toolkit's vector_types.h);
 *   - qualifiers: __global__, __device__, __host__, __forceinline__, __launch_bounds__,
 *     __restrict__; shared memory through PLLM_SHARED / PLLM_SHARED_VAR / PLLM_SHARED_2D /
 *     PLLM_DYNAMIC_SHARED (per block, bounds-checked, poisoned with 0xff bytes -- a NaN in
 *     every float format -- at the start of each block, canaries checked at its end);
 *   - __syncthreads, __syncthreads_count/_and/_or, __syncwarp;
 *   - warp shuffles (__shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync) for the
 *     types CUDA overloads them for, with the PTX lane arithmetic (width segments, clamping,
 *     5-bit lane operands); votes (__ballot_sync, __any_sync, __all_sync); __reduce_*_sync;
 *   - atomics (Add, Sub, Exch, Min, Max, Inc, Dec, CAS, And, Or, Xor) on the CUDA types;
 *     __threadfence*, __ldg and the cache-hint loads/stores, __trap;
 *   - math: the host libm for the standard functions (expf, tanhf, ...); the fast intrinsics
 *     (__expf, __fdividef, rsqrtf, ...) are computed exactly, which is within the GPU's stated
 *     error bounds of them; integer intrinsics (__popc, __clz, __ffs, __brev, min/max, ...);
 *     half/bfloat16 through the toolkit's cuda_fp16.h / cuda_bf16.h host code (exact rounding),
 *     and FP8 (E4M3/E5M2: __nv_cvt_float_to_fp8 with its saturation modes, __nv_fp8_e4m3, ...)
 *     through cuda_fp8.h's host code -- the same bit-level conversion the device runs (sm_89+
 *     in one cvt.rn.satfinite instruction, earlier GPUs in that very code); tests/cuda_fp8.c
 *     checks it against an independent reference,
 *     plus what those define for device code only: __hfma/__hfma2 (one rounding, exact),
 *     hexp/hlog/hsqrt/hrsqrt/hrcp/htanh/... and their h2 forms (computed in double, rounded
 *     once);
 *   - launches (PLLM_LAUNCH) with CUDA's limits on grid/block/shared memory checked; kernel
 *     pointer arguments must be NULL or point into a live cudaMalloc allocation (or a pinned
 *     buffer from cudaHostAlloc(cudaHostAllocMapped), the one kind of host memory a kernel may
 *     read on purpose); every 8-byte word of an argument passed by value (an argument struct)
 *     that holds the address of other host memory -- heap, stack, a mapped file, a plain
 *     cudaMallocHost buffer -- fails the launch naming the kernel, the argument, its type and
 *     the byte offset, as compute-sanitizer would on a GPU. The emulator runs kernels in the
 *     host's address space, where such a pointer would otherwise work (a host table in an
 *     argument struct crashed every forward pass on a real H100 while the emulated suite
 *     passed). Pointers stored inside device buffers are not followed.
 *
 * What is not emulated (using it fails to compile or to link, never silently):
 *   __shared__ / __constant__ / __managed__ written directly (use the PLLM_ macros), texture and
 *   surface memory, cooperative groups, __activemask, __match_*_sync, clusters, inline PTX,
 *   tensor-core intrinsics (wmma/mma), cp.async, the CUDA runtime calls and cuBLAS calls the
 *   cuda/emu/ sources do not implement (link error); a launch from inside a kernel (dynamic
 *   parallelism) fails that kernel. Kernels must not branch on __CUDA_ARCH__ for anything that
 *   changes results (it is not defined here).
 *
 * Execution model
 *   A launch runs synchronously on the calling host thread. Blocks run one after another in
 *   blockIdx order (x fastest). The threads of a block are cooperative fibers: each has its own
 *   stack (PLLM_CUEMU_STACK_KB, default 128 KiB, with a PROT_NONE guard page below it; a
 *   SIGSEGV handler reports an overflow with the kernel, block and thread), switched by a small
 *   hand-written context switch (x86-64; ucontext elsewhere). A fiber runs until it must wait:
 *     - __syncthreads is a generation barrier: every thread of the block must arrive at the same
 *       call (same file:line and kind); the last to arrive releases the others. A thread that
 *       has returned while others wait (or arrive) at a barrier is an error, as are threads
 *       waiting at different barriers: CUDA leaves both undefined.
 *     - a warp collective (shuffle, vote, __syncwarp) collects the value of every lane in the
 *       per-warp buffer; it completes when every non-exited lane named in the mask has arrived
 *       with the same operation, mask and width; the last arriver computes every lane's result
 *       into a per-lane slot and releases the others (so one barrier suffices: results never
 *       alias the inputs of the next collective). Lanes may wait in different collectives at
 *       once (disjoint masks, or lanes already at a full-warp call while others finish a
 *       half-warp one). Exited lanes may be named in the mask (CUDA allows it), but reading the
 *       value of a lane that did not take part is an error, as is a mask without the caller's
 *       own lane; lanes named in a mask that never make the same call leave it incomplete,
 *       which ends as a reported deadlock.
 *     - an atomic yields before its read-modify-write, so that the other fibers of the block
 *       interleave with it (CAS loops really retry); there is no preemption, so every atomic is
 *       trivially atomic.
 *   Fibers start, and leave barriers, in thread order in even blocks and in reverse order in
 *   odd ones (PLLM_CUEMU_ORDER=forward|reverse|alternate): correct kernels do not care, and a
 *   missing barrier -- a thread reading what another wrote with no __syncthreads/__syncwarp in
 *   between -- gives wrong results in one of the two orders instead of passing by luck.
 *   When no fiber can run and some have not finished, the block is deadlocked: the report says
 *   which threads wait where. Any error stops the kernel: the emulator prints a diagnostic
 *   naming the kernel, block, thread and source line to stderr, the launch fails with a sticky
 *   error (cudaErrorLaunchFailure / cudaErrorIllegalAddress) returned by cudaGetLastError and
 *   every later synchronising call, and pllm_cuemu_error_detail() returns the message.
 *   cudaDeviceReset() clears it (and frees every allocation), as on a real device.
 *
 * Device memory (see cuemu_runtime.cpp): PLLM_CUEMU_MEM_MB (default 1024) MiB of it. Every
 * cudaMalloc block is 256-byte aligned, filled with 0xff bytes (NaN) so reading uninitialised
 * memory shows, surrounded by canary bytes checked after every kernel and copy, and placed
 * against a guard page so that running off its end faults (reported with the kernel, block,
 * thread and the offset past the buffer). Copies and cuBLAS calls check that their device
 * ranges lie inside one allocation.
 *
 * Not detected: races that both thread orders happen to tolerate, reads before a buffer's start
 * that stay within its canary zone, writes through raw pointers far outside shared arrays,
 * infinite spin loops without an atomic or __nanosleep in them (a kernel spinning on a value
 * another block writes hangs, as it may on a GPU), launches with more threads than the kernel's
 * __launch_bounds__. __device__ variables are plain host globals; a device-side assert() is the
 * host's (it aborts the process). The ambient state the CUDA programming
 * model needs (the current fiber, the emulated device) lives in thread-local and process-wide
 * objects inside the library; nothing else is global.
 */
#pragma once

#if defined(__CUDACC__)
#error "cuda_emu.h is the host-C++ emulator; nvcc compiles kernels for the real device"
#endif
#if !defined(__cplusplus)
#error "cuda_emu.h needs C++ (compile .cu files with -x c++)"
#endif

#define PLLM_CUDA_EMU 1

/* The toolkit's headers, in host mode: dim3/uint3/float4, the runtime API declarations the
 * emulated runtime implements, and exact half/bfloat16 arithmetic. */
#include <vector_types.h>
#include <vector_functions.h>
#include <cuda_runtime_api.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

/* cuda_runtime.h (implicit under nvcc) would declare device builtins the emulator provides
 * itself; make an explicit include of it a no-op. */
#define __CUDA_RUNTIME_H__

#include "cuda/emu/cuemu.h"

/* ---- qualifiers ------------------------------------------------------------------------- */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __constant__
#undef __managed__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__                                                                                 \
    static_assert(false, "cuemu: declare shared memory with PLLM_SHARED / PLLM_SHARED_VAR / "      \
                         "PLLM_SHARED_2D / PLLM_DYNAMIC_SHARED from cuda/launch.h");
#define __constant__ static_assert(false, "cuemu: __constant__ memory is not emulated");
#define __managed__  static_assert(false, "cuemu: __managed__ memory is not emulated");

static constexpr int warpSize = 32;

namespace cuemu
{

/* The part of a fiber and of a block the inline accessors read. */
struct thread_ctx {
    uint3 tid;       /* threadIdx */
    unsigned linear; /* x + y*bdim.x + z*bdim.x*bdim.y */
    unsigned warp;   /* linear / 32 */
    unsigned lane;   /* linear % 32 */
};
struct block_ctx {
    uint3 bid;       /* blockIdx */
    dim3 bdim, gdim; /* blockDim, gridDim */
    thread_ctx *cur; /* the running fiber */
};

/* A source location of a shared-memory declaration (a constexpr static per declaration). */
struct shared_site {
    const char *name;
    const char *file;
    int line;
};

namespace detail
{

extern thread_local block_ctx *t_block;

[[noreturn]] void outside_kernel(const char *what);

inline thread_ctx &cur_thread(const char *what)
{
    block_ctx *b = t_block;
    if (!b || !b->cur) outside_kernel(what);
    return *b->cur;
}
inline block_ctx &cur_block(const char *what)
{
    block_ctx *b = t_block;
    if (!b || !b->cur) outside_kernel(what);
    return *b;
}

/* Report an error in the running kernel and stop it (never returns). */
[[noreturn]] void kernel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Shared memory: the block's arena. */
void *shared_static(const shared_site *site, size_t bytes, size_t align);
void *shared_dynamic(size_t *bytes);
[[noreturn]] void shared_oob(const shared_site *site, long long index, size_t bound, int dim);

/* Barriers and warp collectives (cuemu_core.cpp). */
enum class wop : uint8_t {
    none,
    syncwarp,
    shfl_idx,
    shfl_up,
    shfl_down,
    shfl_xor,
    ballot,
    any,
    all,
    reduce_add_u,
    reduce_min_u,
    reduce_max_u,
    reduce_add_i,
    reduce_min_i,
    reduce_max_i,
    reduce_and,
    reduce_or,
    reduce_xor,
};
uint64_t warp_op(wop op, unsigned mask, uint64_t value, int param, int width, const char *name,
                 const char *file, int line);
enum class bar_kind : uint8_t { plain, count, and_, or_ };
int block_barrier(bar_kind kind, int pred, const char *file, int line);
void atomic_point(const char *what);

template <class T>
inline T shfl(wop op, unsigned mask, T var, int param, int width, const char *name,
              const char *file, int line)
{
    static_assert(sizeof(T) <= 8, "shuffle type"); /* the overloads below list the types */
    uint64_t v = 0;
    memcpy(&v, static_cast<const void *>(&var), sizeof(T));
    v = warp_op(op, mask, v, param, width, name, file, line);
    T r;
    memcpy(static_cast<void *>(&r), &v, sizeof(T));
    return r;
}

/* Kernel launches. */
struct kernel_body {
    virtual ~kernel_body() = default;
    virtual void run() = 0;
};
struct launch_site {
    const char *kernel; /* the kernel expression as written */
    const char *file;
    int line;
};
/* Check a pointer argument (NULL, inside a live device allocation, or inside host memory
 * allocated with cudaHostAlloc(cudaHostAllocMapped), which kernels may read on purpose); false +
 * message if not. */
bool device_pointer_ok(const void *p);
/* Check the bytes of a by-value argument (a struct): every 8-byte-aligned word that holds the
 * address of host memory (heap, stack, a mapped file, a cudaMallocHost buffer: anything mapped
 * in this process that is not a device allocation or a mapped pinned buffer) fails the launch,
 * as the GPU would fault on it. False + message naming the argument, its type and the word's
 * byte offset if so. */
bool struct_words_ok(const void *p, size_t n, const char *type, int arg, char *msg, size_t cap);

/* The spelled type of T ("pllm_cuda_qkv_rope_args"), from the compiler's function signature. */
template <class T> inline const char *type_name(char *buf, size_t cap)
{
    /* GCC: "... type_name(char*, size_t) [with T = X; size_t = ...]", Clang: "[T = X]" */
    const char *f = __PRETTY_FUNCTION__;
    const char *b = strstr(f, "T = ");
    if (!b) return "?";
    b += 4;
    size_t n = strcspn(b, ";]");
    if (n >= cap) n = cap - 1;
    memcpy(buf, b, n);
    buf[n] = 0;
    return buf;
}
/* Fails the running kernel when called from one (a launch from device code). */
void check_host_context(const launch_site &site);
cudaError_t launch_grid(const launch_site &site, const void *kernel_id, dim3 grid, dim3 block,
                        size_t shmem, cudaStream_t stream, std::shared_ptr<kernel_body> body,
                        const char *bad_arg_msg);

template <class... P> struct body_impl final : kernel_body {
    void (*k)(P...);
    std::tuple<P...> args;
    body_impl(void (*k_)(P...), P... a) : k(k_), args(a...) {}
    void run() override { std::apply(k, args); } /* each fiber gets its own copies */
};

template <class T> inline void check_arg(const T &v, int i, char *msg, size_t cap)
{
    if constexpr (std::is_pointer<T>::value) {
        if (msg[0] == 0 && !device_pointer_ok((const void *)v))
            snprintf(msg, cap,
                     "argument %d (%p) is not a device pointer: it is neither NULL nor inside a "
                     "live cudaMalloc allocation",
                     i, (const void *)v);
    } else if constexpr (std::is_class<T>::value && std::is_trivially_copyable<T>::value) {
        char name[128];
        if (msg[0] != 0) return;
        /* padding bytes hold whatever the caller's stack held (half a stale pointer next to a
         * small int reads as an address): zero them first, so only members are judged */
        T c = v;
#if defined(__has_builtin)
#if __has_builtin(__builtin_clear_padding)
        __builtin_clear_padding(&c);
#endif
#endif
        struct_words_ok(&c, sizeof c, type_name<T>(name, sizeof name), i, msg, cap);
    } else {
        (void)v, (void)i, (void)msg, (void)cap;
    }
}

template <class... P> struct launcher {
    void (*k)(P...);
    launch_site site;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    void operator()(P... args) const
    {
        check_host_context(site);
        char msg[512] = {0};
        int i = 0;
        (check_arg(args, i++, msg, sizeof msg), ...);
        (void)i;
        launch_grid(site, (const void *)k, grid, block, shmem, stream,
                    std::make_shared<body_impl<P...>>(k, args...), msg[0] ? msg : nullptr);
    }
};

} /* namespace detail */

template <class... P>
inline detail::launcher<P...> make_launch(void (*k)(P...), const char *name, dim3 grid, dim3 block,
                                          size_t shmem, cudaStream_t stream, const char *file,
                                          int line)
{
    return detail::launcher<P...>{k, {name, file, line}, grid, block, shmem, stream};
}

/* ---- checked shared memory views ---------------------------------------------------------- */

/* A checked pointer into shared memory: indexing and arithmetic stay within [0, n]. Converts
 * to a plain T* (unchecked from then on) so it can be passed to device functions. */
template <class T> class shared_ptr_checked
{
  public:
    shared_ptr_checked(T *base, size_t n, ptrdiff_t off, const shared_site *site)
        : base_(base), n_(n), off_(off), site_(site)
    {
    }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    T &operator[](I i) const
    {
        long long k = (long long)off_ + (long long)i;
        if (k < 0 || (unsigned long long)k >= n_) detail::shared_oob(site_, k, n_, 0);
        return base_[k];
    }
    T &operator*() const { return (*this)[0]; }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    shared_ptr_checked operator+(I i) const
    {
        long long k = (long long)off_ + (long long)i;
        if (k < 0 || (unsigned long long)k > n_) detail::shared_oob(site_, k, n_, 0);
        return shared_ptr_checked(base_, n_, (ptrdiff_t)k, site_);
    }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    shared_ptr_checked operator-(I i) const
    {
        return *this + -(long long)i;
    }
    operator T *() const { return base_ + off_; }
    size_t size() const { return n_ - (size_t)off_; }

  private:
    T *base_;
    size_t n_;
    ptrdiff_t off_;
    const shared_site *site_;
};

/* PLLM_SHARED(T, name, N): a per-block T[N]. */
template <class T, size_t N> class shared_array
{
  public:
    explicit shared_array(const shared_site *site)
        : p_(static_cast<T *>(
              detail::shared_static(site, sizeof(T) * N, alignof(T) < 16 ? 16 : alignof(T)))),
          site_(site)
    {
    }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    T &operator[](I i) const
    {
        if (i < 0 || (unsigned long long)i >= N) detail::shared_oob(site_, (long long)i, N, 0);
        return p_[i];
    }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    shared_ptr_checked<T> operator+(I i) const
    {
        return shared_ptr_checked<T>(p_, N, 0, site_) + i;
    }
    operator T *() const { return p_; }

  private:
    T *p_;
    const shared_site *site_;
};

/* PLLM_SHARED_2D(T, name, R, C): a per-block T[R][C]; both indices are checked. */
template <class T, size_t R, size_t C> class shared_array2
{
  public:
    explicit shared_array2(const shared_site *site)
        : p_(static_cast<T *>(
              detail::shared_static(site, sizeof(T) * R * C, alignof(T) < 16 ? 16 : alignof(T)))),
          site_(site)
    {
    }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    shared_ptr_checked<T> operator[](I i) const
    {
        if (i < 0 || (unsigned long long)i >= R) detail::shared_oob(site_, (long long)i, R, 1);
        return shared_ptr_checked<T>(p_ + (size_t)i * C, C, 0, site_);
    }

  private:
    T *p_;
    const shared_site *site_;
};

/* PLLM_DYNAMIC_SHARED(T, name): the launch's dynamic shared memory as n = bytes/sizeof(T) Ts. */
template <class T> inline shared_ptr_checked<T> dynamic_shared(const shared_site *site)
{
    size_t bytes = 0;
    T *p = static_cast<T *>(detail::shared_dynamic(&bytes));
    return shared_ptr_checked<T>(p, bytes / sizeof(T), 0, site);
}

template <class T> inline T &shared_var(const shared_site *site)
{
    return *static_cast<T *>(
        detail::shared_static(site, sizeof(T), alignof(T) < 16 ? 16 : alignof(T)));
}

} /* namespace cuemu */

#define CUEMU_SITE_(name)                                                                          \
    static constexpr ::cuemu::shared_site name##_cuemu_site_                                       \
    {                                                                                              \
#name, __FILE__, __LINE__                                                                  \
    }
#define CUEMU_SHARED_(T, name, n)                                                                  \
    CUEMU_SITE_(name);                                                                             \
    const ::cuemu::shared_array<T, (n)> name(&name##_cuemu_site_)
#define CUEMU_SHARED_2D_(T, name, r, c)                                                            \
    CUEMU_SITE_(name);                                                                             \
    const ::cuemu::shared_array2<T, (r), (c)> name(&name##_cuemu_site_)
#define CUEMU_SHARED_VAR_(T, name)                                                                 \
    CUEMU_SITE_(name);                                                                             \
    T &name = ::cuemu::shared_var<T>(&name##_cuemu_site_)
#define CUEMU_DYNAMIC_SHARED_(T, name)                                                             \
    CUEMU_SITE_(name);                                                                             \
    const ::cuemu::shared_ptr_checked<T> name = ::cuemu::dynamic_shared<T>(&name##_cuemu_site_)
#define CUEMU_LAUNCH_(kernel, grid, block, shmem, stream)                                          \
    ::cuemu::make_launch((kernel), #kernel, (grid), (block), (shmem), (stream), __FILE__, __LINE__)

/* ---- builtin variables ------------------------------------------------------------------ */
#define threadIdx (static_cast<const uint3 &>(::cuemu::detail::cur_thread("threadIdx").tid))
#define blockIdx  (static_cast<const uint3 &>(::cuemu::detail::cur_block("blockIdx").bid))
#define blockDim  (static_cast<const dim3 &>(::cuemu::detail::cur_block("blockDim").bdim))
#define gridDim   (static_cast<const dim3 &>(::cuemu::detail::cur_block("gridDim").gdim))

/* ---- synchronisation -------------------------------------------------------------------- */
inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    ::cuemu::detail::block_barrier(::cuemu::detail::bar_kind::plain, 0, file, line);
}
inline int __syncthreads_count(int pred, const char *file = __builtin_FILE(),
                               int line = __builtin_LINE())
{
    return ::cuemu::detail::block_barrier(::cuemu::detail::bar_kind::count, pred != 0, file, line);
}
inline int __syncthreads_and(int pred, const char *file = __builtin_FILE(),
                             int line = __builtin_LINE())
{
    return ::cuemu::detail::block_barrier(::cuemu::detail::bar_kind::and_, pred != 0, file, line);
}
inline int __syncthreads_or(int pred, const char *file = __builtin_FILE(),
                            int line = __builtin_LINE())
{
    return ::cuemu::detail::block_barrier(::cuemu::detail::bar_kind::or_, pred != 0, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                       int line = __builtin_LINE())
{
    ::cuemu::detail::warp_op(::cuemu::detail::wop::syncwarp, mask, 0, 0, 32, "__syncwarp", file,
                             line);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned)
{
    ::cuemu::detail::atomic_point("__nanosleep");
}
[[noreturn]] inline void __trap()
{
    ::cuemu::detail::kernel_fail("__trap() called");
}

/* ---- warp shuffles and votes ------------------------------------------------------------ */
#define CUEMU_DEF_SHFL_(T)                                                                         \
    inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32,                        \
                         const char *file = __builtin_FILE(), int line = __builtin_LINE())         \
    {                                                                                              \
        return ::cuemu::detail::shfl<T>(::cuemu::detail::wop::shfl_idx, mask, var, srcLane, width, \
                                        "__shfl_sync", file, line);                                \
    }                                                                                              \
    inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,                  \
                            const char *file = __builtin_FILE(), int line = __builtin_LINE())      \
    {                                                                                              \
        return ::cuemu::detail::shfl<T>(::cuemu::detail::wop::shfl_up, mask, var, (int)delta,      \
                                        width, "__shfl_up_sync", file, line);                      \
    }                                                                                              \
    inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,                \
                              const char *file = __builtin_FILE(), int line = __builtin_LINE())    \
    {                                                                                              \
        return ::cuemu::detail::shfl<T>(::cuemu::detail::wop::shfl_down, mask, var, (int)delta,    \
                                        width, "__shfl_down_sync", file, line);                    \
    }                                                                                              \
    inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32,                   \
                             const char *file = __builtin_FILE(), int line = __builtin_LINE())     \
    {                                                                                              \
        return ::cuemu::detail::shfl<T>(::cuemu::detail::wop::shfl_xor, mask, var, laneMask,       \
                                        width, "__shfl_xor_sync", file, line);                     \
    }
CUEMU_DEF_SHFL_(int)
CUEMU_DEF_SHFL_(unsigned int)
CUEMU_DEF_SHFL_(long)
CUEMU_DEF_SHFL_(unsigned long)
CUEMU_DEF_SHFL_(long long)
CUEMU_DEF_SHFL_(unsigned long long)
CUEMU_DEF_SHFL_(float)
CUEMU_DEF_SHFL_(double)
CUEMU_DEF_SHFL_(__half)
CUEMU_DEF_SHFL_(__half2)
CUEMU_DEF_SHFL_(__nv_bfloat16)
CUEMU_DEF_SHFL_(__nv_bfloat162)
#undef CUEMU_DEF_SHFL_

#define CUEMU_VOTE_(ret, name, op)                                                                 \
    inline ret name(unsigned mask, int pred, const char *file = __builtin_FILE(),                  \
                    int line = __builtin_LINE())                                                   \
    {                                                                                              \
        return (ret)::cuemu::detail::warp_op(::cuemu::detail::wop::op, mask, pred != 0, 0, 32,     \
                                             #name, file, line);                                   \
    }
CUEMU_VOTE_(unsigned, __ballot_sync, ballot)
CUEMU_VOTE_(int, __any_sync, any)
CUEMU_VOTE_(int, __all_sync, all)
#undef CUEMU_VOTE_

#define CUEMU_REDUCE_(ret, name, arg, op)                                                          \
    inline ret name(unsigned mask, arg value, const char *file = __builtin_FILE(),                 \
                    int line = __builtin_LINE())                                                   \
    {                                                                                              \
        return (ret)::cuemu::detail::warp_op(::cuemu::detail::wop::op, mask,                       \
                                             (uint64_t)(uint32_t)value, 0, 32, #name, file, line); \
    }
CUEMU_REDUCE_(unsigned, __reduce_add_sync, unsigned, reduce_add_u)
CUEMU_REDUCE_(unsigned, __reduce_min_sync, unsigned, reduce_min_u)
CUEMU_REDUCE_(unsigned, __reduce_max_sync, unsigned, reduce_max_u)
CUEMU_REDUCE_(int, __reduce_add_sync, int, reduce_add_i)
CUEMU_REDUCE_(int, __reduce_min_sync, int, reduce_min_i)
CUEMU_REDUCE_(int, __reduce_max_sync, int, reduce_max_i)
CUEMU_REDUCE_(unsigned, __reduce_and_sync, unsigned, reduce_and)
CUEMU_REDUCE_(unsigned, __reduce_or_sync, unsigned, reduce_or)
CUEMU_REDUCE_(unsigned, __reduce_xor_sync, unsigned, reduce_xor)
#undef CUEMU_REDUCE_

/* ---- atomics ---------------------------------------------------------------------------- */
/* Each yields first (so other fibers interleave), then does the read-modify-write at once. */
#define CUEMU_ATOMIC_(ret, name, T, expr)                                                          \
    inline ret name(T *address, T val)                                                             \
    {                                                                                              \
        ::cuemu::detail::atomic_point(#name);                                                      \
        T old = *address;                                                                          \
        *address = (expr);                                                                         \
        return old;                                                                                \
    }
CUEMU_ATOMIC_(int, atomicAdd, int, (int)((unsigned)old + (unsigned)val))
CUEMU_ATOMIC_(unsigned, atomicAdd, unsigned, old + val)
CUEMU_ATOMIC_(unsigned long long, atomicAdd, unsigned long long, old + val)
CUEMU_ATOMIC_(float, atomicAdd, float, old + val)
CUEMU_ATOMIC_(double, atomicAdd, double, old + val)
CUEMU_ATOMIC_(__half, atomicAdd, __half, __hadd(old, val))
CUEMU_ATOMIC_(__half2, atomicAdd, __half2, __hadd2(old, val))
CUEMU_ATOMIC_(__nv_bfloat16, atomicAdd, __nv_bfloat16, __hadd(old, val))
CUEMU_ATOMIC_(__nv_bfloat162, atomicAdd, __nv_bfloat162, __hadd2(old, val))
CUEMU_ATOMIC_(int, atomicSub, int, (int)((unsigned)old - (unsigned)val))
CUEMU_ATOMIC_(unsigned, atomicSub, unsigned, old - val)
CUEMU_ATOMIC_(int, atomicExch, int, val)
CUEMU_ATOMIC_(unsigned, atomicExch, unsigned, val)
CUEMU_ATOMIC_(unsigned long long, atomicExch, unsigned long long, val)
CUEMU_ATOMIC_(float, atomicExch, float, val)
CUEMU_ATOMIC_(int, atomicMin, int, val < old ? val : old)
CUEMU_ATOMIC_(unsigned, atomicMin, unsigned, val < old ? val : old)
CUEMU_ATOMIC_(long long, atomicMin, long long, val < old ? val : old)
CUEMU_ATOMIC_(unsigned long long, atomicMin, unsigned long long, val < old ? val : old)
CUEMU_ATOMIC_(int, atomicMax, int, val > old ? val : old)
CUEMU_ATOMIC_(unsigned, atomicMax, unsigned, val > old ? val : old)
CUEMU_ATOMIC_(long long, atomicMax, long long, val > old ? val : old)
CUEMU_ATOMIC_(unsigned long long, atomicMax, unsigned long long, val > old ? val : old)
CUEMU_ATOMIC_(unsigned, atomicInc, unsigned, old >= val ? 0u : old + 1u)
CUEMU_ATOMIC_(unsigned, atomicDec, unsigned, (old == 0u || old > val) ? val : old - 1u)
CUEMU_ATOMIC_(int, atomicAnd, int, old &val)
CUEMU_ATOMIC_(unsigned, atomicAnd, unsigned, old &val)
CUEMU_ATOMIC_(unsigned long long, atomicAnd, unsigned long long, old &val)
CUEMU_ATOMIC_(int, atomicOr, int, old | val)
CUEMU_ATOMIC_(unsigned, atomicOr, unsigned, old | val)
CUEMU_ATOMIC_(unsigned long long, atomicOr, unsigned long long, old | val)
CUEMU_ATOMIC_(int, atomicXor, int, old ^ val)
CUEMU_ATOMIC_(unsigned, atomicXor, unsigned, old ^ val)
CUEMU_ATOMIC_(unsigned long long, atomicXor, unsigned long long, old ^ val)
#undef CUEMU_ATOMIC_

#define CUEMU_CAS_(T)                                                                              \
    inline T atomicCAS(T *address, T compare, T val)                                               \
    {                                                                                              \
        ::cuemu::detail::atomic_point("atomicCAS");                                                \
        T old = *address;                                                                          \
        if (old == compare) *address = val;                                                        \
        return old;                                                                                \
    }
CUEMU_CAS_(int)
CUEMU_CAS_(unsigned)
CUEMU_CAS_(unsigned long long)
CUEMU_CAS_(unsigned short)
#undef CUEMU_CAS_

/* ---- loads and stores with cache hints ---------------------------------------------------- */
template <class T> inline T __ldg(const T *p)
{
    return *p;
}
template <class T> inline T __ldcg(const T *p)
{
    return *p;
}
template <class T> inline T __ldca(const T *p)
{
    return *p;
}
template <class T> inline T __ldcs(const T *p)
{
    return *p;
}
template <class T> inline T __ldlu(const T *p)
{
    return *p;
}
template <class T> inline T __ldcv(const T *p)
{
    return *p;
}
template <class T> inline void __stwb(T *p, T v)
{
    *p = v;
}
template <class T> inline void __stcg(T *p, T v)
{
    *p = v;
}
template <class T> inline void __stcs(T *p, T v)
{
    *p = v;
}
template <class T> inline void __stwt(T *p, T v)
{
    *p = v;
}

/* ---- math intrinsics (exact host versions) ------------------------------------------------ */
inline float __expf(float x)
{
    return expf(x);
}
inline float __exp10f(float x)
{
    return exp10f(x);
}
inline float __logf(float x)
{
    return logf(x);
}
inline float __log2f(float x)
{
    return log2f(x);
}
inline float __log10f(float x)
{
    return log10f(x);
}
inline float __powf(float x, float y)
{
    return powf(x, y);
}
inline float __sinf(float x)
{
    return sinf(x);
}
inline float __cosf(float x)
{
    return cosf(x);
}
inline float __tanf(float x)
{
    return tanf(x);
}
inline void __sincosf(float x, float *s, float *c)
{
    *s = sinf(x), *c = cosf(x);
}
inline float __fdividef(float x, float y)
{
    return x / y;
}
inline float __fdiv_rn(float x, float y)
{
    return x / y;
}
inline float __frcp_rn(float x)
{
    return 1.0f / x;
}
inline float __fsqrt_rn(float x)
{
    return sqrtf(x);
}
inline float __fadd_rn(float x, float y)
{
    return x + y;
}
inline float __fsub_rn(float x, float y)
{
    return x - y;
}
inline float __fmul_rn(float x, float y)
{
    return x * y;
}
inline float __fmaf_rn(float x, float y, float z)
{
    return fmaf(x, y, z);
}
inline float __saturatef(float x)
{
    return x != x ? 0.0f : fminf(fmaxf(x, 0.0f), 1.0f);
}
inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
inline double rsqrt(double x)
{
    return 1.0 / sqrt(x);
}
inline float rcbrtf(float x)
{
    return 1.0f / cbrtf(x);
}
inline float __int_as_float(int x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}
inline int __float_as_int(float x)
{
    int i;
    memcpy(&i, &x, 4);
    return i;
}
inline float __uint_as_float(unsigned x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}
inline unsigned __float_as_uint(float x)
{
    unsigned i;
    memcpy(&i, &x, 4);
    return i;
}
inline double __longlong_as_double(long long x)
{
    double d;
    memcpy(&d, &x, 8);
    return d;
}
inline long long __double_as_longlong(double x)
{
    long long i;
    memcpy(&i, &x, 8);
    return i;
}
inline int __float2int_rn(float x)
{
    return (int)nearbyintf(x);
}
inline int __float2int_rz(float x)
{
    return (int)truncf(x);
}
inline int __float2int_rd(float x)
{
    return (int)floorf(x);
}
inline int __float2int_ru(float x)
{
    return (int)ceilf(x);
}
inline unsigned __float2uint_rn(float x)
{
    return (unsigned)nearbyintf(x);
}
inline float __int2float_rn(int x)
{
    return (float)x;
}
inline float __uint2float_rn(unsigned x)
{
    return (float)x;
}
inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x)
{
    return __builtin_popcountll(x);
}
inline int __clz(int x)
{
    return x == 0 ? 32 : __builtin_clz((unsigned)x);
}
inline int __clzll(long long x)
{
    return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
inline int __ffs(int x)
{
    return __builtin_ffs(x);
}
inline int __ffsll(long long x)
{
    return __builtin_ffsll(x);
}
inline unsigned __brev(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned long long __brevll(unsigned long long x)
{
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline int __mul24(int x, int y)
{
    return (int)((long long)((x << 8) >> 8) * ((y << 8) >> 8));
}
inline unsigned __umul24(unsigned x, unsigned y)
{
    return (x & 0xffffffu) * (y & 0xffffffu);
}
inline int __mulhi(int x, int y)
{
    return (int)(((long long)x * y) >> 32);
}
inline unsigned __umulhi(unsigned x, unsigned y)
{
    return (unsigned)(((unsigned long long)x * y) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y)
{
    return (unsigned long long)(((unsigned __int128)x * y) >> 64);
}
inline long long __mul64hi(long long x, long long y)
{
    return (long long)(((__int128)x * y) >> 64);
}

/* ---- half / bfloat16 intrinsics the toolkit's headers define for device code only ---------- */
namespace cuemu
{
namespace detail
{
/* x = s + e exactly (e from TwoSum): the double nearest x in round-to-odd, which then rounds
 * correctly to any format of at most 51 bits (here 11 and 8), so a*b + c below is rounded once,
 * as the hardware's fused multiply-add does. */
inline double round_to_odd(double s, double e)
{
    if (e == 0.0 || !isfinite(s)) return s;
    uint64_t u;
    memcpy(&u, &s, 8);
    if (u & 1) return s;
    return nextafter(s, e > 0 ? INFINITY : -INFINITY);
}
inline double fma_odd(double a, double b, double c)
{
    const double p = a * b; /* exact: 11- or 8-bit significands */
    const double s = p + c, bb = s - p, e = (p - (s - bb)) + (c - bb);
    return round_to_odd(s, e);
}
} /* namespace detail */
} /* namespace cuemu */

inline __half __hfma(__half a, __half b, __half c)
{
    return __double2half(
        ::cuemu::detail::fma_odd(__half2float(a), __half2float(b), __half2float(c)));
}
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c)
{
    return __double2bfloat16(
        ::cuemu::detail::fma_odd(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c)
{
    return __halves2half2(__hfma(__low2half(a), __low2half(b), __low2half(c)),
                          __hfma(__high2half(a), __high2half(b), __high2half(c)));
}
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c)
{
    return __halves2bfloat162(__hfma(__low2bfloat16(a), __low2bfloat16(b), __low2bfloat16(c)),
                              __hfma(__high2bfloat16(a), __high2bfloat16(b), __high2bfloat16(c)));
}
/* Half-precision math: computed in double and rounded once (within the GPU's error bounds). */
#define CUEMU_HMATH_(name, h2name, expr)                                                           \
    inline __half name(__half a)                                                                   \
    {                                                                                              \
        const double x = __half2float(a);                                                          \
        return __double2half(expr);                                                                \
    }                                                                                              \
    inline __nv_bfloat16 name(__nv_bfloat16 a)                                                     \
    {                                                                                              \
        const double x = __bfloat162float(a);                                                      \
        return __double2bfloat16(expr);                                                            \
    }                                                                                              \
    inline __half2 h2name(__half2 a)                                                               \
    {                                                                                              \
        return __halves2half2(name(__low2half(a)), name(__high2half(a)));                          \
    }                                                                                              \
    inline __nv_bfloat162 h2name(__nv_bfloat162 a)                                                 \
    {                                                                                              \
        return __halves2bfloat162(name(__low2bfloat16(a)), name(__high2bfloat16(a)));              \
    }
CUEMU_HMATH_(hexp, h2exp, exp(x))
CUEMU_HMATH_(hexp2, h2exp2, exp2(x))
CUEMU_HMATH_(hlog, h2log, log(x))
CUEMU_HMATH_(hlog2, h2log2, log2(x))
CUEMU_HMATH_(hsqrt, h2sqrt, sqrt(x))
CUEMU_HMATH_(hrsqrt, h2rsqrt, 1.0 / sqrt(x))
CUEMU_HMATH_(hrcp, h2rcp, 1.0 / x)
CUEMU_HMATH_(htanh, h2tanh, tanh(x))
CUEMU_HMATH_(hsin, h2sin, sin(x))
CUEMU_HMATH_(hcos, h2cos, cos(x))
#undef CUEMU_HMATH_
inline int __half2int_rn(__half a)
{
    return (int)nearbyintf(__half2float(a));
}

/* CUDA's global min/max overloads. */
#define CUEMU_MINMAX_(T)                                                                           \
    inline T min(T a, T b)                                                                         \
    {                                                                                              \
        return a < b ? a : b;                                                                      \
    }                                                                                              \
    inline T max(T a, T b)                                                                         \
    {                                                                                              \
        return a > b ? a : b;                                                                      \
    }
CUEMU_MINMAX_(int)
CUEMU_MINMAX_(unsigned int)
CUEMU_MINMAX_(long)
CUEMU_MINMAX_(unsigned long)
CUEMU_MINMAX_(long long)
CUEMU_MINMAX_(unsigned long long)
#undef CUEMU_MINMAX_
inline unsigned min(int a, unsigned b)
{
    return min((unsigned)a, b);
}
inline unsigned min(unsigned a, int b)
{
    return min(a, (unsigned)b);
}
inline unsigned max(int a, unsigned b)
{
    return max((unsigned)a, b);
}
inline unsigned max(unsigned a, int b)
{
    return max(a, (unsigned)b);
}
inline float min(float a, float b)
{
    return fminf(a, b);
}
inline float max(float a, float b)
{
    return fmaxf(a, b);
}
inline double min(double a, double b)
{
    return fmin(a, b);
}
inline double max(double a, double b)
{
    return fmax(a, b);
}
