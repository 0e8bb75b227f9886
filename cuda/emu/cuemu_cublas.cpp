/*
 * cuemu_cublas.cpp: the cuBLAS subset pllm uses, on the host, for the emulated device, against
 * the toolkit's own declarations (cublas_api.h). Column-major, exactly as cuBLAS defines it:
 *     C[i + j*ldc] = alpha * sum_l op(A)[i][l] * op(B)[l][j] + beta * C[i + j*ldc]
 * with op(A)[i][l] = A[i + l*lda] (N) or A[l + i*lda] (T), and C is not read when beta == 0.
 * Inputs are F32, F16 or BF16 (A and B the same type), C is F32 or the input type, the compute
 * type is 32F: products are accumulated in float and the result rounded once to C's type.
 * Arguments are validated as cuBLAS does (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED), and the
 * exact extent each matrix touches must lie inside one device allocation.
 */
#include "cuda/emu/cuemu_internal.h"

#include <cublas_v2.h>

#include <stdarg.h>

#include <mutex>
#include <set>
#include <vector>

struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace
{

std::mutex g_mu;
std::set<cublasContext *> &handles()
{
    static std::set<cublasContext *> *h = new std::set<cublasContext *>;
    return *h;
}

bool live(cublasContext *h)
{
    std::lock_guard<std::mutex> lk(g_mu);
    return handles().count(h) != 0;
}

cublasStatus_t bad(cublasStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t bad(cublasStatus_t st, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char full[640];
    snprintf(full, sizeof full, "%s (%s)", buf, cublasGetStatusString(st));
    cuemu::rt::note(full);
    return st;
}

size_t type_size(cudaDataType t)
{
    switch (t) {
    case CUDA_R_32F:
        return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
        return 2;
    default:
        return 0;
    }
}

float load(const void *p, cudaDataType t, long long i)
{
    switch (t) {
    case CUDA_R_32F:
        return static_cast<const float *>(p)[i];
    case CUDA_R_16F:
        return __half2float(static_cast<const __half *>(p)[i]);
    case CUDA_R_16BF:
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    default:
        return 0;
    }
}

/* Every half as a float (the conversion is exact; a table is ~5x faster than converting each
 * element, and the emulated GEMMs convert every weight on every call). */
const float *half_table()
{
    static const std::vector<float> t = [] {
        std::vector<float> v(65536);
        for (unsigned i = 0; i < 65536; i++) {
            __half_raw r;
            r.x = (unsigned short)i;
            v[i] = __half2float(__half(r));
        }
        return v;
    }();
    return t.data();
}

/* dst[0..n) = the n elements at p + i0, stride 1 (a contiguous run), as float. */
void load_run(float *dst, const void *p, cudaDataType t, long long i0, int n)
{
    switch (t) {
    case CUDA_R_32F:
        memcpy(dst, static_cast<const float *>(p) + i0, sizeof(float) * (size_t)n);
        return;
    case CUDA_R_16F: {
        const float *tab = half_table();
        const uint16_t *h = static_cast<const uint16_t *>(p) + i0;
        for (int l = 0; l < n; l++) dst[l] = tab[h[l]];
        return;
    }
    case CUDA_R_16BF: {
        const uint16_t *h = static_cast<const uint16_t *>(p) + i0;
        for (int l = 0; l < n; l++) {
            const uint32_t u = (uint32_t)h[l] << 16;
            memcpy(&dst[l], &u, 4);
        }
        return;
    }
    default:
        for (int l = 0; l < n; l++) dst[l] = 0;
    }
}

void store(void *p, cudaDataType t, long long i, float v)
{
    switch (t) {
    case CUDA_R_32F:
        static_cast<float *>(p)[i] = v;
        break;
    case CUDA_R_16F:
        static_cast<__half *>(p)[i] = __float2half_rn(v);
        break;
    case CUDA_R_16BF:
        static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
        break;
    default:
        break;
    }
}

/* The bytes [lo, hi) a strided batch of column-major rows x cols matrices touches. */
bool extent_ok(const void *base, size_t esize, long long rows, long long cols, long long ld,
               long long stride, int batch)
{
    long long last = (cols - 1) * ld + rows - 1; /* last element of one matrix */
    long long b0 = 0, b1 = (long long)(batch - 1) * stride;
    long long lo = b0 < b1 ? b0 : b1, hi = (b0 > b1 ? b0 : b1) + last + 1;
    const char *p = static_cast<const char *>(base) + lo * (long long)esize;
    return cuemu::rt::device_range(p, (size_t)(hi - lo) * esize);
}

float dot(const float *a, const float *b, int k)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int l = 0;
    for (; l + 8 <= k; l += 8)
        for (int u = 0; u < 8; u++) acc[u] += a[l + u] * b[l + u];
    for (; l < k; l++) acc[l % 8] += a[l] * b[l];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, float alpha, const void *A, cudaDataType at, int lda, long long sa,
                    const void *B, cudaDataType bt, int ldb, long long sb, float beta, void *C,
                    cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
                    const char *api)
{
    if (!live(h)) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "%s: not a live cuBLAS handle", api);
    if (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: bad transa %d", api, (int)ta);
    if (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: bad transb %d", api, (int)tb);
    bool tra = ta != CUBLAS_OP_N, trb = tb != CUBLAS_OP_N; /* C == T for real types */
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: negative size m=%d n=%d k=%d batch=%d", api, m,
                   n, k, batch);
    int a_rows = tra ? k : m, b_rows = trb ? n : k;
    if (lda < (a_rows > 1 ? a_rows : 1))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: lda %d < %d (rows of A as stored)", api, lda,
                   a_rows);
    if (ldb < (b_rows > 1 ? b_rows : 1))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: ldb %d < %d (rows of B as stored)", api, ldb,
                   b_rows);
    if (ldc < (m > 1 ? m : 1))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: ldc %d < m %d", api, ldc, m);
    if (at != bt || !type_size(at) || !type_size(ct) || (ct != CUDA_R_32F && ct != at))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED,
                   "%s: type combination A=%d B=%d C=%d is not emulated", api, (int)at, (int)bt,
                   (int)ct);
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED,
                   "%s: compute type %d is not emulated (only CUBLAS_COMPUTE_32F)", api,
                   (int)compute);
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    size_t ea = type_size(at), ec = type_size(ct);
    if (k > 0 && !extent_ok(A, ea, a_rows, tra ? m : k, lda, sa, batch))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: A (%p) runs outside its device allocation",
                   api, A);
    if (k > 0 && !extent_ok(B, ea, b_rows, trb ? k : n, ldb, sb, batch))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: B (%p) runs outside its device allocation",
                   api, B);
    if (!extent_ok(C, ec, m, n, ldc, sc, batch))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "%s: C (%p) runs outside its device allocation",
                   api, C);

    cudaError_t e = cuemu::rt::submit(h->stream, [=]() {
        std::vector<float> af((size_t)m * k), bf((size_t)n * k);
        for (int bi = 0; bi < batch; bi++) {
            const char *a = static_cast<const char *>(A) + (long long)bi * sa * (long long)ea;
            const char *b = static_cast<const char *>(B) + (long long)bi * sb * (long long)ea;
            char *c = static_cast<char *>(C) + (long long)bi * sc * (long long)ec;
            for (int i = 0; i < m; i++) /* af[i][l] = op(A)[i][l] */
                if (tra)
                    load_run(&af[(size_t)i * k], a, at, (long long)i * lda, k);
                else
                    for (int l = 0; l < k; l++)
                        af[(size_t)i * k + l] = load(a, at, i + (long long)l * lda);
            for (int j = 0; j < n; j++) /* bf[j][l] = op(B)[l][j] */
                if (!trb)
                    load_run(&bf[(size_t)j * k], b, bt, (long long)j * ldb, k);
                else
                    for (int l = 0; l < k; l++)
                        bf[(size_t)j * k + l] = load(b, bt, j + (long long)l * ldb);
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    long long ci = i + (long long)j * ldc;
                    float v = alpha * dot(&af[(size_t)i * k], &bf[(size_t)j * k], k);
                    if (beta != 0.0f) v += beta * load(c, ct, ci);
                    store(c, ct, ci, v);
                }
        }
        return cudaSuccess;
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} /* namespace */

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    cublasContext *h = new cublasContext;
    std::lock_guard<std::mutex> lk(g_mu);
    handles().insert(h);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (!handles().erase(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *stream)
{
    if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* Modes that would change results (TF32 tensor ops, reduced-precision reductions) are not
     * emulated: refuse them rather than compute something else. */
    unsigned base = (unsigned)mode & 0xf;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_PEDANTIC_MATH)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "cublasSetMathMode(%d) is not emulated", (int)mode);
    if ((unsigned)mode & ~0xfu & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "cublasSetMathMode(%d) is not emulated", (int)mode);
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes)
{
    if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !cuemu::rt::device_range(workspace, bytes))
        return bad(CUBLAS_STATUS_INVALID_VALUE,
                   "cublasSetWorkspace: workspace is not device memory");
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm(handle, transa, transb, m, n, k, *static_cast<const float *>(alpha), A, Atype, lda,
                0, B, Btype, ldb, 0, *static_cast<const float *>(beta), C, Ctype, ldc, 0, 1,
                computeType, "cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm(handle, transa, transb, m, n, k, *static_cast<const float *>(alpha), A, Atype, lda,
                strideA, B, Btype, ldb, strideB, *static_cast<const float *>(beta), C, Ctype, ldc,
                strideC, batchCount, computeType, "cublasGemmStridedBatchedEx");
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc)
{
    return gemm(handle, transa, transb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb,
                0, *beta, C, CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F, "cublasSgemm");
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb,
                                         long long int strideB, const float *beta, float *C,
                                         int ldc, long long int strideC, int batchCount)
{
    return gemm(handle, transa, transb, m, n, k, *alpha, A, CUDA_R_32F, lda, strideA, B, CUDA_R_32F,
                ldb, strideB, *beta, C, CUDA_R_32F, ldc, strideC, batchCount, CUBLAS_COMPUTE_32F,
                "cublasSgemmStridedBatched");
}
