/*
 * cuemu_device: the device API (cuda/device.h) through the emulated runtime and cuBLAS: GEMM
 * against a double-precision CPU reference for every type combination, transpose flag, odd
 * sizes, leading dimensions larger than the rows, strided batches (including a broadcast
 * operand) and beta != 0; copies and memset; graph capture and replay with new inputs; argument
 * validation. This checks device.cpp's row-major -> column-major cuBLAS mapping, which the real
 * build shares. Prints the max abs/rel error of each GEMM case.
 *
 * Built twice: against the emulator (cuemu_device) and against the real CUDA build
 * (cuemu_device_gpu: skips when no GPU answers, else checks the real cuBLAS the same way; the
 * checks that rely on the emulator refusing out-of-bounds work are left out there).
 */
#include "cuda/kernels.h"
#ifdef PLLM_CUDA_EMU
#include "cuda/emu/cuemu.h"
#endif
#include "tests/testutil.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void put(void *p, pllm_dtype t, size_t i, float v)
{
    if (t == PLLM_DTYPE_F16)
        ((uint16_t *)p)[i] = pllm_fp32_to_fp16(v);
    else if (t == PLLM_DTYPE_BF16)
        ((uint16_t *)p)[i] = pllm_fp32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

static float get(const void *p, pllm_dtype t, size_t i)
{
    if (t == PLLM_DTYPE_F16) return pllm_fp16_to_fp32(((const uint16_t *)p)[i]);
    if (t == PLLM_DTYPE_BF16) return pllm_bf16_to_fp32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

typedef struct gemm_case {
    int m, n, k, batch;
    bool ta, tb;
    pllm_dtype in, out;
    int pad;          /* extra leading-dimension elements */
    bool broadcast_b; /* stride_b = 0 */
    float beta;
} gemm_case;

static void test_gemm(pllm_cuda_dev *dev, uint64_t *rng, const gemm_case *c)
{
    int64_t lda = (c->ta ? c->m : c->k) + c->pad, ldb = (c->tb ? c->k : c->n) + c->pad,
            ldc = c->n + c->pad;
    int64_t a_rows = c->ta ? c->k : c->m, b_rows = c->tb ? c->n : c->k;
    int64_t sa = a_rows * lda, sb = c->broadcast_b ? 0 : b_rows * ldb, sc = (int64_t)c->m * ldc;
    size_t na = (size_t)(sa * c->batch),
           nb = (size_t)(c->broadcast_b ? b_rows * ldb : sb * c->batch),
           nc = (size_t)(sc * c->batch);
    size_t ei = pllm_dtype_block_bytes(c->in), eo = pllm_dtype_block_bytes(c->out);
    void *a = malloc(na * ei), *b = malloc(nb * ei), *cc = malloc(nc * eo), *res = malloc(nc * eo);
    float *ref = malloc(nc * 4), *got = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) put(a, c->in, i, pllm_test_randf(rng));
    for (size_t i = 0; i < nb; i++) put(b, c->in, i, pllm_test_randf(rng));
    for (size_t i = 0; i < nc; i++) put(cc, c->out, i, pllm_test_randf(rng));
    float alpha = 0.75f;
    for (int bi = 0; bi < c->batch; bi++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++) {
                double acc = 0;
                for (int l = 0; l < c->k; l++) {
                    size_t ai =
                        (size_t)(bi * sa + (c->ta ? (int64_t)l * lda + i : (int64_t)i * lda + l));
                    size_t bj =
                        (size_t)(bi * sb + (c->tb ? (int64_t)j * ldb + l : (int64_t)l * ldb + j));
                    acc += (double)get(a, c->in, ai) * get(b, c->in, bj);
                }
                size_t ci = (size_t)(bi * sc + (int64_t)i * ldc + j);
                ref[ci] = (float)(alpha * acc +
                                  (c->beta != 0 ? c->beta * (double)get(cc, c->out, ci) : 0));
            }
    void *da = NULL, *db = NULL, *dc = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &da, na * ei));
    CHECK_OK(pllm_cuda_alloc(dev, &db, nb * ei));
    CHECK_OK(pllm_cuda_alloc(dev, &dc, nc * eo));
    CHECK_OK(pllm_cuda_upload(dev, da, a, na * ei));
    CHECK_OK(pllm_cuda_upload(dev, db, b, nb * ei));
    if (c->beta != 0)
        CHECK_OK(pllm_cuda_upload(dev, dc, cc, nc * eo));
    else
        CHECK_OK(pllm_cuda_memset(dev, dc, 0xff, nc * eo)); /* NaN: C must not be read */
    pllm_cuda_gemm_args g = {
        .m = c->m,
        .n = c->n,
        .k = c->k,
        .batch = c->batch,
        .a = da,
        .a_dtype = c->in,
        .lda = lda,
        .stride_a = sa,
        .trans_a = c->ta,
        .b = db,
        .b_dtype = c->in,
        .ldb = ldb,
        .stride_b = sb,
        .trans_b = c->tb,
        .c = dc,
        .c_dtype = c->out,
        .ldc = ldc,
        .stride_c = sc,
        .alpha = alpha,
        .beta = c->beta,
    };
    CHECK_OK(pllm_cuda_gemm(dev, &g));
    CHECK_OK(pllm_cuda_download(dev, res, dc, nc * eo));
    CHECK_OK(pllm_cuda_sync(dev));
    /* compare only the m x n part of each matrix (the padding is not written... unless beta) */
    size_t n_cmp = 0;
    for (int bi = 0; bi < c->batch; bi++)
        for (int i = 0; i < c->m; i++)
            for (int j = 0; j < c->n; j++) {
                size_t ci = (size_t)(bi * sc + (int64_t)i * ldc + j);
                got[n_cmp] = get(res, c->out, ci);
                ref[n_cmp++] = ref[ci];
            }
    double max_abs, rel = pllm_test_rel_err(got, ref, n_cmp, &max_abs);
    double tol = c->out == PLLM_DTYPE_F32 ? (c->in == PLLM_DTYPE_F32 ? 1e-5 : 1e-5) : 1e-2;
    fprintf(stderr,
            "  gemm %3dx%3dx%3d batch %d %c%c in=%-4s out=%-4s pad %d%s beta %.1f: max abs err "
            "%.3g, rel %.3g\n",
            c->m, c->n, c->k, c->batch, c->ta ? 'T' : 'N', c->tb ? 'T' : 'N',
            pllm_dtype_name(c->in), pllm_dtype_name(c->out), c->pad,
            c->broadcast_b ? " bcastB" : "", (double)c->beta, max_abs, rel);
    CHECK(rel <= tol);
    pllm_cuda_free(dev, da), pllm_cuda_free(dev, db), pllm_cuda_free(dev, dc);
    free(a), free(b), free(cc), free(res), free(ref), free(got);
}

