/*
 * cpu_gemm.c: the integer matmul path (cpu/gemm.h) on fresh random data with odd shapes.
 *
 *   1. the scalar reference against float64 math on the dequantized weights and the
 *      dequantized activations (q * dx): the canonical formula only reorders and rounds in
 *      float32, so the error must stay within a float32 summation bound; a mis-decoded block
 *      would be off by O(1);
 *   2. every dispatch path this machine has (packed panels, SIMD quantizer) against the scalar
 *      reference: BITWISE equal, for every weight type, n_tok 1 3 7 16 33, row ranges that are
 *      not multiples of the 16-row panel, and rows written outside [r0, r1) left untouched;
 *   3. batch invariance: each token alone, and the rows split in two calls, give the same bits;
 *   4. the quantizer: SIMD equal to the reference, |q dx - x| <= dx / 2.
 * Paths the machine lacks are reported as skipped and the others still run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "tests/cpu_gemm_rand.h"
#include "tests/testutil.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static const pllm_dtype g_qtypes[] = {PLLM_DTYPE_Q4_0, PLLM_DTYPE_Q4_1, PLLM_DTYPE_Q5_0, PLLM_DTYPE_Q5_1,
                                      PLLM_DTYPE_Q8_0, PLLM_DTYPE_Q4_K, PLLM_DTYPE_Q5_K, PLLM_DTYPE_Q6_K};

static void fill_x(float *X, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        X[i] = pllm_test_randf(&g_rng);
        if (i % 97 == 5) X[i] *= 30; /* an outlier now and then */
        if (i % 211 == 0) X[i] = 0;
    }
}

static void test_quant(const pllm_cpu_kernels *k)
{
    const int64_t K = 1536, T = 5;
    pllm_cpu_qact a, b;
    CHECK_OK(pllm_cpu_qact_init(&a, T, K));
    CHECK_OK(pllm_cpu_qact_init(&b, T, K));
    float *X = malloc(sizeof(float) * (size_t)(T * K));
    fill_x(X, T * K);
    for (int i = 0; i < 32; i++) X[64 + i] = 0; /* an all-zero block */
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        pllm_cpu_quant_ref(&a, t, X + t * K, 0, K / 32);
        k->quant(&b, t, X + t * K, 0, 7); /* in two parts: the block range is honoured */
        k->quant(&b, t, X + t * K + 7 * 32, 7, K / 32);
        for (int64_t i = 0; i < K; i++) {
            float dx = a.dx[t * K / 32 + i / 32];
            double e = fabs((double)a.qs[t * K + i] * dx - X[t * K + i]);
            if (dx > 0) worst = fmax(worst, e / dx);
        }
    }
    int diff = memcmp(a.qs, b.qs, (size_t)(T * K)) != 0 || memcmp(a.dx, b.dx, sizeof(float) * (size_t)(T * K / 32)) ||
               memcmp(a.xs, b.xs, sizeof(float) * (size_t)(T * K / 32)) || memcmp(a.sx, b.sx, sizeof(int32_t) * (size_t)(T * K / 32)) ||
               memcmp(a.sx16, b.sx16, sizeof(int32_t) * (size_t)(T * K / 16));
    fprintf(stderr, "  quant %-10s K=%lld tok=%lld  max |q dx - x| / dx %.4f  %s\n", k->name, (long long)K, (long long)T,
            worst, diff ? "DIFFERS from the reference  FAIL" : "bitwise equal to the reference");
    CHECK(!diff);
    CHECK(worst <= 0.5 + 1e-5);
    free(X);
    pllm_cpu_qact_free(&a);
    pllm_cpu_qact_free(&b);
}

