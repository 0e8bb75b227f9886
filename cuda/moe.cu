/*
 * moe.cu: the mixture-of-experts kernels (see kernels.h for the contracts): router softmax and
 * top-k, grouping of the (token, expert) rows by expert, gather, the grouped GEMM over the
 * experts' stacked weights, and the weighted sum back per token.
 *
 * The grouped rows: expert e's rows start at off[e], a multiple of PLLM_CUDA_MOE_TILE, so that
 * every tile of PLLM_CUDA_MOE_TILE rows belongs to one expert (tile_exp[tile]; -1: unused) and
 * the GEMM reads one weight matrix per tile. Every size is fixed by the token count (rows:
 * pllm_cuda_moe_rows), never by the routing, so a step's launches can be captured in a graph.
 */
#include "cuda/kernel_util.cuh"
#include "cuda/device_impl.h"
#include "cuda/kernels.h"

#include <math.h>

namespace
{

constexpr int kTile = PLLM_CUDA_MOE_TILE; /* rows of a GEMM tile (one expert) */
constexpr int kCols = 64;                 /* output columns of a GEMM tile */
constexpr int kK = 32;                    /* reduction chunk */
constexpr int kThreads = 256;

/*
 * route_kernel
 *   logits [n_tokens][ld] F32 (the router GEMM's output; columns past n_expert are not read)
 *   sel    [n_tokens][k] int32: the k largest, by decreasing logit (ties: the lower expert first)
 *   w      [n_tokens][k] F32: their softmax probabilities (float32, as the CPU: max, sum of
 *          expf(l - max), expf(l - max) / sum), divided by their sum when norm
 * Launch: one thread per token, 128 a block. Shared memory: none. Per token: reads 4 n_expert
 *   bytes, ~n_expert (k + 2) operations.
 */
__global__ void __launch_bounds__(128)
    route_kernel(int32_t *__restrict__ sel, float *__restrict__ w, const float *__restrict__ logits,
                 int ld, int n_tokens, int n_expert, int k, int norm)
{
    const int t = blockIdx.x * 128 + threadIdx.x;
    if (t >= n_tokens) return;
    const float *l = logits + (int64_t)t * ld;
    int32_t *s = sel + (int64_t)t * k;
    float *ww = w + (int64_t)t * k;
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < n_expert; e++) mx = fmaxf(mx, l[e]);
    for (int e = 0; e < n_expert; e++) sum += expf(l[e] - mx);
    int m = 0;
    for (int e = 0; e < n_expert; e++) {
        if (m == k && !(l[e] > l[s[k - 1]])) continue;
        int i = m < k ? m++ : k - 1;
        while (i > 0 && l[e] > l[s[i - 1]]) {
            s[i] = s[i - 1];
            i--;
        }
        s[i] = e;
    }
    float tot = 0.0f;
    for (int j = 0; j < k; j++) {
        ww[j] = expf(l[s[j]] - mx) / sum;
        tot += ww[j];
    }
    if (norm)
        for (int j = 0; j < k; j++) ww[j] /= tot;
}

/*
 * group_kernel
 *   sel      [n_tokens * k] the chosen experts (route_kernel)
 *   row_of   [n_tokens * k] out: the grouped row of each (token, choice)
 *   row_tok  [n_rows] out: the token of each grouped row, -1 for padding
 *   tile_exp [n_rows / kTile] out: the expert of each tile, -1 for unused tiles
 *   off      [n_expert + 1] out: expert e's rows start at off[e] (multiples of kTile)
 * Launch: one block of 256 threads (the routing is small: n_tokens * k entries). Thread i counts
 *   and then places the entries of experts i, i + 256, ...: rows of an expert in token order.
 * Shared memory: none (off is the scratch).
 */
