/*
 * device.cpp: device.h on the CUDA runtime and cuBLAS. The same source serves the real build
 * (linked with the static libcudart; libcublas loaded when a context is created) and the
 * emulated one (linked with cuda/emu/).
 *
 * Why cuBLAS is loaded with dlopen rather than linked: libcublas (with the libcublasLt it
 * needs) runs its initialisers when the process starts, whether or not a GPU is used: 0.2 s
 * and 215 MB of resident memory before main() on the test machine. Linked, every pllm command
 * (--device cpu, tokenize, info, --help) would pay that, and a signal sent while it ran would
 * kill the process before pllm's handlers are installed. Loaded by pllm_cuda_dev_init, only a
 * run on a GPU pays it. The few entry points used are looked up into the context (no global
 * state); the emulated build points them at the emulator's functions.
 */
#include "cuda/device_impl.h"

#include <cublas_v2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PLLM_CUDA_EMU
#include "cuda/emu/cuemu.h"
#else
#include <dlfcn.h>
#endif

/* The cuBLAS entry points the device API uses (the GEMM spelled out: C++ sees an overload). */
typedef cublasStatus_t (*gemm_strided_batched_ex_fn)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
    cudaDataType, int, long long int, const void *, cudaDataType, int, long long int, const void *,
    void *, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
struct blas_api {
    void *lib; /* the dlopen handle (real build) */
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    gemm_strided_batched_ex_fn gemm_strided_batched_ex;
    decltype(&cublasGetStatusString) status_string;
};

struct pllm_cuda_dev {
    int ordinal;
    cudaStream_t stream;
    blas_api api;
    cublasHandle_t blas;
    void *blas_ws; /* cuBLAS workspace: set explicitly so GEMMs can be captured into graphs */
};

#define PLLM_STR_(x) #x
#define PLLM_STR(x)  PLLM_STR_(x)

/* Fill api: the emulator's functions, or libcublas.so.<major of the headers> found by the
 * dynamic loader's search (LD_LIBRARY_PATH, ld.so.cache), else in the directory of the toolkit
 * the build used (PLLM_CUBLAS_DIR). */
static pllm_status blas_load(blas_api *api)
{
    memset(api, 0, sizeof *api);
#ifdef PLLM_CUDA_EMU
    api->create = cublasCreate_v2;
    api->destroy = cublasDestroy_v2;
    api->set_stream = cublasSetStream_v2;
    api->set_workspace = cublasSetWorkspace_v2;
    api->gemm_strided_batched_ex = cublasGemmStridedBatchedEx;
    api->status_string = cublasGetStatusString;
    return PLLM_OK;
#else
    const char *name = "libcublas.so." PLLM_STR(CUBLAS_VER_MAJOR);
    api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    char first[512];
    snprintf(first, sizeof first, "%s", api->lib ? "" : dlerror());
#ifdef PLLM_CUBLAS_DIR
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", PLLM_CUBLAS_DIR, name);
    if (!api->lib) api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!api->lib)
        return pllm_errorf(PLLM_ERR_NOT_FOUND,
                           "cannot load cuBLAS (%s): %s; install the CUDA %d toolkit's cuBLAS or "
                           "add its directory to LD_LIBRARY_PATH",
                           name, first, CUBLAS_VER_MAJOR);
    struct {
        void **dst;
        const char *sym;
    } syms[] = {
        {(void **)&api->create, "cublasCreate_v2"},
        {(void **)&api->destroy, "cublasDestroy_v2"},
        {(void **)&api->set_stream, "cublasSetStream_v2"},
        {(void **)&api->set_workspace, "cublasSetWorkspace_v2"},
        {(void **)&api->gemm_strided_batched_ex, "cublasGemmStridedBatchedEx"},
        {(void **)&api->status_string, "cublasGetStatusString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].dst = dlsym(api->lib, syms[i].sym);
        if (!*syms[i].dst) {
            pllm_status st =
                pllm_errorf(PLLM_ERR_NOT_FOUND, "%s has no %s: %s", name, syms[i].sym, dlerror());
            dlclose(api->lib);
            memset(api, 0, sizeof *api);
            return st;
        }
    }
    return PLLM_OK;
#endif
}

static void blas_unload(blas_api *api)
{
#ifndef PLLM_CUDA_EMU
    if (api->lib) dlclose(api->lib);
#endif
    memset(api, 0, sizeof *api);
}

struct pllm_cuda_event {
    cudaEvent_t ev;
};

/* cuBLAS workspace (NVIDIA recommends 32 MiB on Hopper for graph capture). */
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