/* One dtype, shape: the reference against float64, then each table against the reference. */
static void test_shape(pllm_dtype dt, int64_t K, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1)
{
    const size_t rb = pllm_dtype_row_bytes(dt, K);
    const int64_t ldy = n_rows + 3, cap_k = (K + 63) / 64 * 64;
    uint8_t *W = malloc(rb * (size_t)n_rows);
    float *X = malloc(sizeof(float) * (size_t)(n_tok * K)), *wrow = malloc(sizeof(float) * (size_t)K);
    float *Yr = malloc(sizeof(float) * (size_t)(n_tok * ldy)), *Y = malloc(sizeof(float) * (size_t)(n_tok * ldy));
    for (int64_t r = 0; r < n_rows; r++) pllm_test_random_row(W + (size_t)r * rb, dt, K, &g_rng);
    fill_x(X, n_tok * K);
    pllm_cpu_qact A;
    CHECK_OK(pllm_cpu_qact_init(&A, n_tok, cap_k));
    for (int64_t t = 0; t < n_tok; t++) pllm_cpu_quant_ref(&A, t, X + t * K, 0, K / 32);

    pllm_cpu_qweight Wr;
    CHECK_OK(pllm_cpu_qweight_init(&Wr, dt, W, rb, n_rows, K, false));
    for (int64_t i = 0; i < n_tok * ldy; i++) Yr[i] = NAN;
    pllm_cpu_qmatmul_ref(Yr, ldy, &A, &Wr, n_tok, r0, r1);

    /* 1. reference vs float64 on dequantized operands */
    const double u = 0x1p-24;
    double max_abs = 0, max_ratio = 0;
    int bad = 0;
    for (int64_t r = r0; r < r1; r++) {
        pllm_dequantize_row(wrow, W + (size_t)r * rb, dt, K);
        for (int64_t t = 0; t < n_tok; t++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                double xq = (double)A.qs[t * cap_k + k] * A.dx[t * cap_k / 32 + k / 32];
                s += (double)wrow[k] * xq;
                sa += fabs((double)wrow[k] * xq);
            }
            /* float32 chain over K/32 blocks of 2 terms, plus the rounding of the dequantized
             * weight and of the scale products: a few u per block, relative to sum |w x| */
            double bound = (2.0 * (double)K / 32 + 8) * u * sa * 4 + 1e-30;
            double e = fabs((double)Yr[t * ldy + r] - s);
            if (!(e <= bound)) bad++;
            max_abs = fmax(max_abs, e);
            if (e / bound > max_ratio) max_ratio = e / bound;
        }
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < ldy; r++)
            if ((r < r0 || r >= r1) && !isnan(Yr[t * ldy + r])) bad++;
    fprintf(stderr, "  %-5s K=%-4lld rows=%-3lld [%lld,%lld) tok=%-3lld ref vs f64: max_abs %.3g err/bound %.3g%s\n",
            pllm_dtype_name(dt), (long long)K, (long long)n_rows, (long long)r0, (long long)r1, (long long)n_tok, max_abs,
            max_ratio, bad ? "  FAIL" : "");
    CHECK(bad == 0);

    /* 2, 3. each table with an integer path against the reference, bitwise */
    for (int isa = 0; isa < PLLM_CPU_ISA_COUNT; isa++) {
        const pllm_cpu_kernels *k = pllm_cpu_kernels_get((pllm_cpu_isa)isa);
        if (!k || !k->qmatmul) continue;
        pllm_cpu_qweight Wk;
        CHECK_OK(pllm_cpu_qweight_init(&Wk, dt, W, rb, n_rows, K, k->qpacked));
        pllm_cpu_qact Ak;
        CHECK_OK(pllm_cpu_qact_init(&Ak, n_tok, cap_k));
        for (int64_t t = 0; t < n_tok; t++) k->quant(&Ak, t, X + t * K, 0, K / 32);
        for (int64_t i = 0; i < n_tok * ldy; i++) Y[i] = NAN;
        k->qmatmul(Y, ldy, &Ak, &Wk, n_tok, r0, r1);
        int diff = 0;
        double max_e = 0;
        for (int64_t i = 0; i < n_tok * ldy; i++)
            if (memcmp(&Y[i], &Yr[i], 4) != 0 && !(isnan(Y[i]) && isnan(Yr[i]))) {
                diff++;
                max_e = fmax(max_e, fabs((double)Y[i] - Yr[i]));
            }
        /* batch invariance: token by token, rows split at an odd place */
        int64_t cut = r0 + (r1 - r0) / 3;
        for (int64_t i = 0; i < n_tok * ldy; i++) Y[i] = NAN;
        for (int64_t t = n_tok - 1; t >= 0; t--) {
            pllm_cpu_qact one = Ak;
            one.qs += t * cap_k;
            one.dx += t * cap_k / 32;
            one.xs += t * cap_k / 32;
            one.sx += t * cap_k / 32;
            one.sx16 += t * cap_k / 16;
            k->qmatmul(Y + t * ldy, ldy, &one, &Wk, 1, r0, cut);
            k->qmatmul(Y + t * ldy, ldy, &one, &Wk, 1, cut, r1);
        }
        int bdiff = 0;
        for (int64_t i = 0; i < n_tok * ldy; i++)
            if (memcmp(&Y[i], &Yr[i], 4) != 0 && !(isnan(Y[i]) && isnan(Yr[i]))) bdiff++;
        if (isa != PLLM_CPU_ISA_SCALAR || n_tok == 33)
            fprintf(stderr, "    %-10s vs reference: %d outputs differ (max_abs %.3g), batch/split: %d differ%s\n", k->name, diff,
                    max_e, bdiff, diff || bdiff ? "  FAIL" : "");
        CHECK(diff == 0);
        CHECK(bdiff == 0);
        if (k->qpacked) { /* the same panels packed into a caller's buffer (the backend's arena) */
            const size_t nb = pllm_cpu_qweight_packed_bytes(dt, n_rows, K);
            CHECK(nb == Wk.panel_bytes * (size_t)pllm_cpu_qweight_panels(&Wk));
            uint8_t *buf = pllm_aligned_alloc(nb + 64);
            memset(buf, 0xa5, nb + 64);
            pllm_cpu_qweight Wb;
            CHECK_OK(pllm_cpu_qweight_alloc_in(&Wb, dt, W, rb, n_rows, K, buf));
            CHECK(Wb.packed == buf && !Wb.owns_packed && Wk.owns_packed);
            pllm_cpu_qweight_pack(&Wb, 0, pllm_cpu_qweight_panels(&Wb));
            CHECK(memcmp(buf, Wk.packed, nb) == 0);
            CHECK(buf[nb] == 0xa5 && buf[nb + 63] == 0xa5); /* nothing written past its size */
            pllm_cpu_qweight_free(&Wb);                     /* leaves buf to its owner */
            CHECK(buf[0] == Wk.packed[0]);
            pllm_aligned_free(buf);
        }
        pllm_cpu_qact_free(&Ak);
        pllm_cpu_qweight_free(&Wk);
    }
    pllm_cpu_qact_free(&A);
    free(W);
    free(X);
    free(wrow);
    free(Yr);
    free(Y);
}

