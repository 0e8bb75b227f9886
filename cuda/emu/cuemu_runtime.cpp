/*
 * cuemu_runtime.cpp: the subset of the CUDA runtime API pllm uses, implemented on the host
 * against the toolkit's own declarations (cuda_runtime_api.h), for the emulated device.
 *
 * Device memory: each cudaMalloc gets its own mapping
 *     [guard page][canary >= 256 B][user bytes, 256-aligned start][canary < 256 B][guard page]
 * so the buffer ends against a PROT_NONE page (running off its end faults at once unless the
 * size leaves a tail gap, which canaries watch). The user bytes start as 0xff (NaN in every float
 * format), so reading memory nobody wrote shows up in results. Canaries are checked after every
 * kernel and at every synchronising call; a damaged one is a sticky cudaErrorIllegalAddress
 * naming the allocation and the kernel that ran last.
 *
 * Streams execute each operation when it is submitted (the emulated device is synchronous),
 * except while capturing: then operations are recorded into the graph and run, in order, by
 * each cudaGraphLaunch of an instantiated copy. Events record the host time.
 *
 * Errors: every failing call records the error as this thread's last error and a detailed
 * message (pllm_cuemu_error_detail()); kernel faults are sticky until cudaDeviceReset().
 */
#include "cuda/emu/cuemu_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct CUstream_st {
    bool capturing = false;
    bool invalidated = false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    struct CUgraph_st *graph = nullptr;
};
struct CUevent_st {
    unsigned flags = 0;
    bool recorded = false;
    double t = 0;
};
struct CUgraph_st {
    std::vector<cuemu::rt::op_fn> ops;
};
struct CUgraphExec_st {
    std::vector<cuemu::rt::op_fn> ops;
};

namespace cuemu
{
namespace rt
{
namespace
{

constexpr size_t kAlign = 256;
constexpr size_t kFront = 256; /* canary bytes checked before each buffer */
constexpr unsigned char kCanary = 0xa5;
constexpr unsigned char kPoison = 0xff;

struct alloc_rec {
    char *map;
    size_t map_len;
    char *user;
    size_t size;
    size_t tail; /* canary bytes between user + size and the guard page */
};

struct device {
    std::mutex mu;
    std::map<uintptr_t, alloc_rec> allocs; /* by user address */
    std::set<void *> host_allocs;
    std::map<uintptr_t, size_t> pinned_size; /* every host_allocs entry: start -> size */
    std::map<uintptr_t, size_t> mapped_host; /* cudaHostAlloc(cudaHostAllocMapped): start -> size */
    std::set<CUstream_st *> streams;
    std::set<CUevent_st *> events;
    std::map<const void *, int> max_dyn_smem;
    size_t total = 0, used = 0;
    cudaError_t sticky = cudaSuccess;
    std::string sticky_msg;
    CUstream_st legacy; /* the NULL stream */
    int n_capturing = 0;
    counters stats;

    device()
    {
        const char *e = getenv("PLLM_CUEMU_MEM_MB");
        long mb = e ? strtol(e, nullptr, 10) : 0;
        total = (size_t)(mb > 0 ? mb : 1024) << 20;
    }
};

device &dev()
{
    static device *d = new device; /* never destroyed: usable from other static destructors */
    return *d;
}

thread_local cudaError_t t_last = cudaSuccess;
thread_local std::string t_detail;

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const alloc_rec *find_locked(device &d, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = d.allocs.upper_bound(a);
    if (it == d.allocs.begin()) return nullptr;
    --it;
    const alloc_rec &r = it->second;
    if (a >= (uintptr_t)r.user && a <= (uintptr_t)r.user + r.size) return &r;
    return nullptr;
}

bool canary_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] != kCanary) return false;
    return true;
}

/* Sticky-error check shared by all entry points. */
cudaError_t refuse_if_sticky(const char *api)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    if (d.sticky == cudaSuccess) return cudaSuccess;
    t_last = d.sticky;
    t_detail = std::string(api) + ": refused, an earlier error is sticky: " + d.sticky_msg;
    return d.sticky;
}