struct pllm_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static pllm_status status_of(cudaError_t e)
{
    switch (e) {
    case cudaErrorMemoryAllocation:
        return PLLM_ERR_NOMEM;
    case cudaErrorInvalidValue:
        return PLLM_ERR_INVALID;
    default:
        return PLLM_ERR_INTERNAL;
    }
}

/* The emulator's diagnostic of the last failure ("" on a real device). */
static const char *detail(void)
{
#ifdef PLLM_CUDA_EMU
    return pllm_cuemu_error_detail();
#else
    return "";
#endif
}

/* Report a failed runtime call, and consume it as the thread's last error so that a later
 * launch check does not report it again. */
static pllm_status cuda_fail(cudaError_t e, const char *call, const char *file, int line)
{
    const char *d = detail();
    pllm_status st = pllm_errorf(status_of(e), "%s:%d: %s: %s (%s)%s%s", file, line, call,
                                 cudaGetErrorName(e), cudaGetErrorString(e), d[0] ? ": " : "", d);
    (void)cudaGetLastError();
    return st;
}

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cuda_fail(e_, #call, __FILE__, __LINE__);                    \
    } while (0)

static pllm_status cublas_fail(const blas_api *api, cublasStatus_t s, const char *call,
                               const char *file, int line)
{
    const char *d = detail();
    pllm_status st = pllm_errorf(
        s == CUBLAS_STATUS_INVALID_VALUE ? PLLM_ERR_INVALID : PLLM_ERR_INTERNAL,
        "%s:%d: %s: %s%s%s", file, line, call, api->status_string(s), d[0] ? ": " : "", d);
    (void)cudaGetLastError();
    return st;
}

int pllm_cuda_dev_count(char *why, size_t n_why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
        if (why) {
            if (e == cudaErrorNoDevice)
                snprintf(why, n_why, "no CUDA device (%s)", cudaGetErrorString(e));
            else if (e == cudaErrorInsufficientDriver)
                snprintf(why, n_why,
                         "no usable CUDA driver: no NVIDIA driver is installed, or it is older "
                         "than this CUDA %d.%d runtime needs (%s)",
                         CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorName(e));
            else
                snprintf(why, n_why, "the CUDA runtime cannot start (%s: %s)", cudaGetErrorName(e),
                         cudaGetErrorString(e));
        }
        return 0;
    }
    if (why) {
#ifdef PLLM_CUDA_EMU
        snprintf(why, n_why, "%d emulated device%s (cuemu, no GPU)", n, n == 1 ? "" : "s");
#else
        snprintf(why, n_why, "%d CUDA device%s", n, n == 1 ? "" : "s");
#endif
    }
    return n;
}

pllm_status pllm_cuda_dev_init(pllm_cuda_dev **out, int ordinal)
{
    *out = NULL;
    char why[256];
    int n = pllm_cuda_dev_count(why, sizeof why);
    if (ordinal < 0 || ordinal >= n)
        return pllm_errorf(PLLM_ERR_NOT_FOUND, "CUDA device %d: %s", ordinal, why);
    pllm_cuda_dev *d = (pllm_cuda_dev *)pllm_calloc(1, sizeof *d);
    if (!d) return PLLM_ERR_NOMEM;
    d->ordinal = ordinal;
    pllm_status st = PLLM_OK;
    cudaError_t e;
    cublasStatus_t bs;
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess) {
        st = cuda_fail(e, "cudaSetDevice", __FILE__, __LINE__);
        goto fail;
    }
    if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = cuda_fail(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
        goto fail;
    }
    if ((st = blas_load(&d->api)) != PLLM_OK) goto fail;
    if ((bs = d->api.create(&d->blas)) != CUBLAS_STATUS_SUCCESS ||
        (bs = d->api.set_stream(d->blas, d->stream)) != CUBLAS_STATUS_SUCCESS) {
        st = cublas_fail(&d->api, bs, "cublasCreate/cublasSetStream", __FILE__, __LINE__);
        goto fail;
    }
    if ((e = cudaMalloc(&d->blas_ws, BLAS_WORKSPACE_BYTES)) != cudaSuccess) {
        st = cuda_fail(e, "cudaMalloc(cuBLAS workspace)", __FILE__, __LINE__);
        goto fail;
    }
    if ((bs = d->api.set_workspace(d->blas, d->blas_ws, BLAS_WORKSPACE_BYTES)) !=
        CUBLAS_STATUS_SUCCESS) {
        st = cublas_fail(&d->api, bs, "cublasSetWorkspace", __FILE__, __LINE__);
        goto fail;
    }
    *out = d;
    return PLLM_OK;