__global__ void __launch_bounds__(kThreads)
    group_kernel(int32_t *__restrict__ row_of, int32_t *__restrict__ row_tok,
                 int32_t *__restrict__ tile_exp, int32_t *__restrict__ off,
                 const int32_t *__restrict__ sel, int n_entries, int k, int n_expert, int n_rows)
{
    for (int r = threadIdx.x; r < n_rows; r += kThreads) row_tok[r] = -1;
    for (int i = threadIdx.x; i < n_rows / kTile; i += kThreads) tile_exp[i] = -1;
    for (int e = threadIdx.x; e < n_expert; e += kThreads) {
        int n = 0;
        for (int i = 0; i < n_entries; i++) n += sel[i] == e;
        off[e + 1] = (n + kTile - 1) / kTile * kTile;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        off[0] = 0;
        for (int e = 0; e < n_expert; e++) off[e + 1] += off[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_expert; e += kThreads) {
        int r = off[e];
        for (int i = 0; i < n_entries; i++)
            if (sel[i] == e) {
                row_of[i] = r;
                row_tok[r] = i / k;
                r++;
            }
        for (int tl = off[e] / kTile; tl < off[e + 1] / kTile; tl++) tile_exp[tl] = e;
    }
}

/*
 * gather_kernel
 *   out [n_rows][dim] F32: row r = x[row_tok[r]] (converted), zeros for padding rows
 *   x   [n_tokens][dim] T
 * Launch: one block per row, 256 threads striding over it. Per row: reads and writes dim values.
 */
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(float *__restrict__ out, const T *__restrict__ x,
                  const int32_t *__restrict__ row_tok, int dim)
{
    const int r = blockIdx.x, t = row_tok[r];
    float *o = out + (int64_t)r * dim;
    for (int i = threadIdx.x; i < dim; i += kThreads)
        o[i] = t >= 0 ? pllm_cuda::to_float(x[(int64_t)t * dim + i]) : 0.0f;
}

/*
 * gemm_kernel: C[r][n] = sum_i A[r][i] W[e][n][i] for the rows r of each used tile (expert e =
 *   tile_exp[tile]); unused tiles write nothing.
 *   A [n_rows][kd] F32; W [n_expert][n][kd] T; C [n_rows][n] F32
 * Launch: grid (ceil(n / 64), n_rows / kTile), 256 threads: a tile of kTile rows x 64 columns,
 *   each thread one column and kTile / 4 rows; the reduction in chunks of 32 through shared
 *   memory (A chunk [kTile][32], W chunk [64][33]).
 * Shared memory: (kTile * 32 + 64 * 33) * 4 bytes (10.4 KiB).
 * Numerics: each output is one float32 chain over i in order (fmaf).
 */
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gemm_kernel(float *__restrict__ C, const float *__restrict__ A, const T *__restrict__ W,
                const int32_t *__restrict__ tile_exp, int n, int kd)
{
    PLLM_SHARED_2D(float, as, kTile, kK);
    PLLM_SHARED_2D(float, ws, kCols, kK + 1);
    const int e = tile_exp[blockIdx.y];
    if (e < 0) return;
    const int c0 = blockIdx.x * kCols, col = threadIdx.x % kCols, rg = threadIdx.x / kCols;
    constexpr int kRows = kTile / (kThreads / kCols);
    const int64_t r0 = (int64_t)blockIdx.y * kTile;
    const T *we = W + (int64_t)e * n * kd;
    float acc[kRows];
#pragma unroll
    for (int j = 0; j < kRows; j++) acc[j] = 0.0f;
    for (int k0 = 0; k0 < kd; k0 += kK) {
        for (int i = threadIdx.x; i < kTile * kK; i += kThreads) {
            const int rr = i / kK, kk = i % kK;
            as[rr][kk] = k0 + kk < kd ? A[(r0 + rr) * kd + k0 + kk] : 0.0f;
        }
        for (int i = threadIdx.x; i < kCols * kK; i += kThreads) {
            const int cc = i / kK, kk = i % kK;
            ws[cc][kk] = c0 + cc < n && k0 + kk < kd
                             ? pllm_cuda::to_float(we[(int64_t)(c0 + cc) * kd + k0 + kk])
                             : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < kK; kk++) {
            const float b = ws[col][kk];
#pragma unroll
            for (int j = 0; j < kRows; j++) acc[j] = fmaf(as[rg * kRows + j][kk], b, acc[j]);
        }
        __syncthreads();
    }
    if (c0 + col < n)
#pragma unroll
        for (int j = 0; j < kRows; j++) C[(r0 + rg * kRows + j) * n + c0 + col] = acc[j];
}

/*
 * combine_kernel
 *   out [n_tokens][dim] F32: out[t] = sum_j w[t][j] y[row_of[t][j]], j = 0 .. k-1 in order (the
 *       CPU's order)
 *   y   [n_rows][dim] F32 (the experts' down projections)
 *   ys  [n_tokens][dim] F32 or NULL: a shared expert's output, added times sigmoid(sg[t * sg_ld])
 * Launch: one block per token, 256 threads striding over the row.
 */
__global__ void __launch_bounds__(kThreads)
    combine_kernel(float *__restrict__ out, const float *__restrict__ y,
                   const int32_t *__restrict__ row_of, const float *__restrict__ w, int k, int dim,
                   const float *__restrict__ ys, const float *__restrict__ sg, int sg_ld)
{
    const int t = blockIdx.x;
    const float g = ys ? 1.0f / (1.0f + expf(-sg[(int64_t)t * sg_ld])) : 0.0f;
    for (int i = threadIdx.x; i < dim; i += kThreads) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            const float v = w[t * k + j] * y[(int64_t)row_of[t * k + j] * dim + i];
            acc = j == 0 ? v : acc + v;
        }
        if (ys) acc += g * ys[(int64_t)t * dim + i];
        out[(int64_t)t * dim + i] = acc;
    }
}

} /* namespace */

extern "C" int32_t pllm_cuda_moe_rows(int32_t n_tokens, int32_t k, int32_t n_expert)
{
    const int64_t r = (int64_t)n_tokens * k + (int64_t)n_expert * (kTile - 1);
    return (int32_t)((r + kTile - 1) / kTile * kTile);
}