CUstream_st *resolve(cudaStream_t s, bool *ok)
{
    device &d = dev();
    *ok = true;
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &d.legacy;
    std::lock_guard<std::mutex> lk(d.mu);
    if (!d.streams.count(s)) {
        *ok = false;
        return nullptr;
    }
    return s;
}

/* A synchronous call (or one on the legacy stream) while a capture is in progress. */
cudaError_t capture_conflict(const char *api)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    if (d.n_capturing == 0) return cudaSuccess;
    for (CUstream_st *s : d.streams)
        if (s->capturing) s->invalidated = true;
    t_last = cudaErrorStreamCaptureImplicit;
    t_detail = std::string(api) +
               ": not allowed while a stream is capturing (the capture is now invalidated)";
    if (verbose()) fprintf(stderr, "cuemu: %s\n", t_detail.c_str());
    return cudaErrorStreamCaptureImplicit;
}

cudaError_t copy_checked(void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *api)
{
    if (n == 0) return cudaSuccess;
    bool dd = is_device_pointer(dst), sd = is_device_pointer(src);
    if (kind == cudaMemcpyDefault)
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection, false, "%s: invalid kind %d", api, (int)kind);
    if (want_dd && !device_range(dst, n))
        return fail(cudaErrorInvalidValue, false,
                    "%s: destination [%p, +%zu) is not inside one device allocation", api, dst, n);
    if (!want_dd && dd)
        return fail(cudaErrorInvalidValue, false,
                    "%s: destination %p is device memory but the copy kind says host", api, dst);
    if (want_sd && !device_range(src, n))
        return fail(cudaErrorInvalidValue, false,
                    "%s: source [%p, +%zu) is not inside one device allocation", api, src, n);
    if (!want_sd && sd)
        return fail(cudaErrorInvalidValue, false,
                    "%s: source %p is device memory but the copy kind says host", api, src);
    const char *s = static_cast<const char *>(src);
    char *t = static_cast<char *>(dst);
    if (s < t + n && t < s + n)
        return fail(cudaErrorInvalidValue, false, "%s: source and destination overlap", api);
    memcpy(dst, src, n);
    return cudaSuccess;
}

} /* namespace */

counters &stats()
{
    return dev().stats;
}

cudaError_t fail(cudaError_t err, bool sticky_err, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    device &d = dev();
    {
        std::lock_guard<std::mutex> lk(d.mu);
        if (sticky_err && d.sticky == cudaSuccess) {
            d.sticky = err;
            d.sticky_msg = buf;
        }
    }
    t_last = err;
    t_detail = buf;
    if (verbose()) fprintf(stderr, "cuemu: %s (%s)\n", buf, cudaGetErrorName(err));
    return err;
}

void note(const char *msg)
{
    t_detail = msg;
    if (verbose()) fprintf(stderr, "cuemu: %s\n", msg);
}

cudaError_t sticky()
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    return d.sticky;
}

bool device_range(const void *p, size_t n)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    const alloc_rec *r = find_locked(d, p);
    return r && (uintptr_t)p + n <= (uintptr_t)r->user + r->size &&
           (uintptr_t)p + n >= (uintptr_t)p;
}

bool is_device_pointer(const void *p)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    return find_locked(d, p) != nullptr;
}

bool is_mapped_host_pointer(const void *p)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    uintptr_t a = (uintptr_t)p;
    auto it = d.mapped_host.upper_bound(a);
    if (it == d.mapped_host.begin()) return false;
    --it;
    return a <= it->first + it->second;
}

namespace
{
/* The line of /proc/self/maps whose range holds a, reduced to what it names: the heap, a
 * thread's stack, a mapped file or anonymous memory. Empty when no readable mapping holds a, or
 * when the one that does is a reservation larger than 1 TiB (a sanitizer's shadow memory: two
 * small integers side by side in an argument struct can read as an address inside it). */
std::string describe_mapping(uintptr_t a)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return "mapped host memory";
    char line[1024];
    std::string r;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8] = {0};
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &name_at) < 3) continue;
        if (a < lo || a >= hi) continue;
        if (perms[0] != 'r' || hi - lo > (1ul << 40)) break;
        std::string name = name_at > 0 ? std::string(line + name_at) : std::string();
        while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
        if (name == "[heap]")
            r = "host heap memory (malloc)";
        else if (name.rfind("[stack", 0) == 0)
            r = "host stack memory";
        else if (!name.empty() && name[0] == '/')
            r = "host memory mapping the file " + name;
        else
            r = "anonymous host memory (a large malloc, a thread's stack or an mmap)";
        break;
    }
    fclose(f);
    return r;
}
} /* namespace */