static void test_copies_and_graph(pllm_cuda_dev *dev, uint64_t *rng)
{
    const int rows = 5, dim = 200;
    size_t n = (size_t)rows * dim;
    float *h_res = malloc(n * 4), *h_x = malloc(n * 4), *h_w = malloc(dim * 4),
          *h_out = malloc(n * 4), *h_copy = malloc(n * 4);
    void *res = NULL, *res0 = NULL, *x = NULL, *w = NULL, *out = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &res, n * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &res0, n * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &x, n * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &w, dim * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &out, n * 4));
    for (int i = 0; i < dim; i++) h_w[i] = 1.0f;
    CHECK_OK(pllm_cuda_upload(dev, w, h_w, dim * 4));

    /* d2d copy and memset */
    for (size_t i = 0; i < n; i++) h_res[i] = pllm_test_randf(rng);
    CHECK_OK(pllm_cuda_upload(dev, res0, h_res, n * 4));
    CHECK_OK(pllm_cuda_copy(dev, res, res0, n * 4));
    CHECK_OK(pllm_cuda_download(dev, h_copy, res, n * 4));
    CHECK_OK(pllm_cuda_sync(dev));
    CHECK(memcmp(h_copy, h_res, n * 4) == 0);
    CHECK_OK(pllm_cuda_memset(dev, res, 0, n * 4));
    CHECK_OK(pllm_cuda_download(dev, h_copy, res, n * 4));
    CHECK_OK(pllm_cuda_sync(dev));
    CHECK(h_copy[0] == 0.0f && h_copy[n - 1] == 0.0f);

    /* a captured step (upload x, reset the residual, fused norm, download) replayed twice */
    pllm_cuda_graph *g = NULL;
    CHECK_OK(pllm_cuda_graph_begin(dev));
    CHECK_OK(pllm_cuda_upload(dev, x, h_x, n * 4));
    CHECK_OK(pllm_cuda_copy(dev, res, res0, n * 4));
    CHECK_OK(pllm_cuda_rmsnorm_residual(dev, out, PLLM_DTYPE_F32, res, x, w, rows, dim, 1e-6f));
    CHECK_OK(pllm_cuda_download(dev, h_out, out, n * 4));
    CHECK(pllm_cuda_sync(dev) != PLLM_OK); /* not inside a capture */
    fprintf(stderr, "  sync inside a capture: %s\n", pllm_errmsg());
    CHECK(pllm_cuda_graph_end(dev, &g) != PLLM_OK); /* ... which invalidated it */
    pllm_cuda_graph_free(g);

    CHECK_OK(pllm_cuda_graph_begin(dev));
    CHECK_OK(pllm_cuda_upload(dev, x, h_x, n * 4));
    CHECK_OK(pllm_cuda_copy(dev, res, res0, n * 4));
    CHECK_OK(pllm_cuda_rmsnorm_residual(dev, out, PLLM_DTYPE_F32, res, x, w, rows, dim, 1e-6f));
    CHECK_OK(pllm_cuda_download(dev, h_out, out, n * 4));
    CHECK_OK(pllm_cuda_graph_end(dev, &g));
    for (int rep = 0; rep < 2 && g; rep++) {
        for (size_t i = 0; i < n; i++) h_x[i] = pllm_test_randf(rng);
        memset(h_out, 0, n * 4);
        CHECK_OK(pllm_cuda_graph_launch(dev, g));
        CHECK_OK(pllm_cuda_sync(dev));
        double worst = 0;
        for (int r = 0; r < rows; r++) {
            double ss = 0;
            for (int i = 0; i < dim; i++) {
                double v = (double)(h_res[r * dim + i] + h_x[r * dim + i]);
                ss += v * v;
            }
            double inv = 1.0 / sqrt(ss / dim + 1e-6);
            for (int i = 0; i < dim; i++) {
                double want = (double)(h_res[r * dim + i] + h_x[r * dim + i]) * inv;
                double e = fabs(h_out[r * dim + i] - want);
                worst = e > worst ? e : worst;
            }
        }
        fprintf(stderr, "  graph replay %d: max abs err %.3g\n", rep, worst);
        CHECK(worst < 1e-5);
    }
    pllm_cuda_graph_free(g);
    pllm_cuda_free(dev, res), pllm_cuda_free(dev, res0), pllm_cuda_free(dev, x),
        pllm_cuda_free(dev, w), pllm_cuda_free(dev, out);
    free(h_res), free(h_x), free(h_w), free(h_out), free(h_copy);
}