fail:
    pllm_cuda_dev_free(d);
    return st;
}

void pllm_cuda_dev_free(pllm_cuda_dev *dev)
{
    if (!dev) return;
    if (dev->blas) dev->api.destroy(dev->blas);
    if (dev->stream) {
        cudaStreamSynchronize(dev->stream);
        cudaStreamDestroy(dev->stream);
    }
    if (dev->blas_ws) cudaFree(dev->blas_ws);
    blas_unload(&dev->api);
    free(dev);
}

pllm_status pllm_cuda_dev_info_get(pllm_cuda_dev *dev, pllm_cuda_dev_info *info)
{
    cudaDeviceProp p;
    CUDA_TRY(cudaGetDeviceProperties(&p, dev->ordinal));
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->ordinal = dev->ordinal;
    info->sm_major = p.major;
    info->sm_minor = p.minor;
    info->n_sm = p.multiProcessorCount;
    info->smem_per_block_optin = p.sharedMemPerBlockOptin;
    /* clocks and bus width are attributes since CUDA 12 (no longer in cudaDeviceProp) */
    info->mem_bus_bits = p.memoryBusWidth;
    if (cudaDeviceGetAttribute(&info->mem_clock_khz, cudaDevAttrMemoryClockRate, dev->ordinal) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&info->sm_clock_khz, cudaDevAttrClockRate, dev->ordinal) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        info->mem_clock_khz = info->sm_clock_khz = 0;
    }
    CUDA_TRY(cudaMemGetInfo(&info->free_bytes, &info->total_bytes));
#ifdef PLLM_CUDA_EMU
    info->emulated = true;
#endif
    return PLLM_OK;
}

pllm_status pllm_cuda_alloc(pllm_cuda_dev *dev, void **out, size_t bytes)
{
    (void)dev;
    *out = NULL;
    if (bytes == 0) return PLLM_OK;
    CUDA_TRY(cudaMalloc(out, bytes));
    return PLLM_OK;
}

void pllm_cuda_free(pllm_cuda_dev *dev, void *p)
{
    (void)dev;
    if (p) cudaFree(p);
}

pllm_status pllm_cuda_host_alloc(pllm_cuda_dev *dev, void **out, size_t bytes)
{
    (void)dev;
    *out = NULL;
    CUDA_TRY(cudaMallocHost(out, bytes ? bytes : 1));
    return PLLM_OK;
}

void pllm_cuda_host_free(pllm_cuda_dev *dev, void *p)
{
    (void)dev;
    if (p) cudaFreeHost(p);
}

pllm_status pllm_cuda_upload(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->stream));
    return PLLM_OK;
}

pllm_status pllm_cuda_download(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->stream));
    return PLLM_OK;
}

pllm_status pllm_cuda_copy(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dev->stream));
    return PLLM_OK;
}

pllm_status pllm_cuda_memset(pllm_cuda_dev *dev, void *dst, int value, size_t bytes)
{
    CUDA_TRY(cudaMemsetAsync(dst, value, bytes, dev->stream));
    return PLLM_OK;
}

pllm_status pllm_cuda_sync(pllm_cuda_dev *dev)
{
    CUDA_TRY(cudaStreamSynchronize(dev->stream));
    return PLLM_OK;
}

static bool blas_type(pllm_dtype t, cudaDataType *out)
{
    switch (t) {
    case PLLM_DTYPE_F32:
        *out = CUDA_R_32F;
        return true;
    case PLLM_DTYPE_F16:
        *out = CUDA_R_16F;
        return true;
    case PLLM_DTYPE_BF16:
        *out = CUDA_R_16BF;
        return true;
    default:
        return false;
    }
}