std::string host_memory_at(uintptr_t w)
{
    if (w < 65536 || w >= ((uintptr_t)1 << 47)) return std::string(); /* not a user address */
    device &d = dev();
    {
        std::lock_guard<std::mutex> lk(d.mu);
        /* a device allocation's whole mapping (guards and canaries too) is device memory: a
         * pointer near a buffer is a bounds question, checked when the kernel runs */
        auto in_map = [w](const alloc_rec &r) {
            return w >= (uintptr_t)r.map && w < (uintptr_t)r.map + r.map_len;
        };
        auto ub = d.allocs.upper_bound(w); /* the mapping of ub starts below its user address */
        if (ub != d.allocs.end() && in_map(ub->second)) return std::string();
        if (ub != d.allocs.begin() && in_map(std::prev(ub)->second)) return std::string();
        auto h = d.mapped_host.upper_bound(w);
        if (h != d.mapped_host.begin()) {
            --h;
            if (w <= h->first + h->second) return std::string();
        }
        auto pin = d.pinned_size.upper_bound(w);
        if (pin != d.pinned_size.begin() && w <= std::prev(pin)->first + std::prev(pin)->second)
                return "pinned host memory from cudaMallocHost (kernels may read host memory "
                       "only from cudaHostAlloc(cudaHostAllocMapped))";
    }
#if defined(__SANITIZE_ADDRESS__)
    /* ASan's shadow memory (x86-64 layout): not memory the program allocated */
    if (w >= 0x7fff8000ull && w < 0x10007fff8000ull) return std::string();
#endif
    long pg = sysconf(_SC_PAGESIZE);
    void *page = (void *)(w & ~(uintptr_t)(pg - 1));
    if (msync(page, (size_t)pg, MS_ASYNC) != 0) return std::string(); /* not mapped: a number */
    return describe_mapping(w);
}

bool check_canaries(const char *after)
{
    device &d = dev();
    std::string msg;
    {
        std::lock_guard<std::mutex> lk(d.mu);
        for (auto &kv : d.allocs) {
            const alloc_rec &r = kv.second;
            char buf[256];
            if (!canary_ok(r.user - kFront, kFront)) {
                size_t i = kFront;
                while (i > 0 && (unsigned char)r.user[-(ptrdiff_t)i] == kCanary) i--;
                snprintf(
                    buf, sizeof buf,
                    "device memory before the start of the %zu-byte allocation at %p was written "
                    "(farthest damaged byte: start - %zu)",
                    r.size, (void *)r.user, i);
                msg = buf;
                break;
            }
            if (!canary_ok(r.user + r.size, r.tail)) {
                size_t i = 0;
                while (i < r.tail && (unsigned char)r.user[r.size + i] == kCanary) i++;
                snprintf(buf, sizeof buf,
                         "device memory past the end of the %zu-byte allocation at %p was written "
                         "(first damaged byte: end + %zu)",
                         r.size, (void *)r.user, i);
                msg = buf;
                break;
            }
        }
    }
    if (msg.empty()) return true;
    fail(cudaErrorIllegalAddress, true, "%s, detected after %s", msg.c_str(), after);
    return false;
}

bool describe_address(const void *addr, char *buf, size_t cap)
{
    device &d = dev();
    if (!d.mu.try_lock()) return false;
    bool found = false;
    const char *a = static_cast<const char *>(addr);
    for (auto &kv : d.allocs) {
        const alloc_rec &r = kv.second;
        if (a < r.map || a >= r.map + r.map_len) continue;
        if (a >= r.user + r.size)
            snprintf(buf, cap, "%zu bytes past the end of the %zu-byte device allocation at %p",
                     (size_t)(a - (r.user + r.size)), r.size, (void *)r.user);
        else if (a < r.user)
            snprintf(buf, cap, "%zu bytes before the start of the %zu-byte device allocation at %p",
                     (size_t)(r.user - a), r.size, (void *)r.user);
        else
            snprintf(buf, cap, "inside the %zu-byte device allocation at %p", r.size,
                     (void *)r.user);
        found = true;
        break;
    }
    d.mu.unlock();
    return found;
}

