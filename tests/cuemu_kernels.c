/*
 * cuemu_kernels: pllm's CUDA kernels (cuda/rmsnorm.cu, cuda/embedding.cu) run through the
 * device API against CPU references on fresh random inputs of shapes chosen
 * to break indexing (row counts and hidden sizes that are not multiples of anything, sizes below,
 * at and above one warp and one 1024-thread block). Prints the max abs/rel error of each case.
 * Tolerances: F32 outputs 1e-5 relative (norm-wise), F16 2e-3, BF16 1e-2; the residual update
 * and the embedding gather must be exact.
 *
 * Built twice: against the emulator (cuemu_kernels, runs everywhere) and against the real CUDA
 * build (cuemu_kernels_gpu, which skips when no GPU answers and otherwise runs the same checks
 * on the device).
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

static float load_out(const void *p, pllm_dtype t, size_t i)
{
    switch (t) {
    case PLLM_DTYPE_F16:
        return pllm_fp16_to_fp32(((const uint16_t *)p)[i]);
    case PLLM_DTYPE_BF16:
        return pllm_bf16_to_fp32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

/* Reference: residual += x (float, as the kernel adds), then out = r / rms(r) * w in double. */
static void ref_rmsnorm(float *out, float *res, const float *x, const float *w, int rows, int dim,
                        float eps)
{
    for (int r = 0; r < rows; r++) {
        float *rr = res + (size_t)r * dim;
        if (x)
            for (int i = 0; i < dim; i++) rr[i] = rr[i] + x[(size_t)r * dim + i];
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)rr[i] * rr[i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) out[(size_t)r * dim + i] = (float)(rr[i] * inv * w[i]);
    }
}

static void test_rmsnorm(pllm_cuda_dev *dev, uint64_t *rng, int rows, int dim, pllm_dtype ot,
                         bool with_x)
{
    size_t n = (size_t)rows * dim, osz = pllm_dtype_block_bytes(ot);
    float *res = malloc(n * 4), *x = malloc(n * 4), *w = malloc((size_t)dim * 4),
          *ref = malloc(n * 4), *got = malloc(n * 4), *res_got = malloc(n * 4);
    void *out_h = malloc(n * osz);
    float scale = 1.0f + 10.0f * (pllm_test_randf(rng) + 1.0f); /* magnitudes vary per case */
    for (size_t i = 0; i < n; i++)
        res[i] = scale * pllm_test_randf(rng), x[i] = pllm_test_randf(rng);
    for (int i = 0; i < dim; i++) w[i] = 1.0f + 0.5f * pllm_test_randf(rng);
    float eps = 1e-5f;
    void *d_out = NULL, *d_res = NULL, *d_x = NULL, *d_w = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, n * osz));
    CHECK_OK(pllm_cuda_alloc(dev, &d_res, n * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_x, n * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_w, (size_t)dim * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_res, res, n * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_x, x, n * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_w, w, (size_t)dim * 4));
    CHECK_OK(pllm_cuda_rmsnorm_residual(dev, d_out, ot, d_res, with_x ? d_x : NULL, d_w, rows, dim,
                                        eps));
    CHECK_OK(pllm_cuda_download(dev, out_h, d_out, n * osz));
    CHECK_OK(pllm_cuda_download(dev, res_got, d_res, n * 4));
    CHECK_OK(pllm_cuda_sync(dev));
    ref_rmsnorm(ref, res, with_x ? x : NULL, w, rows, dim, eps);
    for (size_t i = 0; i < n; i++) got[i] = load_out(out_h, ot, i);
    double max_abs, rel = pllm_test_rel_err(got, ref, n, &max_abs);
    double tol = ot == PLLM_DTYPE_F32 ? 1e-5 : ot == PLLM_DTYPE_F16 ? 2e-3 : 1e-2;
    size_t res_bad = 0;
    for (size_t i = 0; i < n; i++) res_bad += memcmp(&res_got[i], &res[i], 4) != 0;
    fprintf(stderr,
            "  rmsnorm rows=%-3d dim=%-5d out=%-4s x=%d: max abs err %.3g, rel err %.3g (tol "
            "%.0e), residual %s\n",
            rows, dim, pllm_dtype_name(ot), with_x, max_abs, rel, tol, res_bad ? "WRONG" : "exact");
    CHECK(rel <= tol);
    CHECK(res_bad == 0);
    pllm_cuda_free(dev, d_out), pllm_cuda_free(dev, d_res), pllm_cuda_free(dev, d_x),
        pllm_cuda_free(dev, d_w);
    free(res), free(x), free(w), free(ref), free(got), free(res_got), free(out_h);
}