extern "C" pllm_status pllm_cuda_moe_route(pllm_cuda_dev *dev, const pllm_cuda_moe_args *a)
{
    if (a->n_tokens < 0 || a->n_expert < 1 || a->k < 1 || a->k > a->n_expert || a->dim < 1 ||
        a->logits_ld < a->n_expert ||
        a->n_rows != pllm_cuda_moe_rows(a->n_tokens, a->k, a->n_expert))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "moe_route: bad shape n_tokens=%d n_expert=%d k=%d dim=%d n_rows=%d",
                           a->n_tokens, a->n_expert, a->k, a->dim, a->n_rows);
    if (a->n_tokens == 0) return PLLM_OK;
    cudaStream_t s = pllm_cuda_dev_stream(dev);
    PLLM_LAUNCH(route_kernel, dim3((unsigned)((a->n_tokens + 127) / 128)), dim3(128), 0, s)
    (a->sel, a->w, a->logits, a->logits_ld, a->n_tokens, a->n_expert, a->k, a->norm ? 1 : 0);
    PLLM_TRY(PLLM_CUDA_LAUNCHED("route_kernel"));
    PLLM_LAUNCH(group_kernel, dim3(1), dim3(kThreads), 0, s)
    (a->row_of, a->row_tok, a->tile_exp, a->off, a->sel, a->n_tokens * a->k, a->k, a->n_expert,
     a->n_rows);
    PLLM_TRY(PLLM_CUDA_LAUNCHED("group_kernel"));
    switch (a->x_dtype) {
    case PLLM_DTYPE_F32:
        PLLM_LAUNCH((gather_kernel<float>), dim3((unsigned)a->n_rows), dim3(kThreads), 0, s)
        (a->xg, static_cast<const float *>(a->x), a->row_tok, a->dim);
        break;
    case PLLM_DTYPE_F16:
        PLLM_LAUNCH((gather_kernel<__half>), dim3((unsigned)a->n_rows), dim3(kThreads), 0, s)
        (a->xg, static_cast<const __half *>(a->x), a->row_tok, a->dim);
        break;
    case PLLM_DTYPE_BF16:
        PLLM_LAUNCH((gather_kernel<__nv_bfloat16>), dim3((unsigned)a->n_rows), dim3(kThreads), 0, s)
        (a->xg, static_cast<const __nv_bfloat16 *>(a->x), a->row_tok, a->dim);
        break;
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "moe_route: input type %s (F32, F16 or BF16)",
                           pllm_dtype_name(a->x_dtype));
    }
    return PLLM_CUDA_LAUNCHED("gather_kernel");
}

extern "C" pllm_status pllm_cuda_moe_gemm(pllm_cuda_dev *dev, float *c, const float *a,
                                          const void *w, pllm_dtype w_dtype,
                                          const int32_t *tile_exp, int32_t n_rows, int32_t n,
                                          int32_t kd)
{
    if (n_rows < 0 || n_rows % kTile || n_rows / kTile > 65535 || n < 1 || kd < 1) /* grid.y */
        return pllm_errorf(PLLM_ERR_INVALID, "moe_gemm: bad shape n_rows=%d n=%d k=%d", n_rows, n,
                           kd);
    if (n_rows == 0) return PLLM_OK;
    const dim3 grid((unsigned)((n + kCols - 1) / kCols), (unsigned)(n_rows / kTile));
    cudaStream_t s = pllm_cuda_dev_stream(dev);
    switch (w_dtype) {
    case PLLM_DTYPE_F32:
        PLLM_LAUNCH((gemm_kernel<float>), grid, dim3(kThreads), 0, s)
        (c, a, static_cast<const float *>(w), tile_exp, n, kd);
        break;
    case PLLM_DTYPE_F16:
        PLLM_LAUNCH((gemm_kernel<__half>), grid, dim3(kThreads), 0, s)
        (c, a, static_cast<const __half *>(w), tile_exp, n, kd);
        break;
    case PLLM_DTYPE_BF16:
        PLLM_LAUNCH((gemm_kernel<__nv_bfloat16>), grid, dim3(kThreads), 0, s)
        (c, a, static_cast<const __nv_bfloat16 *>(w), tile_exp, n, kd);
        break;
    default:
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "moe_gemm: weight type %s (F32, F16 or BF16)",
                           pllm_dtype_name(w_dtype));
    }
    return PLLM_CUDA_LAUNCHED("gemm_kernel");
}

extern "C" pllm_status pllm_cuda_moe_combine(pllm_cuda_dev *dev, float *out, const float *y,
                                             const int32_t *row_of, const float *w,
                                             int32_t n_tokens, int32_t k, int32_t dim,
                                             const float *ys, const float *sg, int32_t sg_ld)
{
    if (n_tokens < 0 || k < 1 || dim < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "moe_combine: bad shape n_tokens=%d k=%d dim=%d",
                           n_tokens, k, dim);
    if (n_tokens == 0) return PLLM_OK;
    PLLM_LAUNCH(combine_kernel, dim3((unsigned)n_tokens), dim3(kThreads), 0,
                pllm_cuda_dev_stream(dev))
    (out, y, row_of, w, k, dim, ys, sg, sg_ld);
    return PLLM_CUDA_LAUNCHED("combine_kernel");
}
