/*
 * gemm_lab.c: the kernel lab for the CPU matmul (not a test; run by hand).
 *
 *     gemm_lab [--quick] [--dtype Q4_1] [--ms 300]
 *
 * Variants, each first checked against the scalar reference on random data with odd shapes
 * (K per dtype block size, n_tok 1 3 7 16 33 512, row ranges not multiples of the 16-row panel;
 * the integer variants must be bitwise equal, the float kernels within float rounding), then
 * timed on the SmolLM2-135M / TinyLlama-1.1B matrix shapes for n_tok 1, 16 and 512, one thread:
 *   f32        the float kernels (cpu/kernels_avx512.c: blocks expanded to float32, FMAs)
 *   vnni-nt8   the production integer kernel (cpu/gemm_avx512.c: 16-row panels, 8-token tiles,
 *              64-token blocks)
 *   vnni-notb  the same without the outer loop over blocks of 64 tokens (all tokens per panel)
 *   vnni-nopf  the same with prefetch distance 0 (no look-ahead in the panel stream)
 *   avx2-int   the AVX2 integer kernel (cpu/gemm_avx2.c: vpmaddubsw, 8-row halves, 4-token tiles)
 * GOP/s counts 2 * rows * K * n_tok operations (multiply and add) per call; the integer
 * variants' time includes quantizing the activations. Only winners go into cpu/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "tests/cpu_gemm_rand.h"

/* lab variants of the production kernel file, under other names */
#define LAB_PROTO(NAME)                                                                                                \
    void NAME##_qmm(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok,  \
                    int64_t r0, int64_t r1);                                                                           \
    void NAME##_quant(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1);
LAB_PROTO(lab_nt4)
LAB_PROTO(lab_nopf)
#define lab_qmm_nt4 lab_nt4_qmm
#define lab_quant_nt4 lab_nt4_quant
#define lab_qmm_nopf lab_nopf_qmm
#define lab_quant_nopf lab_nopf_quant
#define pllm_cpu_qmatmul_avx512vnni lab_qmm_nt4
#define pllm_cpu_quant_avx512 lab_quant_nt4
#define TOK_BLOCK 1000000000
#include "cpu/gemm_avx512.c"
#undef TOK_BLOCK
#undef pllm_cpu_qmatmul_avx512vnni
#undef pllm_cpu_quant_avx512
#undef PF_DIST

#define pllm_cpu_qmatmul_avx512vnni lab_qmm_nopf
#define pllm_cpu_quant_avx512 lab_quant_nopf
#define PF_DIST 0
#define prefetch prefetch_nopf
#define bcast4 bcast4_nopf
#define h16 h16_nopf
#define u8f u8f_nopf
#define block_dots block_dots_nopf
#define panel_tile panel_tile_nopf
#define qmatmul qmatmul_nopf
#define qmm_q4_0 nopf_q4_0
#define qmm_q4_1 nopf_q4_1
#define qmm_q5_0 nopf_q5_0
#define qmm_q5_1 nopf_q5_1
#define qmm_q8_0 nopf_q8_0
#define qmm_q4_k nopf_q4_k
#define qmm_q5_k nopf_q5_k
#define qmm_q6_k nopf_q6_k
#include "cpu/gemm_avx512.c"

typedef struct variant {
    const char *name;
    pllm_cpu_qmatmul_fn fn; /* NULL: the float kernels */
} variant;

static const variant g_variants[] = {
    {"f32", NULL},
    {"vnni-nt8", pllm_cpu_qmatmul_avx512vnni},
    {"vnni-notb", lab_qmm_nt4},
    {"vnni-nopf", lab_qmm_nopf},
    {"avx2-int", pllm_cpu_qmatmul_avx2}};

static const pllm_dtype g_types[] = {PLLM_DTYPE_Q4_0, PLLM_DTYPE_Q4_1, PLLM_DTYPE_Q5_0, PLLM_DTYPE_Q5_1,
                                     PLLM_DTYPE_Q8_0, PLLM_DTYPE_Q4_K, PLLM_DTYPE_Q5_K, PLLM_DTYPE_Q6_K};

static uint64_t g_rng = 42;

typedef struct problem {
    pllm_dtype dt;
    int64_t K, rows, n_tok;
    uint8_t *W;
    size_t rb;
    float *X, *Y, *scratch;
    pllm_cpu_qweight qw;
    pllm_cpu_qact qa;
} problem;

static void problem_init(problem *p, pllm_dtype dt, int64_t K, int64_t rows, int64_t n_tok)
{
    memset(p, 0, sizeof *p);
    *p = (problem){.dt = dt, .K = K, .rows = rows, .n_tok = n_tok, .rb = pllm_dtype_row_bytes(dt, K)};
    p->W = pllm_aligned_alloc(p->rb * (size_t)rows);
    p->X = malloc(sizeof(float) * (size_t)(n_tok * K));
    p->Y = malloc(sizeof(float) * (size_t)(n_tok * rows));
    p->scratch = malloc(sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < rows; r++) pllm_test_random_row(p->W + (size_t)r * p->rb, dt, K, &g_rng);
    for (int64_t i = 0; i < n_tok * K; i++) p->X[i] = pllm_test_randf(&g_rng);
    if (pllm_cpu_qweight_init(&p->qw, dt, p->W, p->rb, rows, K, true) ||
        pllm_cpu_qact_init(&p->qa, n_tok, (K + 63) / 64 * 64)) {
        fprintf(stderr, "gemm_lab: %s\n", pllm_errmsg());
        exit(1);
    }
}