int main(void)
{
    for (int isa = 0; isa < PLLM_CPU_ISA_COUNT; isa++) {
        const pllm_cpu_kernels *k = pllm_cpu_kernels_get((pllm_cpu_isa)isa);
        if (!k) fprintf(stderr, "skipped: this machine cannot run the %s table\n", pllm_cpu_isa_name((pllm_cpu_isa)isa));
        else if (!k->qmatmul) fprintf(stderr, "note: the %s table has no integer path (float math)\n", k->name);
        else test_quant(k);
    }
    /* 1..8: every small-tile case of the SIMD kernels (an MoE expert at batched decode gets a
     * few rows), then several tiles and a partial one */
    static const int64_t toks[] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 33};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(g_qtypes); i++) {
        pllm_dtype dt = g_qtypes[i];
        bool kq = pllm_dtype_block_elems(dt) == PLLM_QK_K;
        int64_t Ks[] = {kq ? 256 : 32, kq ? 768 : 96, kq ? 1536 : 608};
        for (size_t j = 0; j < PLLM_ARRAY_LEN(toks); j++) {
            int64_t K = Ks[j % 3], rows = 37 + 16 * (int64_t)(j % 2);
            test_shape(dt, K, rows, toks[j], j % 2 ? 5 : 0, rows - (j % 3 == 1 ? 3 : 0));
        }
    }
    return pllm_test_finish("cpu_gemm");
}