pllm_status pllm_cuda_gemm(pllm_cuda_dev *dev, const pllm_cuda_gemm_args *g)
{
    cudaDataType at, bt, ct;
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "gemm: bad sizes m=%d n=%d k=%d batch=%d", g->m, g->n,
                           g->k, g->batch);
    if (!blas_type(g->a_dtype, &at) || g->b_dtype != g->a_dtype || !blas_type(g->c_dtype, &ct) ||
        (g->c_dtype != PLLM_DTYPE_F32 && g->c_dtype != g->a_dtype))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "gemm: types a=%s b=%s c=%s (need a == b in F32/F16/BF16, c F32 or a's)",
                           pllm_dtype_name(g->a_dtype), pllm_dtype_name(g->b_dtype),
                           pllm_dtype_name(g->c_dtype));
    bt = at;
    int64_t need_a = g->trans_a ? g->m : g->k, need_b = g->trans_b ? g->k : g->n;
    if (g->lda < need_a || g->lda < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "gemm: lda %lld < %lld", (long long)g->lda,
                           (long long)need_a);
    if (g->ldb < need_b || g->ldb < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "gemm: ldb %lld < %lld", (long long)g->ldb,
                           (long long)need_b);
    if (g->ldc < g->n || g->ldc < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "gemm: ldc %lld < n %d", (long long)g->ldc, g->n);
    if (g->lda > INT_MAX || g->ldb > INT_MAX || g->ldc > INT_MAX)
        return pllm_errorf(PLLM_ERR_RANGE, "gemm: a leading dimension exceeds INT_MAX");
    if (g->m == 0 || g->n == 0) return PLLM_OK;
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: hand cuBLAS B first. A
     * row-major B[k][ldb] read column-major is B^T, i.e. op(B)^T when trans_b is false. */
    cublasStatus_t s = dev->api.gemm_strided_batched_ex(
        dev->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        g->n, g->m, g->k, &g->alpha, g->b, bt, (int)g->ldb, g->stride_b, g->a, at, (int)g->lda,
        g->stride_a, &g->beta, g->c, ct, (int)g->ldc, g->stride_c, g->batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return cublas_fail(&dev->api, s, "cublasGemmStridedBatchedEx", __FILE__, __LINE__);
    return PLLM_OK;
}

pllm_status pllm_cuda_event_create(pllm_cuda_dev *dev, pllm_cuda_event **out)
{
    (void)dev;
    *out = NULL;
    pllm_cuda_event *e = (pllm_cuda_event *)pllm_calloc(1, sizeof *e);
    if (!e) return PLLM_ERR_NOMEM;
    cudaError_t err = cudaEventCreate(&e->ev);
    if (err != cudaSuccess) {
        free(e);
        return cuda_fail(err, "cudaEventCreate", __FILE__, __LINE__);
    }
    *out = e;
    return PLLM_OK;
}

void pllm_cuda_event_free(pllm_cuda_event *e)
{
    if (!e) return;
    cudaEventDestroy(e->ev);
    free(e);
}

pllm_status pllm_cuda_event_record(pllm_cuda_dev *dev, pllm_cuda_event *e)
{
    CUDA_TRY(cudaEventRecord(e->ev, dev->stream));
    return PLLM_OK;
}

pllm_status pllm_cuda_event_sync(pllm_cuda_event *e)
{
    CUDA_TRY(cudaEventSynchronize(e->ev));
    return PLLM_OK;
}

pllm_status pllm_cuda_event_elapsed(pllm_cuda_event *start, pllm_cuda_event *end, float *ms)
{
    CUDA_TRY(cudaEventElapsedTime(ms, start->ev, end->ev));
    return PLLM_OK;
}

pllm_status pllm_cuda_graph_begin(pllm_cuda_dev *dev)
{
    CUDA_TRY(cudaStreamBeginCapture(dev->stream, cudaStreamCaptureModeThreadLocal));
    return PLLM_OK;
}

pllm_status pllm_cuda_graph_end(pllm_cuda_dev *dev, pllm_cuda_graph **out)
{
    *out = NULL;
    pllm_cuda_graph *g = (pllm_cuda_graph *)pllm_calloc(1, sizeof *g);
    if (!g) {
        cudaGraph_t tmp;
        if (cudaStreamEndCapture(dev->stream, &tmp) == cudaSuccess) cudaGraphDestroy(tmp);
        return PLLM_ERR_NOMEM;
    }
    cudaError_t e = cudaStreamEndCapture(dev->stream, &g->graph);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&g->exec, g->graph, 0);
    if (e != cudaSuccess) {
        pllm_cuda_graph_free(g);
        return cuda_fail(e, "cudaStreamEndCapture/cudaGraphInstantiate", __FILE__, __LINE__);
    }
    *out = g;
    return PLLM_OK;
}

pllm_status pllm_cuda_graph_launch(pllm_cuda_dev *dev, pllm_cuda_graph *g)
{
    CUDA_TRY(cudaGraphLaunch(g->exec, dev->stream));
    return PLLM_OK;
}

void pllm_cuda_graph_free(pllm_cuda_graph *g)
{
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}

cudaStream_t pllm_cuda_dev_stream(pllm_cuda_dev *dev)
{
    return dev->stream;
}

pllm_status pllm_cuda_check_launch(const char *kernel, const char *file, int line)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return PLLM_OK;
    return cuda_fail(e, kernel, file, line);
}