static void test_validation(pllm_cuda_dev *dev)
{
#ifdef PLLM_CUDA_EMU
    pllm_cuemu_set_verbose(0);
#endif
    void *a = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &a, 64 * 4));
    pllm_cuda_gemm_args g = {.m = 4,
                             .n = 4,
                             .k = 4,
                             .batch = 1,
                             .a = a,
                             .a_dtype = PLLM_DTYPE_F32,
                             .lda = 4,
                             .b = a,
                             .b_dtype = PLLM_DTYPE_F32,
                             .ldb = 4,
                             .c = a,
                             .c_dtype = PLLM_DTYPE_F32,
                             .ldc = 4,
                             .alpha = 1.0f};
    g.lda = 3;
    CHECK(pllm_cuda_gemm(dev, &g) == PLLM_ERR_INVALID);
    g.lda = 4;
    g.b_dtype = PLLM_DTYPE_F16;
    CHECK(pllm_cuda_gemm(dev, &g) == PLLM_ERR_UNSUPPORTED);
    g.b_dtype = PLLM_DTYPE_F32;
    CHECK(pllm_cuda_rmsnorm_residual(dev, a, PLLM_DTYPE_Q8_0, a, NULL, a, 1, 4, 1e-5f) ==
          PLLM_ERR_UNSUPPORTED);