int max_dynamic_smem(const void *kernel)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    auto it = d.max_dyn_smem.find(kernel);
    return it == d.max_dyn_smem.end() ? 0 : it->second;
}

cudaError_t submit(cudaStream_t stream, op_fn op)
{
    bool ok;
    CUstream_st *s = resolve(stream, &ok);
    if (!ok)
        return fail(cudaErrorInvalidResourceHandle, false, "stream %p is not a live stream",
                    (void *)stream);
    device &d = dev();
    {
        std::unique_lock<std::mutex> lk(d.mu);
        if (s->capturing) {
            if (s->invalidated) {
                lk.unlock();
                return fail(cudaErrorStreamCaptureInvalidated, false,
                            "the stream's capture was invalidated");
            }
            s->graph->ops.push_back(std::move(op));
            return cudaSuccess;
        }
    }
    if (s == &d.legacy)
        if (cudaError_t e = capture_conflict("an operation on the legacy (NULL) stream")) return e;
    if (cudaError_t e = refuse_if_sticky("stream operation")) return e;
    return op();
}

} /* namespace rt */
} /* namespace cuemu */

using namespace cuemu::rt;

extern "C" const char *pllm_cuemu_error_detail(void)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    if (d.sticky != cudaSuccess) return d.sticky_msg.c_str();
    return t_detail.c_str();
}

/* ---- errors and device ------------------------------------------------------------------- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t s = sticky();
    if (s != cudaSuccess) return s;
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    cudaError_t s = sticky();
    return s != cudaSuccess ? s : t_last;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define N_(x)                                                                                      \
    case x:                                                                                        \
        return #x;
        N_(cudaSuccess)
        N_(cudaErrorInvalidValue)
        N_(cudaErrorMemoryAllocation) N_(cudaErrorInvalidConfiguration)
            N_(cudaErrorInvalidMemcpyDirection) N_(cudaErrorNoDevice) N_(cudaErrorInvalidDevice)
                N_(cudaErrorInvalidResourceHandle) N_(cudaErrorNotReady) N_(cudaErrorIllegalAddress)
                    N_(cudaErrorAssert) N_(cudaErrorLaunchFailure) N_(cudaErrorNotSupported)
                        N_(cudaErrorStreamCaptureUnsupported) N_(cudaErrorStreamCaptureInvalidated)
                            N_(cudaErrorStreamCaptureImplicit) N_(cudaErrorStreamCaptureUnmatched)
                                N_(cudaErrorIllegalState) N_(cudaErrorInvalidDevicePointer)
#undef N_
                                    default : return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection:
        return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    case cudaErrorNotSupported:
        return "operation not supported";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorAssert:
        return "device-side assert triggered";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnmatched:
        return "the capture was not initiated in this stream";
    case cudaErrorIllegalState:
        return "the operation is not permitted in the current state";
    default:
        return "unknown error (emulated device)";
    }
}

/* The devices the emulator answers for: $PLLM_CUEMU_DEVICES (1..8, default 1). Every ordinal is
 * the same emulated device (one memory, one stream set): for testing command lines that run one
 * process per device (generate --device cuda:0,1), not several devices in one process. */