static void test_embedding(pllm_cuda_dev *dev, uint64_t *rng, int n_vocab, int dim, int n_tok,
                           pllm_dtype tt)
{
    size_t tn = (size_t)n_vocab * dim, esz = pllm_dtype_block_bytes(tt);
    void *table = malloc(tn * esz);
    int32_t *tok = malloc((size_t)n_tok * 4);
    float *got = malloc((size_t)n_tok * dim * 4);
    for (size_t i = 0; i < tn; i++) {
        float v = 4.0f * pllm_test_randf(rng);
        if (tt == PLLM_DTYPE_F16)
            ((uint16_t *)table)[i] = pllm_fp32_to_fp16(v);
        else if (tt == PLLM_DTYPE_BF16)
            ((uint16_t *)table)[i] = pllm_fp32_to_bf16(v);
        else
            ((float *)table)[i] = v;
    }
    for (int t = 0; t < n_tok; t++) tok[t] = (int32_t)(pllm_test_rand(rng) % (uint64_t)n_vocab);
    tok[0] = n_vocab - 1; /* the edges */
    if (n_tok > 1) tok[n_tok - 1] = 0;
    void *d_table = NULL, *d_tok = NULL, *d_out = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_table, tn * esz));
    CHECK_OK(pllm_cuda_alloc(dev, &d_tok, (size_t)n_tok * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, (size_t)n_tok * dim * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_table, table, tn * esz));
    CHECK_OK(pllm_cuda_upload(dev, d_tok, tok, (size_t)n_tok * 4));
    CHECK_OK(pllm_cuda_embedding(dev, d_out, d_table, tt, d_tok, n_tok, dim, n_vocab));
    CHECK_OK(pllm_cuda_download(dev, got, d_out, (size_t)n_tok * dim * 4));
    CHECK_OK(pllm_cuda_sync(dev));
    size_t bad = 0;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < dim; i++) {
            float want = load_out(table, tt, (size_t)tok[t] * dim + i);
            bad += memcmp(&got[(size_t)t * dim + i], &want, 4) != 0;
        }
    fprintf(stderr,
            "  embedding vocab=%-4d dim=%-4d tokens=%-3d table=%-4s: %zu of %zu values differ\n",
            n_vocab, dim, n_tok, pllm_dtype_name(tt), bad, (size_t)n_tok * dim);
    CHECK(bad == 0);
    pllm_cuda_free(dev, d_table), pllm_cuda_free(dev, d_tok), pllm_cuda_free(dev, d_out);
    free(table), free(tok), free(got);
}

int main(void)
{
    uint64_t seed = strtoull(pllm_test_env("PLLM_TEST_SEED", "0"), NULL, 10);
    if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "cuemu_kernels: seed %llu (PLLM_TEST_SEED to repeat)\n",
            (unsigned long long)seed);
    uint64_t rng = seed;
    if (pllm_cuda_dev_count(NULL, 0) == 0)
        pllm_test_skip("no CUDA device answers (the emulated build runs these checks)");
    pllm_cuda_dev *dev = NULL;
    CHECK_OK(pllm_cuda_dev_init(&dev, 0));
    if (!dev) return pllm_test_finish("cuemu_kernels");
    double t0 = pllm_now();

    static const int dims[] = {1, 7, 31, 33, 96, 577, 1000, 1025, 2050, 4099};
    static const int rows[] = {1, 3, 7, 37};
    static const pllm_dtype outs[] = {PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16};
    int k = 0;
    for (size_t di = 0; di < PLLM_ARRAY_LEN(dims); di++)
        for (size_t oi = 0; oi < PLLM_ARRAY_LEN(outs); oi++, k++)
            test_rmsnorm(dev, &rng, rows[k % 4], dims[di], outs[oi], k % 5 != 4);

    static const int edims[] = {1, 17, 300, 577};
    static const pllm_dtype tabs[] = {PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16};
    k = 0;
    for (size_t di = 0; di < PLLM_ARRAY_LEN(edims); di++)
        for (size_t ti = 0; ti < PLLM_ARRAY_LEN(tabs); ti++, k++)
            test_embedding(dev, &rng, k % 2 ? 5 : 1000, edims[di], 1 + (k * 7) % 40, tabs[ti]);

            /* A token id outside the vocabulary traps: the launch fails, loudly. Last: it is
             * sticky. */
#ifdef PLLM_CUDA_EMU
    pllm_cuemu_set_verbose(0);
#endif
    int32_t bad_tok[2] = {1, 5};
    void *d_table = NULL, *d_tok = NULL, *d_out = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_table, 5 * 8 * 4));
    CHECK_OK(pllm_cuda_alloc(dev, &d_tok, 8));
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, 2 * 8 * 4));
    CHECK_OK(pllm_cuda_upload(dev, d_tok, bad_tok, 8));
    pllm_status st = pllm_cuda_embedding(dev, d_out, d_table, PLLM_DTYPE_F32, d_tok, 2, 8, 5);
    if (st == PLLM_OK) st = pllm_cuda_sync(dev);
    fprintf(stderr, "  out-of-vocabulary id: %s\n", pllm_errmsg());
    CHECK(st != PLLM_OK);
#ifdef PLLM_CUDA_EMU
    CHECK(strstr(pllm_errmsg(), "__trap") != NULL);
#endif
    pllm_cuda_free(dev, d_table), pllm_cuda_free(dev, d_tok), pllm_cuda_free(dev, d_out);

#ifdef PLLM_CUDA_EMU
    pllm_cuemu_stats s;
    pllm_cuemu_get_stats(&s);
    fprintf(stderr,
            "cuemu_kernels: %llu launches, %llu blocks, %llu threads, %llu switches in %.2f s\n",
            (unsigned long long)s.launches, (unsigned long long)s.blocks,
            (unsigned long long)s.threads, (unsigned long long)s.switches, pllm_now() - t0);
#else
    fprintf(stderr, "cuemu_kernels: %.2f s on the device\n", pllm_now() - t0);
#endif
    pllm_cuda_dev_free(dev);
    return pllm_test_finish("cuemu_kernels");
}