static void problem_free(problem *p)
{
    pllm_aligned_free(p->W);
    free(p->X);
    free(p->Y);
    free(p->scratch);
    pllm_cpu_qweight_free(&p->qw);
    pllm_cpu_qact_free(&p->qa);
}

static void run(const variant *v, problem *p, int64_t r0, int64_t r1)
{
    if (!v->fn) {
        pllm_cpu_kernels_get(PLLM_CPU_ISA_AVX512)->matmul[p->dt](p->Y, p->rows, p->X, p->K, p->W, p->rb, p->K, p->n_tok, r0,
                                                                  r1, p->scratch);
        return;
    }
    for (int64_t t = 0; t < p->n_tok; t++) pllm_cpu_quant_avx512(&p->qa, t, p->X + t * p->K, 0, p->K / 32);
    v->fn(p->Y, p->rows, &p->qa, &p->qw, p->n_tok, r0, r1);
}

/* Variant v against the scalar reference on one odd shape; returns the number of bad outputs. */
static int check(const variant *v, pllm_dtype dt, int64_t K, int64_t rows, int64_t n_tok)
{
    problem p;
    problem_init(&p, dt, K, rows, n_tok);
    const int64_t r0 = 3, r1 = rows - 5;
    float *ref = malloc(sizeof(float) * (size_t)(n_tok * rows));
    int bad = 0;
    if (v->fn) {
        for (int64_t t = 0; t < n_tok; t++) pllm_cpu_quant_ref(&p.qa, t, p.X + t * K, 0, K / 32);
        pllm_cpu_qmatmul_ref(ref, rows, &p.qa, &p.qw, n_tok, r0, r1);
    } else {
        pllm_cpu_kernels_scalar.matmul[dt](ref, rows, p.X, K, p.W, p.rb, K, n_tok, r0, r1, p.scratch);
    }
    run(v, &p, r0, r1);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) {
            float a = p.Y[t * rows + r], b = ref[t * rows + r];
            if (v->fn ? memcmp(&a, &b, 4) != 0 : !(fabsf(a - b) <= 1e-4f * (1 + fabsf(b)))) bad++;
        }
    free(ref);
    problem_free(&p);
    return bad;
}

/* Thread CPU time: the machine is shared, and a call preempted by another process would count
 * the time it waited in wall time. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    double budget = 0.3;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc) budget = atof(argv[++i]) / 1e3;
        else if (strcmp(argv[i], "--quick") == 0) quick = true;
        else {
            fprintf(stderr, "usage: gemm_lab [--quick] [--dtype Q4_1] [--ms 300]\n");
            return 2;
        }
    }
    if (!pllm_cpu_isa_available(PLLM_CPU_ISA_AVX512VNNI)) {
        fprintf(stderr, "gemm_lab: this machine has no AVX-512 VNNI; nothing to compare\n");
        return 0;
    }
    static const int64_t toks[] = {1, 3, 7, 16, 33, 512};
    static const struct { int64_t K, rows; const char *what; } shapes[] = {
        {576, 1536, "135M gate/up"}, {1536, 576, "135M down"}, {2048, 5632, "1.1B gate/up"}};
    int total_bad = 0;
    for (size_t d = 0; d < PLLM_ARRAY_LEN(g_types); d++) {
        pllm_dtype dt = g_types[d];
        if (only && strcmp(only, pllm_dtype_name(dt)) != 0) continue;
        const bool kq = pllm_dtype_block_elems(dt) == PLLM_QK_K;
        /* correctness on odd shapes */
        for (size_t v = 0; v < PLLM_ARRAY_LEN(g_variants); v++) {
            int bad = 0;
            for (size_t i = 0; i < PLLM_ARRAY_LEN(toks); i++)
                bad += check(&g_variants[v], dt, kq ? 256 * (int64_t)(1 + i % 3) : 32 * (int64_t)(1 + 2 * i), 16 * (int64_t)(i % 3) + 29,
                             toks[i]);
            printf("%-5s %-10s check vs scalar reference (n_tok 1..512, odd shapes): %s\n", pllm_dtype_name(dt),
                   g_variants[v].name, bad ? "FAIL" : g_variants[v].fn ? "bitwise equal" : "within 1e-4");
            total_bad += bad;
        }
        /* timing */
        for (size_t s = 0; s < PLLM_ARRAY_LEN(shapes) - (quick ? 1 : 0); s++)
            for (int ti = 0; ti < 4; ti++) {
                const int64_t nt = ti == 0 ? 1 : ti == 1 ? 16 : ti == 2 ? 64 : 512;
                problem p;
                const int64_t be = pllm_dtype_block_elems(dt); /* K-quants: 576 -> 768 */
                problem_init(&p, dt, (shapes[s].K + be - 1) / be * be, shapes[s].rows, nt);
                printf("%-5s %-13s K=%-5lld rows=%-5lld tok=%-3lld", pllm_dtype_name(dt), shapes[s].what, (long long)p.K,
                       (long long)p.rows, (long long)nt);
                for (size_t v = 0; v < PLLM_ARRAY_LEN(g_variants); v++) {
                    run(&g_variants[v], &p, 0, p.rows); /* warm-up */
                    double best = 1e30, t_end = now() + budget;
                    int reps = 0;
                    while (now() < t_end || reps < 3) {
                        double t0 = now();
                        run(&g_variants[v], &p, 0, p.rows);
                        best = fmin(best, now() - t0);
                        reps++;
                    }
                    printf("  %s %6.1f", g_variants[v].name, 2.0 * (double)p.rows * (double)p.K * (double)nt / best / 1e9);
                }
                printf("  GOP/s\n");
                fflush(stdout);
                problem_free(&p);
            }
    }
    return total_bad ? 1 : 0;
}