static int n_devices()
{
    static const int n = [] {
        const char *e = getenv("PLLM_CUEMU_DEVICES");
        const int v = e ? atoi(e) : 1;
        return v < 1 ? 1 : v > 8 ? 8 : v;
    }();
    return n;
}
static thread_local int g_current_device = 0;

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = n_devices();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device_id)
{
    if (device_id < 0 || device_id >= n_devices())
        return fail(cudaErrorInvalidDevice, false,
                    "cudaSetDevice(%d): the emulator has devices 0 to %d (PLLM_CUEMU_DEVICES)",
                    device_id, n_devices() - 1);
    g_current_device = device_id;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device_id)
{
    *device_id = g_current_device;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device_id)
{
    if (device_id < 0 || device_id >= n_devices())
        return fail(cudaErrorInvalidDevice, false, "cudaGetDeviceProperties(%d): no such device",
                    device_id);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "pllm cuemu (emulated sm_80, no GPU)");
    p->totalGlobalMem = dev().total;
    p->sharedMemPerBlock = CUEMU_STATIC_SMEM;
    p->sharedMemPerBlockOptin = CUEMU_OPTIN_SMEM;
    p->sharedMemPerMultiprocessor = CUEMU_OPTIN_SMEM + 1024;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = CUEMU_MAX_THREADS;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 8;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->unifiedAddressing = 1;
    p->l2CacheSize = 40 << 20;
    p->memoryBusWidth = 5120;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device_id)
{
    if (device_id < 0 || device_id >= n_devices())
        return fail(cudaErrorInvalidDevice, false, "cudaDeviceGetAttribute: no device %d",
                    device_id);
    switch (attr) {
    case cudaDevAttrMultiProcessorCount:
        *value = 1;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = CUEMU_OPTIN_SMEM;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
        *value = CUEMU_STATIC_SMEM;
        break;
    case cudaDevAttrComputeCapabilityMajor:
        *value = 8;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        break;
    case cudaDevAttrMaxThreadsPerBlock:
        *value = CUEMU_MAX_THREADS;
        break;
    case cudaDevAttrWarpSize:
        *value = 32;
        break;
    case cudaDevAttrClockRate: /* A100's, so reports computed from them look plausible */
        *value = 1410000;
        break;
    case cudaDevAttrMemoryClockRate:
        *value = 1215000;
        break;
    default:
        return fail(cudaErrorNotSupported, false, "cudaDeviceGetAttribute(%d) is not emulated",
                    (int)attr);
    }
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    *free_bytes = d.total - d.used;
    *total_bytes = d.total;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (cudaError_t e = capture_conflict("cudaDeviceSynchronize")) return e;
    if (!check_canaries("the last operation")) return sticky();
    return refuse_if_sticky("cudaDeviceSynchronize");
}

cudaError_t cudaDeviceReset(void)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    for (auto &kv : d.allocs) munmap(kv.second.map, kv.second.map_len);
    d.allocs.clear();
    d.used = 0;
    for (void *p : d.host_allocs) free(p);
    d.host_allocs.clear();
    d.pinned_size.clear();
    d.mapped_host.clear();
    for (CUstream_st *s : d.streams) delete s;
    d.streams.clear();
    for (CUevent_st *e : d.events) delete e;
    d.events.clear();
    d.max_dyn_smem.clear();
    d.n_capturing = 0;
    d.sticky = cudaSuccess;
    d.sticky_msg.clear();
    t_last = cudaSuccess;
    t_detail.clear();
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > CUEMU_OPTIN_SMEM)
            return fail(cudaErrorInvalidValue, false,
                        "cudaFuncSetAttribute: MaxDynamicSharedMemorySize %d outside [0, %d]",
                        value, CUEMU_OPTIN_SMEM);
        device &d = dev();
        std::lock_guard<std::mutex> lk(d.mu);
        d.max_dyn_smem[func] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    return fail(cudaErrorNotSupported, false, "cudaFuncSetAttribute(%d) is not emulated",
                (int)attr);
}