#ifdef PLLM_CUDA_EMU
    /* work past the end of a buffer: refused by the emulator (a GPU would corrupt memory) */
    g.m = 20;
    CHECK(pllm_cuda_gemm(dev, &g) != PLLM_OK);
    fprintf(stderr, "  gemm outside its buffer: %s\n", pllm_errmsg());
    float h[8] = {0};
    CHECK(pllm_cuda_upload(dev, (float *)a + 60, h, 8 * 4) != PLLM_OK);
    fprintf(stderr, "  upload past the end: %s\n", pllm_errmsg());
    pllm_cuemu_set_verbose(1);
#endif
    pllm_cuda_free(dev, a);
}

int main(void)
{
    uint64_t seed = strtoull(pllm_test_env("PLLM_TEST_SEED", "0"), NULL, 10);
    if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "cuemu_device: seed %llu (PLLM_TEST_SEED to repeat)\n",
            (unsigned long long)seed);
    uint64_t rng = seed;
    if (pllm_cuda_dev_count(NULL, 0) == 0)
        pllm_test_skip("no CUDA device answers (the emulated build runs these checks)");
    pllm_cuda_dev *dev = NULL;
    CHECK_OK(pllm_cuda_dev_init(&dev, 0));
    if (!dev) return pllm_test_finish("cuemu_device");
    pllm_cuda_dev_info info;
    CHECK_OK(pllm_cuda_dev_info_get(dev, &info));
    fprintf(stderr, "  device: %s, sm_%d%d, %zu MiB, emulated %d\n", info.name, info.sm_major,
            info.sm_minor, info.total_bytes >> 20, info.emulated);
#ifdef PLLM_CUDA_EMU
    CHECK(info.emulated);
    CHECK(pllm_cuda_dev_count(NULL, 0) == 1);
#else
    CHECK(!info.emulated);
#endif

    static const pllm_dtype ins[] = {PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16};
    int k = 0;
    for (size_t ti = 0; ti < PLLM_ARRAY_LEN(ins); ti++)
        for (int tr = 0; tr < 4; tr++, k++) {
            gemm_case c = {
                .m = 1 + (k * 7) % 19,
                .n = 3 + (k * 5) % 37,
                .k = 1 + (k * 11) % 45,
                .batch = 1 + k % 3,
                .ta = tr & 1,
                .tb = tr >> 1,
                .in = ins[ti],
                .out = k % 2 ? ins[ti] : PLLM_DTYPE_F32,
                .pad = k % 3,
                .broadcast_b = k % 4 == 3,
                .beta = k % 5 == 2 ? 0.5f : 0.0f,
            };
            test_gemm(dev, &rng, &c);
        }
    gemm_case big = {.m = 37,
                     .n = 129,
                     .k = 576,
                     .batch = 1,
                     .ta = false,
                     .tb = true,
                     .in = PLLM_DTYPE_F16,
                     .out = PLLM_DTYPE_F32};
    test_gemm(dev, &rng, &big);
    test_copies_and_graph(dev, &rng);
    test_validation(dev);
    pllm_cuda_dev_free(dev);
    return pllm_test_finish("cuemu_device");
}