/* ---- memory ------------------------------------------------------------------------------ */

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    *ptr = nullptr;
    if (cudaError_t e = refuse_if_sticky("cudaMalloc")) return e;
    if (size == 0) return cudaSuccess;
    device &d = dev();
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (size + kAlign - 1) / kAlign * kAlign;
    size_t body = (kFront + span + pg - 1) / pg * pg;
    size_t map_len = pg + body + pg;
    {
        std::lock_guard<std::mutex> lk(d.mu);
        if (size > d.total - d.used) {
            t_last = cudaErrorMemoryAllocation;
            t_detail = "cudaMalloc(" + std::to_string(size) + "): the emulated device has " +
                       std::to_string(d.total - d.used) + " bytes free (PLLM_CUEMU_MEM_MB)";
            return cudaErrorMemoryAllocation;
        }
    }
    void *m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation, false, "cudaMalloc(%zu): mmap failed", size);
    char *base = static_cast<char *>(m);
    mprotect(base, pg, PROT_NONE);
    mprotect(base + pg + body, pg, PROT_NONE);
    alloc_rec r;
    r.map = base;
    r.map_len = map_len;
    r.user = base + pg + body - span;
    r.size = size;
    r.tail = span - size;
    memset(r.user - kFront, kCanary, kFront);
    memset(r.user, kPoison, size);
    memset(r.user + size, kCanary, r.tail);
    {
        std::lock_guard<std::mutex> lk(d.mu);
        d.allocs[(uintptr_t)r.user] = r;
        d.used += size;
    }
    *ptr = r.user;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    if (!ptr) return cudaSuccess;
    char after[64];
    snprintf(after, sizeof after, "cudaFree(%p)", ptr);
    if (!check_canaries(after)) return sticky();
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    auto it = d.allocs.find((uintptr_t)ptr);
    if (it == d.allocs.end()) {
        t_last = cudaErrorInvalidValue;
        t_detail = "cudaFree: pointer is not the start of a live device allocation (double free?)";
        if (verbose()) fprintf(stderr, "cuemu: %s\n", t_detail.c_str());
        return cudaErrorInvalidValue;
    }
    d.used -= it->second.size;
    munmap(it->second.map, it->second.map_len);
    d.allocs.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    *ptr = nullptr;
    void *p = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
    if (!p) return fail(cudaErrorMemoryAllocation, false, "cudaMallocHost(%zu) failed", size);
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    d.host_allocs.insert(p);
    d.pinned_size[(uintptr_t)p] = size;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    cudaError_t e = cudaMallocHost(ptr, size);
    if (e != cudaSuccess || !(flags & cudaHostAllocMapped)) return e;
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    d.mapped_host[(uintptr_t)*ptr] = size;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr)
{
    if (!ptr) return cudaSuccess;
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    d.mapped_host.erase((uintptr_t)ptr);
    d.pinned_size.erase((uintptr_t)ptr);
    if (!d.host_allocs.erase(ptr)) {
        t_last = cudaErrorInvalidValue;
        t_detail = "cudaFreeHost: pointer was not returned by cudaMallocHost";
        return cudaErrorInvalidValue;
    }
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    if (cudaError_t e = capture_conflict("cudaMemcpy")) return e;
    if (cudaError_t e = refuse_if_sticky("cudaMemcpy")) return e;
    return copy_checked(dst, src, count, kind, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return submit(stream, [=]() { return copy_checked(dst, src, count, kind, "cudaMemcpyAsync"); });
}

static cudaError_t memset_checked(void *p, int value, size_t count, const char *api)
{
    if (count == 0) return cudaSuccess;
    if (!device_range(p, count))
        return fail(cudaErrorInvalidValue, false,
                    "%s: [%p, +%zu) is not inside one device allocation", api, p, count);
    memset(p, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t count)
{
    if (cudaError_t e = capture_conflict("cudaMemset")) return e;
    if (cudaError_t e = refuse_if_sticky("cudaMemset")) return e;
    return memset_checked(p, value, count, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream)
{
    return submit(stream, [=]() { return memset_checked(p, value, count, "cudaMemsetAsync"); });
}

/* ---- streams ----------------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    CUstream_st *st = new CUstream_st;
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    d.streams.insert(st);
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    if (!d.streams.erase(s)) {
        t_last = cudaErrorInvalidResourceHandle;
        t_detail = "cudaStreamDestroy: not a live stream";
        return cudaErrorInvalidResourceHandle;
    }
    if (s->capturing) d.n_capturing--;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    bool ok;
    CUstream_st *s = resolve(stream, &ok);
    if (!ok)
        return fail(cudaErrorInvalidResourceHandle, false,
                    "cudaStreamSynchronize: not a live stream");
    if (s->capturing) {
        s->invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported, false,
                    "cudaStreamSynchronize on a capturing stream (the capture is now invalidated)");
    }
    if (s == &dev().legacy)
        if (cudaError_t e = capture_conflict("cudaStreamSynchronize(NULL)")) return e;
    if (!check_canaries("the last operation")) return sticky();
    return refuse_if_sticky("cudaStreamSynchronize");
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    bool ok;
    resolve(stream, &ok);
    if (!ok)
        return fail(cudaErrorInvalidResourceHandle, false, "cudaStreamQuery: not a live stream");
    return refuse_if_sticky("cudaStreamQuery");
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)flags;
    {
        device &d = dev();
        std::lock_guard<std::mutex> lk(d.mu);
        if (!d.events.count(event)) {
            t_last = cudaErrorInvalidResourceHandle;
            t_detail = "cudaStreamWaitEvent: not a live event";
            return cudaErrorInvalidResourceHandle;
        }
    }
    return submit(stream, []() { return cudaSuccess; }); /* everything before it has already run */
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    bool ok;
    CUstream_st *s = resolve(stream, &ok);
    device &d = dev();
    if (!ok || s == &d.legacy)
        return fail(cudaErrorStreamCaptureUnsupported, false,
                    "cudaStreamBeginCapture: needs a stream made by cudaStreamCreate");
    std::lock_guard<std::mutex> lk(d.mu);
    if (s->capturing) {
        t_last = cudaErrorIllegalState;
        t_detail = "cudaStreamBeginCapture: the stream is already capturing";
        return cudaErrorIllegalState;
    }
    s->capturing = true;
    s->invalidated = false;
    s->mode = mode;
    s->graph = new CUgraph_st;
    d.n_capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    bool ok;
    CUstream_st *s = resolve(stream, &ok);
    *graph = nullptr;
    device &d = dev();
    if (!ok || !s->capturing)
        return fail(cudaErrorIllegalState, false,
                    "cudaStreamEndCapture: the stream is not capturing");
    std::unique_lock<std::mutex> lk(d.mu);
    s->capturing = false;
    d.n_capturing--;
    CUgraph_st *g = s->graph;
    s->graph = nullptr;
    if (s->invalidated) {
        delete g;
        lk.unlock();
        return fail(cudaErrorStreamCaptureInvalidated, false,
                    "cudaStreamEndCapture: the capture was invalidated");
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    bool ok;
    CUstream_st *s = resolve(stream, &ok);
    if (!ok)
        return fail(cudaErrorInvalidResourceHandle, false,
                    "cudaStreamIsCapturing: not a live stream");
    *status = !s->capturing    ? cudaStreamCaptureStatusNone
              : s->invalidated ? cudaStreamCaptureStatusInvalidated
                               : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

/* ---- events ------------------------------------------------------------------------------ */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    CUevent_st *ev = new CUevent_st;
    ev->flags = flags;
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    d.events.insert(ev);
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    device &d = dev();
    std::lock_guard<std::mutex> lk(d.mu);
    if (!d.events.erase(e)) {
        t_last = cudaErrorInvalidResourceHandle;
        t_detail = "cudaEventDestroy: not a live event";
        return cudaErrorInvalidResourceHandle;
    }
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream)
{
    {
        device &d = dev();
        std::lock_guard<std::mutex> lk(d.mu);
        if (!d.events.count(e)) {
            t_last = cudaErrorInvalidResourceHandle;
            t_detail = "cudaEventRecord: not a live event";
            return cudaErrorInvalidResourceHandle;
        }
    }
    return submit(stream, [e]() {
        e->t = now_ms();
        e->recorded = true;
        return cudaSuccess;
    });
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return refuse_if_sticky("cudaEventSynchronize");
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return refuse_if_sticky("cudaEventQuery");
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle, false,
                    "cudaEventElapsedTime: an event was created with DisableTiming");
    if (!start->recorded || !end->recorded)
        return fail(cudaErrorInvalidResourceHandle, false,
                    "cudaEventElapsedTime: an event was never recorded");
    *ms = (float)(end->t - start->t);
    return cudaSuccess;
}

/* ---- graphs ------------------------------------------------------------------------------ */

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    if (!graph) return fail(cudaErrorInvalidValue, false, "cudaGraphInstantiate: NULL graph");
    CUgraphExec_st *x = new CUgraphExec_st;
    x->ops = graph->ops;
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    if (!exec) return fail(cudaErrorInvalidValue, false, "cudaGraphLaunch: NULL graph");
    std::vector<op_fn> ops = exec->ops;
    return submit(stream, [ops]() {
        for (const op_fn &op : ops)
            if (cudaError_t e = op()) return e;
        return cudaSuccess;
    });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return cudaSuccess;
}
